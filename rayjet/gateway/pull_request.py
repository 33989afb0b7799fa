"""The body of a pull request (``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``) as
nats-server reads it: a JSON request, or a batch size, or anything else for one message.

The priority-group fields (``group``, ``min_pending``, ``min_ack_pending``, ``id``,
``priority``) go to the consumer as they came; it checks them against its priority policy
and answers with nats-server's statuses (400 for a field its policy does not take, 423
for a pin id that is not the current one). A field of the wrong JSON type is a 400 with
the words of Go's JSON decoder, as nats-server's.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rayjet.api.headers import get_header
from rayjet.errors import APIError

PIN_ID_HEADER = "Nats-Pin-Id"
_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = (-2**63, 2**63)
_INT_TYPES = {"batch": "int", "max_bytes": "int", "expires": "time.Duration",
              "idle_heartbeat": "time.Duration"}
# the priority fields as nats-server's PriorityGroup declares them
_GROUP_FIELDS = {"group": ("group", "string"), "min_pending": ("min_pending", "int64"),
                 "min_ack_pending": ("min_ack_pending", "int64"), "id": ("pin_id", "string"),
                 "priority": ("priority", "int")}


def go_kind(value: Any, numeric: bool) -> str:
    """How Go's JSON decoder names a JSON ``value`` that does not fit a field (a number
    that does not fit a ``numeric`` field names itself)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return f"number {json.dumps(value)}" if numeric else "number"


def _bad_type(value: Any, field: str, go_type: str, embedded: bool) -> APIError:
    """Go's ``json.Unmarshal`` error for ``value`` in a field of ``go_type``. Fields of
    the embedded PriorityGroup have no struct name in it."""
    kind = go_kind(value, go_type != "string")
    owner = "" if embedded else "JSApiConsumerGetNextRequest"
    return APIError(f"Bad Request - json: cannot unmarshal {kind} into Go struct field "
                    f"{owner}.{field} of type {go_type}", code=400, err_code=10003)


def _integer(doc: dict[str, Any], field: str, go_type: str, *, embedded: bool = False) -> int:
    value = doc.get(field)
    if value is None:
        return 0
    if (isinstance(value, bool) or not isinstance(value, int)
            or not _INT64[0] <= value < _INT64[1]):
        raise _bad_type(value, field, go_type, embedded)
    return value


def batch_served(asked: int) -> tuple[int, int]:
    """A pull's batch as served and the shift of the pending counts it reports: nats-server
    serves a batch of 0 or less as one message, and counts what is still owed from the
    number asked for (a batch of 0 that got nothing is owed 0)."""
    served = max(asked, 1)
    return served, asked - served


def pull_request(payload: bytes) -> dict[str, Any]:
    """The request's fields: ``batch`` (as served) and ``shift`` (see :func:`batch_served`),
    ``expires`` and ``idle_heartbeat`` in seconds, ``no_wait``, ``max_bytes`` and
    ``priority`` (the priority-group fields as the consumer's fetch takes them, empty when
    the request has none). Raises APIError (400) for a request nats-server refuses."""
    body = payload.strip()
    req: dict[str, Any] = {"batch": 1, "shift": 0, "expires": 0.0, "no_wait": False,
                           "max_bytes": 0, "idle_heartbeat": 0.0, "priority": {}}
    if not body.startswith(b"{"):
        # nats-server reads any other request as a batch size, or 1 when it is not a number
        text = body.decode("ascii", "replace")
        if _INT.fullmatch(text) and _INT64[0] <= int(text) < _INT64[1]:
            req["batch"], req["shift"] = batch_served(int(text))
        return req
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise APIError(f"Bad Request - {exc}", code=400, err_code=10003) from None
    if not isinstance(doc, dict):
        raise APIError("Bad Request - the request must be a JSON object", code=400,
                       err_code=10003)
    ints = {f: _integer(doc, f, t) for f, t in _INT_TYPES.items()}
    # a request without a batch asks for 0 (Go's zero value)
    req["batch"], req["shift"] = batch_served(ints["batch"])
    req["expires"] = max(ints["expires"], 0) / 1e9
    req["no_wait"] = bool(doc.get("no_wait"))
    req["max_bytes"] = max(ints["max_bytes"], 0)
    req["idle_heartbeat"] = max(ints["idle_heartbeat"], 0) / 1e9
    if req["idle_heartbeat"] and req["idle_heartbeat"] * 2 > req["expires"]:
        raise APIError("Bad Request - heartbeat value too large", code=400, err_code=10003)
    req["priority"] = _priority_fields(doc)
    return req


def _priority_fields(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, (arg, go_type) in _GROUP_FIELDS.items():
        value = doc.get(field)
        if value is None:
            continue
        if go_type == "string":
            if not isinstance(value, str):
                raise _bad_type(value, field, go_type, True)
            if value:
                out[arg] = value
        elif (value := _integer(doc, field, go_type, embedded=True)) != 0:
            out[arg] = value
    return out


def pin_of(got: Any) -> str:
    """The pin id a pinned_client consumer gave the messages of a DeliveryBatch ("" none):
    a pull re-issued for the rest of its batch carries it, as the pinned client."""
    if not len(got):
        return ""
    for i in range(len(got)):
        _subject, hdr, _data = got.message(i)
        if hdr:
            pin = get_header(hdr, PIN_ID_HEADER)
            if pin:
                return pin
    return ""
