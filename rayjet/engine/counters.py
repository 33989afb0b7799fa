"""Counter streams (allow_msg_counter): Nats-Incr increments, values as {"val":"N"}."""

from __future__ import annotations

import json
import re

from rayjet.errors import error_for

_INT = re.compile(r"[+-]?[0-9]+")


def parse_incr(value: str) -> int:
    """The increment of a Nats-Incr header (any size, signed); 10171 when not an integer."""
    value = value.strip()
    if not _INT.fullmatch(value):
        raise error_for("MESSAGE_INCR_INVALID")
    return int(value)


def counter_value(data: bytes) -> int:
    """The value held by a stored counter message; 10172 when it is not one."""
    try:
        doc = json.loads(data)
    except ValueError:
        raise error_for("MESSAGE_COUNTER_BROKEN") from None
    if not isinstance(doc, dict):
        raise error_for("MESSAGE_COUNTER_BROKEN")
    val = doc.get("val", "")
    if not isinstance(val, str):
        raise error_for("MESSAGE_COUNTER_BROKEN")
    # nats-server starts from 0 when the stored value is not a number
    return int(val) if _INT.fullmatch(val) else 0


def counter_payload(value: int) -> bytes:
    return b'{"val":"%d"}' % value


def ack_value(data: bytes) -> str:
    """The value a PubAck reports for a stored counter message."""
    try:
        return str(json.loads(data).get("val", ""))
    except (ValueError, AttributeError):
        return ""


__all__ = ["ack_value", "counter_payload", "counter_value", "parse_incr"]
