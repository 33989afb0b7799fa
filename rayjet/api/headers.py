"""Message headers: names used by JetStream and the NATS/1.0 header block codec.

Headers are a ``dict[str, str]`` in Python. On the store they are kept as the NATS/1.0
block (``NATS/1.0\\r\\nKey: Value\\r\\n\\r\\n``) so byte accounting matches nats-server.
"""

from __future__ import annotations

from collections.abc import Mapping

from rayjet.errors import BadRequestError, error_for

MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"
ROLLUP_SUBJECT = "sub"
ROLLUP_ALL = "all"
TTL = "Nats-TTL"
MARKER_REASON = "Nats-Marker-Reason"
INCR = "Nats-Incr"
BATCH_ID = "Nats-Batch-Id"
BATCH_SEQ = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"
# set on messages copied by mirrors/sources and republish
STREAM_SOURCE = "Nats-Stream-Source"
RP_STREAM = "Nats-Stream"
RP_SUBJECT = "Nats-Subject"
RP_SEQUENCE = "Nats-Sequence"
RP_TIME_STAMP = "Nats-Time-Stamp"
RP_LAST_SEQUENCE = "Nats-Last-Sequence"
MSG_SIZE = "Nats-Msg-Size"
# direct get answers
NUM_PENDING = "Nats-Num-Pending"
LAST_SEQUENCE = "Nats-Last-Sequence"
# key-value and object store conventions
KV_OPERATION = "KV-Operation"
# why a marker was written (Nats-Marker-Reason values)
MARKER_MAX_AGE = "MaxAge"
MARKER_PURGE = "Purge"
MARKER_REMOVE = "Remove"

MAX_HEADER_BYTES = 64 * 1024
_PREFIX = b"NATS/1.0"
_CRLF = b"\r\n"


def validate_headers(headers: object) -> dict[str, str]:
    """Check names and values; returns a plain dict. Bad input raises BadRequestError."""
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise BadRequestError(f"headers must be a mapping of str to str, not {type(headers).__name__}")
    out: dict[str, str] = {}
    for key, value in headers.items():
        if not isinstance(key, str) or not key:
            raise BadRequestError(f"invalid header name {key!r}: use a non-empty string")
        if any(ord(c) <= 32 or ord(c) >= 127 or c == ":" for c in key):
            raise BadRequestError(
                f"invalid header name {key!r}: printable ASCII only, no spaces or ':'")
        if not isinstance(value, str):
            raise BadRequestError(f"header {key!r} must have a str value, not {type(value).__name__}")
        if "\r" in value or "\n" in value:
            raise BadRequestError(f"header {key!r} value must not contain CR or LF")
        out[key] = value
    return out


def encode_headers(headers: Mapping[str, str] | None) -> bytes:
    """The NATS/1.0 header block, or ``b""`` when there are no headers."""
    if not headers:
        return b""
    clean = validate_headers(headers)
    parts = [_PREFIX, _CRLF]
    for key, value in clean.items():
        parts += [key.encode(), b": ", value.encode(), _CRLF]
    parts.append(_CRLF)
    block = b"".join(parts)
    if len(block) > MAX_HEADER_BYTES:
        raise error_for("STREAM_HEADER_TOO_BIG")
    return block


def decode_headers(block: bytes | None) -> dict[str, str]:
    """Parse a NATS/1.0 header block (a status line is ignored; the last value wins)."""
    if not block:
        return {}
    if not block.startswith(_PREFIX):
        raise BadRequestError("invalid header block: it must start with NATS/1.0")
    lines = bytes(block).split(_CRLF)
    out: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(b":")
        if not sep:
            raise BadRequestError(f"invalid header line {line!r}: expected 'Name: value'")
        out[key.decode().strip()] = value.decode().strip()
    return out


def get_header(block: bytes | None, name: str) -> str | None:
    """One header's value from a block without building a dict for the common no-header case."""
    if not block:
        return None
    return decode_headers(block).get(name)


def append_header(block: bytes | None, name: str, value: str) -> bytes:
    """``block`` with the line ``name: value`` added at its end (a new block when there is
    none), as nats-server adds headers to a stored message's block: what was there stays
    byte for byte, a header of the same name included. Line breaks in ``value`` become
    spaces."""
    value = value.replace("\r", " ").replace("\n", " ")
    head = bytes(block[:-2]) if block and len(block) > 2 else _PREFIX + _CRLF
    return b"%s%s: %s\r\n\r\n" % (head, name.encode(), value.encode())
