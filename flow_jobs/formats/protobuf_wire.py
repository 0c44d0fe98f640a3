"""Where a Protobuf body that does not parse breaks: the field, by its name in the reader's
message, walking the wire format (tags, varints, lengths) once protobuf refused the
record. protobuf's parser says only ``Error parsing message with type 'shop.Order'``, and
no public API of the package reads a body partway; the wire format is five rules, so
this walk is the dead letter's aid, never the decoder: it runs for a failed record alone.
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor

_VARINT, _FIXED64, _LENGTH, _START_GROUP, _END_GROUP, _FIXED32 = range(6)
#: ``FieldDescriptor.TYPE_DOUBLE`` -> "double", and so on
_TYPE_NAMES = {
    getattr(FieldDescriptor, name): name[5:].lower()
    for name in dir(FieldDescriptor)
    if name.startswith("TYPE_")
}


class _Break(ValueError):
    pass


def where_it_breaks(body: bytes, descriptor: Descriptor) -> str | None:
    """Why ``body`` (a ``descriptor`` message) does not parse, naming the field (``outer.
    inner`` inside a message field), or None where the walk finds nothing wrong."""
    try:
        _walk(body, 0, len(body), descriptor, "")
    except _Break as e:
        return str(e)
    return None


def _walk(body: bytes, at: int, end: int, descriptor: Descriptor, prefix: str) -> None:
    where = "at its start"  # the field read last, for a tag that breaks after it
    while at < end:
        tag, at = _varint(body, at, end, where, "a tag")
        number, wire = tag >> 3, tag & 7
        field = descriptor.fields_by_number.get(number)
        name = f"field {prefix}{field.name} ({_type(field)})" if field else f"field #{number}"
        if number == 0 or wire in (_START_GROUP, _END_GROUP) or wire > _FIXED32:
            raise _Break(f"{where}: a tag of field number {number}, wire type {wire}")
        if wire == _VARINT:
            _, at = _varint(body, at, end, name, "its value")
        elif wire in (_FIXED64, _FIXED32):
            at += 8 if wire == _FIXED64 else 4
            if at > end:
                raise _Break(f"{name}: the body ends inside its value")
        else:
            length, at = _varint(body, at, end, name, "its length")
            if at + length > end:
                raise _Break(f"{name}: its {length} bytes run past the body's end")
            if field is not None and field.type == FieldDescriptor.TYPE_MESSAGE:
                _walk(body, at, at + length, field.message_type, f"{prefix}{field.name}.")
            elif field is not None and field.type == FieldDescriptor.TYPE_STRING:
                try:
                    body[at : at + length].decode("utf-8")
                except UnicodeDecodeError as e:
                    raise _Break(f"{name}: not UTF-8 ({e.reason} at byte {e.start})") from None
            at += length
        where = f"after field {prefix}{field.name if field else f'#{number}'}"


def _varint(body: bytes, at: int, end: int, where: str, what: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if at >= end:
            raise _Break(f"{where}: the body ends inside {what}")
        byte = body[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, at
        shift += 7
        if shift >= 70:
            raise _Break(f"{where}: {what} is a varint longer than 10 bytes")


def _type(field: FieldDescriptor) -> str:
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_ENUM):
        kind = field.message_type if field.message_type else field.enum_type
        return f"{kind.full_name}, number {field.number}"
    return f"{_TYPE_NAMES.get(field.type, field.type)}, number {field.number}"
