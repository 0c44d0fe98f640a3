"""A schema registry that speaks Confluent's REST API, for the tests, the demo and the bench.

No Confluent-compatible registry server can be installed from the package registries
here, so this is a small one: the endpoints confluent-kafka's ``SchemaRegistryClient``
and its serializers call, over an in-memory store, served on a local port like the
embedded broker (``flow_jobs_dev.broker``). ``tests/test_schema_registry.py`` proves it
with that client and its ``AvroSerializer`` / ``AvroDeserializer``.

What it implements, as Confluent documents it:

* ``POST /subjects/{s}/versions``: register a schema under a subject; the same schema
  (same type, same text once parsed, same references) keeps its id everywhere and its
  version under the subject; a schema the subject's compatibility refuses is HTTP 409.
* ``POST /subjects/{s}``: look a schema up under a subject (40403 when absent).
* ``GET /schemas/ids/{id}``, ``GET /schemas/ids/{id}/versions``, ``GET /subjects``,
  ``GET /subjects/{s}/versions``, ``GET /subjects/{s}/versions/{v|latest}``,
  ``GET /schemas/types``.
* ``GET|PUT /config`` and ``/config/{s}``: the compatibility level (``BACKWARD`` by
  default, as Confluent's); ``POST /compatibility/subjects/{s}/versions/{v|latest}``.
  Avro compatibility follows Avro's schema resolution (``avro_can_read``): BACKWARD,
  the new schema reads what the old one wrote; FORWARD, the old reads the new; FULL,
  both; the ``_TRANSITIVE`` levels against every version, the others against the last;
  NONE, anything. Protobuf and JSON Schema are stored and served but not checked
  (every change is compatible here).

Errors are Confluent's JSON (``{"error_code": 40401, "message": ...}``) with its HTTP
status, so the client raises the ``SchemaRegistryError`` a real registry would cause.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
TYPES = ("AVRO", "PROTOBUF", "JSON")


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Stored:
    """One schema, with the id every subject shares for it."""

    id: int
    schema_type: str
    schema: str
    references: tuple[tuple[str, str, int], ...]  # (name, subject, version)

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != "AVRO":  # Confluent leaves the default type out
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [
                {"name": n, "subject": s, "version": v} for n, s, v in self.references
            ]
        return out


@dataclass
class Registry:
    """The in-memory store: schemas by id, each subject's versions (ids in order) and
    compatibility levels. Thread-safe: the server handles requests on threads."""

    default_level: str = "BACKWARD"
    schemas: dict[int, Stored] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)
    levels: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, subject: str, body: dict[str, Any]) -> tuple[Stored, int]:
        with self.lock:
            candidate = self._candidate(body)
            versions = self.subjects.setdefault(subject, [])
            for i, schema_id in enumerate(versions):
                if self._same(self.schemas[schema_id], candidate):
                    return self.schemas[schema_id], i + 1
            if not self._compatible(subject, candidate, [self.schemas[v] for v in versions]):
                raise RegistryError(
                    409,
                    409,
                    f"Schema being registered is incompatible with an earlier schema for "
                    f"subject {subject!r} ({self.level(subject)})",
                )
            stored = next((s for s in self.schemas.values() if self._same(s, candidate)), None)
            if stored is None:
                stored = Stored(len(self.schemas) + 1, *candidate)
                self.schemas[stored.id] = stored
            versions.append(stored.id)
            return stored, len(versions)

    def lookup(self, subject: str, body: dict[str, Any]) -> tuple[Stored, int]:
        with self.lock:
            candidate = self._candidate(body)
            for i, schema_id in enumerate(self._versions(subject)):
                if self._same(self.schemas[schema_id], candidate):
                    return self.schemas[schema_id], i + 1
        raise RegistryError(404, 40403, "Schema not found")

    def by_id(self, schema_id: int) -> Stored:
        with self.lock:
            if schema_id not in self.schemas:
                raise RegistryError(404, 40403, f"Schema {schema_id} not found")
            return self.schemas[schema_id]

    def version(self, subject: str, version: str) -> tuple[Stored, int]:
        with self.lock:
            versions = self._versions(subject)
            number = len(versions) if version == "latest" else _int(version, 42202)
            if not 1 <= number <= len(versions):
                raise RegistryError(404, 40402, f"Version {version} not found.")
            return self.schemas[versions[number - 1]], number

    def versions_of(self, schema_id: int) -> list[dict[str, Any]]:
        with self.lock:
            return [
                {"subject": s, "version": i + 1}
                for s, ids in self.subjects.items()
                for i, v in enumerate(ids)
                if v == schema_id
            ]

    def level(self, subject: str | None = None) -> str:
        return self.levels.get(subject or "", self.default_level)

    def set_level(self, subject: str | None, level: str) -> str:
        if level not in LEVELS:
            raise RegistryError(422, 42203, f"Invalid compatibility level {level!r}")
        if subject is None:
            self.default_level = level
        else:
            self.levels[subject] = level
        return level

    def compatible(self, subject: str, version: str, body: dict[str, Any]) -> bool:
        candidate = self._candidate(body)
        with self.lock:
            versions = self._versions(subject)
            if version == "latest":
                earlier = [self.schemas[v] for v in versions]
            else:
                number = _int(version, 42202)
                if not 1 <= number <= len(versions):
                    raise RegistryError(404, 40402, f"Version {version} not found.")
                earlier = [self.schemas[versions[number - 1]]]
            return self._compatible(subject, candidate, earlier)

    # -- rules ---------------------------------------------------------------------

    def _versions(self, subject: str) -> list[int]:
        if subject not in self.subjects or not self.subjects[subject]:
            raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
        return self.subjects[subject]

    @staticmethod
    def _candidate(body: dict[str, Any]) -> tuple[str, str, tuple[tuple[str, str, int], ...]]:
        schema_type = body.get("schemaType") or "AVRO"
        if schema_type not in TYPES:
            raise RegistryError(422, 42201, f"Unknown schema type {schema_type!r}")
        text = body.get("schema")
        if not isinstance(text, str):
            raise RegistryError(422, 42201, "Either schema or schemaType is invalid")
        if schema_type in ("AVRO", "JSON"):
            try:
                json.loads(text)
            except ValueError as e:
                raise RegistryError(422, 42201, f"Invalid schema: {e}") from None
        references = tuple(
            (r["name"], r["subject"], int(r["version"])) for r in body.get("references") or []
        )
        return schema_type, text, references

    @staticmethod
    def _same(stored: Stored, candidate: tuple[str, str, tuple[Any, ...]]) -> bool:
        schema_type, text, references = candidate
        if stored.schema_type != schema_type or stored.references != references:
            return False
        if schema_type == "PROTOBUF":
            return stored.schema.strip() == text.strip()
        return json.loads(stored.schema) == json.loads(text)

    def _compatible(
        self, subject: str, candidate: tuple[str, str, tuple[Any, ...]], earlier: list[Stored]
    ) -> bool:
        level = self.level(subject)
        schema_type, text, _ = candidate
        if level == "NONE" or schema_type != "AVRO" or not earlier:
            return True
        against = earlier if level.endswith("_TRANSITIVE") else earlier[-1:]
        new = json.loads(text)
        for old in (json.loads(s.schema) for s in against if s.schema_type == "AVRO"):
            if level.startswith(("BACKWARD", "FULL")) and not avro_can_read(new, old):
                return False
            if level.startswith(("FORWARD", "FULL")) and not avro_can_read(old, new):
                return False
        return True


def _int(text: str, code: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise RegistryError(422, code, f"Invalid version {text!r}") from None


# -- Avro schema resolution ------------------------------------------------------------

_PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}


def avro_can_read(reader: Any, writer: Any) -> bool:
    """Whether data written with ``writer`` resolves to ``reader`` under Avro's schema
    resolution rules (the specification's "Schema Resolution"): promotions, record
    fields matched by name (a reader field missing from the writer needs a default),
    enum symbols, union branches, arrays, maps, fixed sizes, named types by name."""
    return _Resolver(reader, writer).resolves(reader, writer)


class _Resolver:
    def __init__(self, reader: Any, writer: Any) -> None:
        self.reader_names: dict[str, Any] = {}
        self.writer_names: dict[str, Any] = {}
        _collect_names(reader, self.reader_names, "")
        _collect_names(writer, self.writer_names, "")
        self.assumed: set[tuple[str, str]] = set()  # recursive records being compared

    def resolves(self, reader: Any, writer: Any) -> bool:
        reader = self._named(reader, self.reader_names)
        writer = self._named(writer, self.writer_names)
        if isinstance(writer, list):  # every branch the writer may have used must resolve
            return all(self.resolves(reader, branch) for branch in writer)
        if isinstance(reader, list):
            return any(self.resolves(branch, writer) for branch in reader)
        r_type, w_type = _type(reader), _type(writer)
        if w_type in _PROMOTIONS and r_type in _PROMOTIONS[w_type]:
            return _logical_ok(reader, writer)
        if r_type != w_type:
            return False
        if r_type in ("null", "boolean", "int", "long", "float", "double", "bytes", "string"):
            return True
        if r_type == "array":
            return self.resolves(reader["items"], writer["items"])
        if r_type == "map":
            return self.resolves(reader["values"], writer["values"])
        if not _same_name(reader, writer):
            return False
        if r_type == "fixed":
            return bool(reader.get("size") == writer.get("size"))
        if r_type == "enum":
            missing = set(writer.get("symbols", [])) - set(reader.get("symbols", []))
            return not missing or "default" in reader
        if r_type == "record":
            key = (reader.get("name", ""), writer.get("name", ""))
            if key in self.assumed:
                return True
            self.assumed.add(key)
            written = {f["name"]: f for f in writer.get("fields", [])}
            for f in reader.get("fields", []):
                source = written.get(f["name"]) or next(
                    (written[a] for a in f.get("aliases", []) if a in written), None
                )
                if source is None:
                    if "default" not in f:
                        return False
                elif not self.resolves(f["type"], source["type"]):
                    return False
            return True
        return False

    @staticmethod
    def _named(schema: Any, names: dict[str, Any]) -> Any:
        if isinstance(schema, str) and schema in names:
            return names[schema]
        return schema


def _type(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("type"))
    return str(schema)


def _logical_ok(reader: Any, writer: Any) -> bool:
    """A promotion keeps the value (int -> long...); only a decimal's scale must match."""
    decimals = (
        isinstance(reader, dict)
        and isinstance(writer, dict)
        and reader.get("logicalType") == writer.get("logicalType") == "decimal"
    )
    return not decimals or reader.get("scale", 0) == writer.get("scale", 0)


def _same_name(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    def short(name: str) -> str:
        return name.rsplit(".", 1)[-1]

    names = {short(reader.get("name", "")), *(short(a) for a in reader.get("aliases", []))}
    return short(writer.get("name", "")) in names


def _collect_names(schema: Any, names: dict[str, Any], namespace: str) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _collect_names(branch, names, namespace)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed", "error"):
        space = schema.get("namespace", namespace)
        name = schema.get("name", "")
        full = name if "." in name else (f"{space}.{name}" if space else name)
        names[name], names[full] = schema, schema
        namespace = space
    for f in schema.get("fields", []) if kind in ("record", "error") else []:
        _collect_names(f.get("type"), names, namespace)
    if kind == "array":
        _collect_names(schema.get("items"), names, namespace)
    if kind == "map":
        _collect_names(schema.get("values"), names, namespace)
    if isinstance(kind, dict | list):
        _collect_names(kind, names, namespace)


# -- HTTP ------------------------------------------------------------------------------

_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (m, re.compile(p), h)
    for m, p, h in (
        ("GET", r"^/schemas/types$", "types"),
        ("GET", r"^/schemas/ids/(\d+)$", "schema_by_id"),
        ("GET", r"^/schemas/ids/(\d+)/versions$", "versions_by_id"),
        ("GET", r"^/subjects$", "subjects"),
        ("GET", r"^/subjects/([^/]+)/versions$", "versions"),
        ("GET", r"^/subjects/([^/]+)/versions/([^/]+)$", "version"),
        ("POST", r"^/subjects/([^/]+)/versions$", "register"),
        ("POST", r"^/subjects/([^/]+)$", "lookup"),
        ("GET", r"^/config$", "get_config"),
        ("PUT", r"^/config$", "put_config"),
        ("GET", r"^/config/([^/]+)$", "get_config"),
        ("PUT", r"^/config/([^/]+)$", "put_config"),
        ("POST", r"^/compatibility/subjects/([^/]+)/versions/([^/]+)$", "compatibility"),
    )
]


def _handler(registry: Registry, authorization: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet, as a test server
            return

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_PUT(self) -> None:
            self._route("PUT")

        def _route(self, method: str) -> None:
            path = urlsplit(self.path).path.rstrip("/") or "/"
            try:
                if authorization and self.headers.get("Authorization") != authorization:
                    raise RegistryError(401, 40101, "Unauthorized")
                for m, pattern, name in _ROUTES:
                    match = pattern.match(path)
                    if m == method and match:
                        args = [unquote(a) for a in match.groups()]
                        self._send(200, getattr(self, f"_{name}")(*args))
                        return
                raise RegistryError(404, 404, f"{method} {path}: no such endpoint")
            except RegistryError as e:
                self._send(e.status, {"error_code": e.code, "message": e.message})

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                raise RegistryError(422, 42201, "the request body is not JSON") from None
            if not isinstance(body, dict):
                raise RegistryError(422, 42201, "the request body is not a JSON object")
            return body

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        # -- endpoints -------------------------------------------------------------

        def _types(self) -> list[str]:
            return list(TYPES)

        def _schema_by_id(self, schema_id: str) -> dict[str, Any]:
            return registry.by_id(int(schema_id)).body()

        def _versions_by_id(self, schema_id: str) -> list[dict[str, Any]]:
            registry.by_id(int(schema_id))
            return registry.versions_of(int(schema_id))

        def _subjects(self) -> list[str]:
            return sorted(s for s, ids in registry.subjects.items() if ids)

        def _versions(self, subject: str) -> list[int]:
            return list(range(1, len(registry._versions(subject)) + 1))

        def _version(self, subject: str, version: str) -> dict[str, Any]:
            stored, number = registry.version(subject, version)
            return {"subject": subject, "version": number, "id": stored.id, **stored.body()}

        def _register(self, subject: str) -> dict[str, Any]:
            stored, number = registry.register(subject, self._body())
            return {"id": stored.id, "subject": subject, "version": number, **stored.body()}

        def _lookup(self, subject: str) -> dict[str, Any]:
            stored, number = registry.lookup(subject, self._body())
            return {"subject": subject, "version": number, "id": stored.id, **stored.body()}

        def _get_config(self, subject: str | None = None) -> dict[str, str]:
            return {"compatibilityLevel": registry.level(subject)}

        def _put_config(self, subject: str | None = None) -> dict[str, str]:
            level = str(self._body().get("compatibility", "")).upper()
            return {"compatibility": registry.set_level(subject, level)}

        def _compatibility(self, subject: str, version: str) -> dict[str, bool]:
            return {"is_compatible": registry.compatible(subject, version, self._body())}

    return Handler


class EmbeddedSchemaRegistry:
    """The registry on ``127.0.0.1`` (an ephemeral port unless given), on a thread of
    this process; a context manager, like ``flow_jobs_dev.broker.EmbeddedBroker``. With
    ``authorization`` (an ``Authorization`` header's value: ``"Basic <base64>"``,
    ``"Bearer <token>"``), a request without it is answered 401."""

    def __init__(
        self, port: int = 0, registry: Registry | None = None, authorization: str | None = None
    ) -> None:
        self.registry = registry or Registry()
        handler = _handler(self.registry, authorization)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # a quick stop: tests start one each
            name="schema-registry",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> EmbeddedSchemaRegistry:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> EmbeddedSchemaRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
