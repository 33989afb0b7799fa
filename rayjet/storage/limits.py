"""Limit errors, per-message TTL values and subject delete marker headers."""

from __future__ import annotations

import re

from rayjet.api.headers import MARKER_MAX_AGE, MARKER_REASON, ROLLUP, ROLLUP_SUBJECT, TTL
from rayjet.errors import MessageTooBigError, StoreLimitError

NEVER = -1  # a TTL that never expires, Nats-TTL: never

MAX_MSGS = "maximum messages exceeded"
MAX_BYTES = "maximum bytes exceeded"
MAX_MSGS_PER_SUBJECT = "maximum messages per subject exceeded"

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def limit_error(description: str) -> StoreLimitError:
    """The discard-new refusal, err_code 10077 with nats-server's wording."""
    return StoreLimitError(spec="STREAM_STORE_FAILED", description=description)


def too_big(size: int, limit: int) -> MessageTooBigError:
    return MessageTooBigError(
        f"message size exceeds maximum allowed ({size} > max_msg_size {limit})")


def parse_ttl(value: str | None) -> int:
    """Seconds of a Nats-TTL header value: -1 for 'never', 0 when absent or invalid.

    Accepts whole seconds ('30') or a Go duration ('1m30s', '5m0s'); under a second is invalid,
    as in nats-server.
    """
    if not value:
        return 0
    value = value.strip()
    if value.lower() == "never":
        return NEVER
    if value.isdigit():
        return int(value)
    pos, total = 0, 0.0
    for m in _PART.finditer(value):
        if m.start() != pos:
            return 0
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(value) or total < 1:
        return 0
    return int(total)


def go_duration(seconds: int) -> str:
    """Seconds formatted like Go's time.Duration ('30s', '5m0s', '1h0m0s')."""
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


def marker_header(ttl_seconds: int) -> bytes:
    """Headers of a subject delete marker left when max_age removes a subject's last message:
    the lines nats-server 2.15 writes, in its order (a stream's byte count depends on them)."""
    return (f"NATS/1.0\r\n{MARKER_REASON}: {MARKER_MAX_AGE}\r\n"
            f"{TTL}: {go_duration(ttl_seconds)}\r\n"
            f"{ROLLUP}: {ROLLUP_SUBJECT}\r\n\r\n").encode()


def header_value(hdr: bytes, name: str) -> str | None:
    """One header's value, found without parsing the whole block (hot path: TTL lookups)."""
    if not hdr:
        return None
    key = name.encode()
    pos = hdr.find(b"\r\n" + key + b":")
    if pos < 0:
        return None
    start = pos + len(key) + 3
    end = hdr.find(b"\r\n", start)
    return hdr[start:end if end >= 0 else len(hdr)].decode(errors="replace").strip()


def is_marker(hdr: bytes) -> bool:
    return bool(hdr) and header_value(hdr, MARKER_REASON) is not None


__all__ = [
    "MAX_BYTES", "MAX_MSGS", "MAX_MSGS_PER_SUBJECT", "NEVER", "go_duration", "header_value",
    "is_marker", "limit_error", "marker_header", "parse_ttl", "too_big",
]
