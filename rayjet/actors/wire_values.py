"""The values clients and replicas exchange on the data plane, as msgpack with a few
extension types (never pickle: the bytes come off a socket).

msgpack carries what is plain (None, bools, numbers, strings, bytes, lists, maps with
string keys). The rest travels as an extension whose payload is itself msgpack or Arrow
IPC, and comes back as the same type:

====  ==========================================================================
code  value
====  ==========================================================================
1     tuple (answers only: arguments' tuples become lists, as replicas accept)
2     a typed error (:func:`rayjet.errors.documents.to_document`), e.g. one
      message's refusal among a publish's answers
3     PubAck
4     pyarrow RecordBatch (Arrow IPC stream of one batch)
5     pyarrow Table (Arrow IPC stream)
6     numpy array: ``[dtype, bytes]``, one dimension, dtypes of :data:`_DTYPES`
7     DeliveryBatch: its constructor's arguments
8     set
9     datetime (ISO 8601 text, its time zone kept)
10    any other API dataclass (:class:`rayjet.api.base.Wire`): ``[class, {field: value}]``,
      rebuilt with exactly those fields
11    an API enum member (:mod:`rayjet.api.enums`): ``[class, value]``
12    a stored message (:class:`rayjet.storage.protocol.StoredMsg`):
      ``[subject, hdr, data, seq, ts]``
13    a consumer's read-ahead window (:class:`rayjet.engine.consumer.reader.Window`):
      ``[filters, start, limit, messages, last, pending]``, the messages an Arrow
      record batch or a list of stored messages
====  ==========================================================================

Decoding trusts nothing: an unknown code, a malformed payload or a forbidden dtype raises
(the request frame is then malformed). Only methods named in :data:`STREAM_REQUESTS` and
:data:`CONSUMER_REQUESTS` (replicas) and :data:`META_REQUESTS` (the meta group's members)
are served this way: their answers are known to fit.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa

from rayjet.api import enums
from rayjet.api.base import Wire
from rayjet.api.info import PubAck
from rayjet.dataplane import ValueCodec
from rayjet.engine.consumer.delivery_batch import DeliveryBatch
from rayjet.engine.consumer.reader import Window
from rayjet.errors import APIError
from rayjet.errors.documents import from_document, to_document
from rayjet.storage import columns
from rayjet.storage.protocol import StoredMsg

(TUPLE, ERROR, PUBACK, ARROW_BATCH, ARROW_TABLE, NDARRAY, DELIVERIES, SET, DATETIME,
 WIRE, ENUM, STORED_MSG, WINDOW) = range(1, 14)

# what a replica serves over the data plane (everything else goes by actor call)
STREAM_REQUESTS = frozenset({
    "publish", "publish_columns", "publish_atomic", "info", "get_msg", "get_msgs",
    "read_range",
    "purge", "delete_msg", "leader_id", "ping", "leader_consumer_call",
    "leader_consumer_names", "delete_leader_consumer", "wait_for_messages",
    "consumer_acked", "reader_call",
})
CONSUMER_REQUESTS = frozenset({
    "fetch", "ack", "info", "advance", "reset", "unpin", "advisories", "ping", "until_leading",
})

# what a meta member serves: the catalogue's reads and the changes clients ask for (a
# long poll, status and operators' tools stay on actor calls)
META_REQUESTS = frozenset({
    "stream_assignment", "list_streams", "streams_since", "limits", "account_usage", "lookup_subject",
    "consumer_assignment", "list_consumers", "add_stream", "update_stream", "delete_stream",
    "add_consumer", "delete_consumer", "set_limits", "cluster_info",
})

_DTYPES = frozenset({"<i8", "<u8", "<i4", "<u4", "<f8", "|u1", "|b1"})
_PUBACK_FIELDS = ("stream", "seq", "duplicate", "domain", "val", "batch", "count")


def _pack(value: Any, strict: bool = False) -> bytes:
    return msgpack.packb(value, use_bin_type=True, default=_default, strict_types=strict)


def _arrow_bytes(value: pa.RecordBatch | pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, value.schema) as writer:
        writer.write(value)
    return sink.getvalue().to_pybytes()


def _default(obj: Any) -> Any:
    """What msgpack hands over: a value it has no type for (or, in answers, a tuple or a
    subclass of a plain type)."""
    if isinstance(obj, tuple):
        return msgpack.ExtType(TUPLE, _pack(list(obj), strict=True))
    if isinstance(obj, enum.Enum) and type(obj).__name__ in _enum_classes():
        return msgpack.ExtType(ENUM, _pack([type(obj).__name__, obj.value]))
    if isinstance(obj, bool | np.bool_):
        return bool(obj)
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        return float(obj)
    if isinstance(obj, str):
        return obj + ""  # a str subclass (an enum's value) as a plain str
    if isinstance(obj, dict):
        return dict(obj)
    if isinstance(obj, list):
        return list(obj)
    if isinstance(obj, APIError):
        return msgpack.ExtType(ERROR, _pack(to_document(obj)))
    if isinstance(obj, PubAck):
        return msgpack.ExtType(PUBACK, _pack([getattr(obj, f) for f in _PUBACK_FIELDS]))
    if isinstance(obj, pa.RecordBatch):
        return msgpack.ExtType(ARROW_BATCH, _arrow_bytes(obj))
    if isinstance(obj, pa.Table):
        return msgpack.ExtType(ARROW_TABLE, _arrow_bytes(obj))
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        if arr.ndim != 1 or arr.dtype.str not in _DTYPES:
            raise TypeError(f"an array of {arr.dtype} x {arr.shape} does not travel")
        return msgpack.ExtType(NDARRAY, _pack([arr.dtype.str, arr.tobytes()]))
    if isinstance(obj, DeliveryBatch):
        return msgpack.ExtType(DELIVERIES, _pack(list(obj.__reduce__()[1])))
    if isinstance(obj, StoredMsg):
        return msgpack.ExtType(STORED_MSG, _pack([obj.subject, obj.hdr, obj.data, obj.seq,
                                                  obj.ts]))
    if isinstance(obj, Window):
        return msgpack.ExtType(WINDOW, _pack(list(obj.__reduce__()[1])))
    if isinstance(obj, set | frozenset):
        return msgpack.ExtType(SET, _pack(list(obj)))
    if isinstance(obj, datetime.datetime):
        return msgpack.ExtType(DATETIME, obj.isoformat().encode())
    if isinstance(obj, Wire) and dataclasses.is_dataclass(obj):
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return msgpack.ExtType(WIRE, _pack([type(obj).__name__, fields], strict=True))
    raise TypeError(f"a {type(obj).__name__} does not travel on the data plane")


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook)


def _arrow(data: bytes) -> pa.Table:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        table = reader.read_all()
    # structural checks only: the sender proved the cluster secret (the full checks of
    # every offset cost as much as the publish itself)
    table.validate()
    return table


def _array(value: Any) -> np.ndarray:
    if not (isinstance(value, list) and len(value) == 2 and value[0] in _DTYPES
            and isinstance(value[1], bytes)):
        raise ValueError("an array is [dtype, bytes]")
    return np.frombuffer(value[1], dtype=np.dtype(value[0])).copy()


def _delivery_batch(args: Any) -> DeliveryBatch:
    if not (isinstance(args, list) and len(args) == 13):
        raise ValueError("a delivery batch has 13 fields")
    stream, consumer, subjects, which, hdr_ends, hdrs, data_ends, data, *numbers = args
    if not (isinstance(stream, str) and isinstance(consumer, str)
            and isinstance(subjects, list | tuple) and all(isinstance(s, str) for s in subjects)
            and isinstance(hdrs, bytes) and isinstance(data, bytes)):
        raise ValueError("malformed delivery batch")
    arrays = [which, hdr_ends, data_ends, *numbers]
    if not all(isinstance(a, np.ndarray) for a in arrays):
        raise ValueError("a delivery batch's columns are arrays")
    n = len(which)
    if any(len(a) != n for a in arrays):
        raise ValueError("a delivery batch's columns differ in length")
    for ends, blob in ((hdr_ends, hdrs), (data_ends, data)):
        if n and (ends.min() < 0 or int(ends[-1]) != len(blob) or np.any(np.diff(ends) < 0)):
            raise ValueError("a delivery batch's offsets do not fit its bytes")
    if n and (which.min() < 0 or int(which.max()) >= len(subjects)):
        raise ValueError("a delivery batch names a subject it does not have")
    return DeliveryBatch(stream, consumer, subjects, which, hdr_ends, hdrs, data_ends, data,
                         *numbers)


def _stored_msg(fields: Any) -> StoredMsg:
    if not (isinstance(fields, list) and len(fields) == 5 and isinstance(fields[0], str)
            and isinstance(fields[1], bytes) and isinstance(fields[2], bytes)
            and type(fields[3]) is int and type(fields[4]) is int):
        raise ValueError("malformed stored message")
    return StoredMsg(*fields)


_WINDOW_COLUMNS = frozenset(columns.SCHEMA.names)


def _window(fields: Any) -> Window:
    if not (isinstance(fields, list) and len(fields) == 6):
        raise ValueError("a read-ahead window has 6 fields")
    filters, start, limit, msgs, last, pending = fields
    if not (isinstance(filters, list | tuple) and all(isinstance(f, str) for f in filters)
            and all(type(v) is int for v in (start, limit, last, pending))):
        raise ValueError("malformed read-ahead window")
    if isinstance(msgs, pa.RecordBatch):
        if set(msgs.schema.names) != _WINDOW_COLUMNS:
            raise ValueError("a read-ahead window's columns are the store's")
    elif not (isinstance(msgs, list) and all(isinstance(m, StoredMsg) for m in msgs)):
        raise ValueError("a read-ahead window's messages are columns or stored messages")
    return Window(tuple(filters), start, limit, msgs, last, pending)


def _puback(fields: Any) -> PubAck:
    if not (isinstance(fields, list) and len(fields) == len(_PUBACK_FIELDS)
            and isinstance(fields[0], str) and type(fields[1]) is int):
        raise ValueError("malformed PubAck")
    ack = PubAck.stored(fields[0], fields[1])
    ack.__dict__.update(zip(_PUBACK_FIELDS[2:], fields[2:], strict=True))
    return ack


@functools.cache
def _enum_classes() -> dict[str, type]:
    return {name: cls for name, cls in vars(enums).items()
            if isinstance(cls, type) and issubclass(cls, enum.Enum) and not name.startswith("_")}


def _enum(value: Any) -> enum.Enum:
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
        raise ValueError("an enum is [class, value]")
    cls = _enum_classes().get(value[0])
    if cls is None:
        raise ValueError(f"unknown enum {value[0]!r:.60}")
    return cls(value[1])


@functools.cache
def _wire_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    todo = [Wire]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if dataclasses.is_dataclass(cls) and cls.__module__.startswith("rayjet."):
            found.setdefault(cls.__name__, cls)
    return found


def _wire(value: Any) -> Any:
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], dict)):
        raise ValueError("an API object is [class, fields]")
    cls = _wire_classes().get(value[0]) if isinstance(value[0], str) else None
    if cls is None:
        raise ValueError(f"unknown API object {value[0]!r:.60}")
    names = {f.name for f in dataclasses.fields(cls)}
    if set(value[1]) != names:
        raise ValueError(f"{cls.__name__} with fields {sorted(value[1])!r:.200}")
    obj = object.__new__(cls)
    for name, field_value in value[1].items():
        object.__setattr__(obj, name, field_value)
    obj.__post_init__()  # the types msgpack does not keep (frozen maps) made again
    return obj


def _ext_hook(code: int, data: bytes) -> Any:
    if code == TUPLE:
        value = _unpack(data)
        if not isinstance(value, list):
            raise ValueError("a tuple is an array")
        return tuple(value)
    if code == ERROR:
        doc = _unpack(data)
        if not isinstance(doc, dict):
            raise ValueError("an error is a map")
        return from_document(doc)
    if code == PUBACK:
        return _puback(_unpack(data))
    if code == ARROW_BATCH:
        table = _arrow(data)
        batches = table.to_batches()
        if len(batches) != 1:
            batches = table.combine_chunks().to_batches() or [
                pa.RecordBatch.from_pylist([], schema=table.schema)]
        return batches[0]
    if code == ARROW_TABLE:
        return _arrow(data)
    if code == NDARRAY:
        return _array(_unpack(data))
    if code == DELIVERIES:
        return _delivery_batch(_unpack(data))
    if code == SET:
        value = _unpack(data)
        if not isinstance(value, list):
            raise ValueError("a set is an array")
        return set(value)
    if code == DATETIME:
        return datetime.datetime.fromisoformat(data.decode())
    if code == WIRE:
        return _wire(_unpack(data))
    if code == ENUM:
        return _enum(_unpack(data))
    if code == STORED_MSG:
        return _stored_msg(_unpack(data))
    if code == WINDOW:
        return _window(_unpack(data))
    raise ValueError(f"unknown value type {code}")


CODEC = ValueCodec(default=_default, ext_hook=_ext_hook, strict_answers=True,
                   any_map_keys=True)


def encode(value: Any) -> bytes:
    """One value as an answer travels (for tests and tools)."""
    return _pack(value, strict=True)


def decode(data: bytes) -> Any:
    return _unpack(data)
