"""Java classes through py4j, by their full names."""

from __future__ import annotations

from typing import Any


def java_class(jvm: Any, name: str) -> Any:
    """The class ``name`` (fully qualified) of the JVM behind the py4j view ``jvm``.

    ``jvm.org.apache.x.Y`` walks the name one part at a time, and py4j asks the JVM about
    each prefix ("org", "org.apache", ...) as a class, then under each of the view's
    imports, and every miss searches all of Spark's jars for it. The full name is one
    question the class loader answers at once (BENCHMARKS.md, "How long make test
    takes").
    """
    return getattr(jvm, name)
