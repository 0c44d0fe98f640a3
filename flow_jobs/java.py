"""Java classes through py4j, by their full names, each asked for once per process."""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass, JavaMember, JVMView


def java_class(jvm: Any, name: str) -> Any:
    """The class ``name`` (fully qualified) of the JVM behind the py4j view ``jvm``.

    ``jvm.org.apache.x.Y`` walks the name one part at a time, and py4j asks the JVM about
    each prefix ("org", "org.apache", ...) as a class, then under each of the view's
    imports, and every miss searches all of Spark's jars for it. The full name is one
    question the class loader answers at once (BENCHMARKS.md, "How long make test
    takes").
    """
    return getattr(jvm, name)


class _KeptClass(JavaClass):
    """A class whose static methods and nested classes are asked for once: py4j asks
    the JVM for ``Cls.method`` at every call (``F.col`` is two questions before the
    call itself), and neither answer can change while the JVM runs. Fields are asked
    for each time (their values can)."""

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        if type(found) is JavaMember:
            self.__dict__[name] = found
        elif type(found) is JavaClass:
            found.__class__ = _KeptClass
            self.__dict__[name] = found
        return found


class _KeptView(JVMView):
    """A view that keeps each class it found. PySpark names its helpers by their short
    names (``jvm.PythonUtils``, ``jvm.PythonSQLUtils``, thousands of times a run: every
    ``F.*`` call and column list), and py4j then tries the bare name before the view's
    imports: a miss that searches every jar on the class path, each time."""

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        if type(found) is JavaClass:
            found.__class__ = _KeptClass
            self.__dict__[name] = found
        return found


def keep_lookups(view: Any) -> None:
    """Make py4j's ``view`` (``SparkContext._jvm``) keep what it finds, from now on."""
    if type(view) is JVMView:
        view.__class__ = _KeptView
