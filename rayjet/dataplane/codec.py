"""Raft messages to bytes and back, with msgpack only (never pickle: the bytes come off a
socket, and unpickling them would run whatever a stranger sent).

A batch is the msgpack array ``[group, [message, ...]]``; a message is the array
``[type, to, frm, term, log_term, index, entries, commit, reject, reject_hint, snapshot,
context, quiesce]`` with each entry ``[term, index, type, data]`` and the snapshot
``[index, term, voters, learners, data]`` or nil. Arrays, not maps: no field names on the
wire, and a fixed arity that is cheap to check.

:func:`decode_batch` trusts nothing: every field's type and range is checked and anything
malformed raises :class:`FrameError`, never another exception type. :func:`encode_message`
applies the same rules, so whatever it encodes a peer decodes.
"""

from __future__ import annotations

from typing import Any

import msgpack

from rayjet.raft.messages import (
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
)

MAX_NAME = 1024  # characters in a group or peer name (actor names hold two 255-char names)
MAX_UINT = 2**64 - 1  # the largest integer msgpack carries

_MESSAGE_TYPES = tuple(MessageType)  # indexed by value: values are 0..n-1
_ENTRY_TYPES = tuple(EntryType)
assert all(int(t) == i for i, t in enumerate(_MESSAGE_TYPES))
assert all(int(t) == i for i, t in enumerate(_ENTRY_TYPES))
_MESSAGE_ARITY = 13


class DataPlaneError(ValueError):
    """Something that came off (or would go onto) the data plane is not acceptable."""


class FrameError(DataPlaneError):
    """A frame or an encoded batch is malformed, oversized or unexpected."""


# --- encoding -----------------------------------------------------------------------------


def _array_header(n: int) -> bytes:
    # written by hand so batches can be assembled from messages encoded earlier
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _check_uint(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_UINT:
        raise FrameError(f"{what} must be an integer in [0, 2**64), not {value!r:.60}")
    return value


def check_name(value: Any, what: str) -> str:
    if type(value) is not str or not 0 < len(value) <= MAX_NAME:
        raise FrameError(f"{what} must be a string of 1..{MAX_NAME} characters, "
                         f"not {value!r:.60}")
    return value


def _check_bytes(value: Any, what: str) -> bytes:
    if type(value) is not bytes:
        raise FrameError(f"{what} must be bytes, not {type(value).__name__}")
    return value


def _check_binary(value: Any, what: str) -> bytes | bytearray | memoryview:
    # what a sender may hand over: any bytes-like value msgpack writes as bin
    if not isinstance(value, bytes | bytearray | memoryview):
        raise FrameError(f"{what} must be bytes, not {type(value).__name__}")
    return value


def _check_bool(value: Any, what: str) -> bool:
    if type(value) is not bool:
        raise FrameError(f"{what} must be a boolean, not {value!r:.60}")
    return value


def _enum_value(value: Any, size: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):  # IntEnum members are fine
        raise FrameError(f"{what} must be an integer, not {value!r:.60}")
    value = int(value)
    if not 0 <= value < size:
        raise FrameError(f"unknown {what} {value}")
    return value


def _pack(obj: Any) -> bytes:
    try:
        return msgpack.packb(obj, use_bin_type=True)
    except Exception as exc:  # noqa: BLE001 - e.g. a name with a lone surrogate
        raise FrameError(f"cannot encode: {type(exc).__name__}: {exc}") from None


def encode_message(m: Message) -> bytes:
    """One message as msgpack bytes (see :func:`assemble_batch`); FrameError when a field
    is out of the range a peer accepts."""
    entries = []
    for e in m.entries:
        entries.append([_check_uint(e.term, "entry term"), _check_uint(e.index, "entry index"),
                        _enum_value(e.type, len(_ENTRY_TYPES), "entry type"),
                        _check_binary(e.data, "entry data")])
    snap = m.snapshot
    if snap is not None:
        meta = snap.meta
        cs = meta.conf_state
        snap = [_check_uint(meta.index, "snapshot index"), _check_uint(meta.term, "snapshot term"),
                [check_name(v, "voter") for v in cs.voters],
                [check_name(v, "learner") for v in cs.learners],
                _check_binary(snap.data, "snapshot data")]
    obj = [_enum_value(m.type, len(_MESSAGE_TYPES), "message type"),
           check_name(m.to, "to"), check_name(m.frm, "frm"),
           _check_uint(m.term, "term"), _check_uint(m.log_term, "log_term"),
           _check_uint(m.index, "index"), entries, _check_uint(m.commit, "commit"),
           _check_bool(m.reject, "reject"), _check_uint(m.reject_hint, "reject_hint"), snap,
           _check_binary(m.context, "context"), _check_bool(m.quiesce, "quiesce")]
    return _pack(obj)


def assemble_batch(group: str, encoded: list[bytes]) -> bytes:
    """The batch of messages already encoded by :func:`encode_message`, for ``group``."""
    return batch_prefix(group, len(encoded)) + b"".join(encoded)


def batch_prefix(group: str, count: int) -> bytes:
    """The bytes before ``count`` encoded messages of ``group`` in a batch (a sender that
    writes the pieces itself avoids one copy of the messages)."""
    check_name(group, "group")
    return b"\x92" + _pack(group) + _array_header(count)


def encode_batch(group: str, messages: list[Message]) -> bytes:
    return assemble_batch(group, [encode_message(m) for m in messages])


# --- decoding -----------------------------------------------------------------------------


def decode_batch(data: bytes) -> tuple[str, list[Message]]:
    """The group and messages of one encoded batch; FrameError when ``data`` is anything
    but a well-formed batch."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise FrameError(f"a batch is bytes, not {type(data).__name__}")
    size = len(data)
    try:
        # bounded by the input: an array element or a string byte takes at least one byte,
        # so no header can make the decoder allocate more than the frame justifies
        obj = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=True,
                              max_str_len=4 * MAX_NAME, max_bin_len=size, max_array_len=size,
                              max_map_len=0, max_ext_len=0)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several types; all mean "bad"
        raise FrameError(f"batch is not valid msgpack: {type(exc).__name__}: {exc}") from None
    try:
        return _batch(obj)
    except FrameError:
        raise
    except Exception as exc:  # noqa: BLE001 - a check missed above still means "bad"
        raise FrameError(f"malformed batch: {type(exc).__name__}: {exc}") from None


def _batch(obj: Any) -> tuple[str, list[Message]]:
    if type(obj) is not tuple or len(obj) != 2:
        raise FrameError("a batch is a [group, messages] array")
    group, messages = obj
    check_name(group, "group")
    if type(messages) is not tuple:
        raise FrameError("a batch's messages are an array")
    return group, [_message(m) for m in messages]


def _message(o: Any) -> Message:
    if type(o) is not tuple or len(o) != _MESSAGE_ARITY:
        raise FrameError(f"a message is an array of {_MESSAGE_ARITY} fields")
    (mtype, to, frm, term, log_term, index, entries, commit, reject, hint, snap, context,
     quiesce) = o
    mtype = _MESSAGE_TYPES[_enum_value(mtype, len(_MESSAGE_TYPES), "message type")]
    if type(entries) is not tuple:
        raise FrameError("a message's entries are an array")
    return Message(
        mtype, check_name(to, "to"), check_name(frm, "frm"), term=_check_uint(term, "term"),
        log_term=_check_uint(log_term, "log_term"), index=_check_uint(index, "index"),
        entries=[_entry(e) for e in entries], commit=_check_uint(commit, "commit"),
        reject=_check_bool(reject, "reject"), reject_hint=_check_uint(hint, "reject_hint"),
        snapshot=None if snap is None else _snapshot(snap),
        context=_check_bytes(context, "context"), quiesce=_check_bool(quiesce, "quiesce"))


def _entry(o: Any) -> Entry:
    if type(o) is not tuple or len(o) != 4:
        raise FrameError("an entry is a [term, index, type, data] array")
    term, index, etype, data = o
    return Entry(_check_uint(term, "entry term"), _check_uint(index, "entry index"),
                 _check_bytes(data, "entry data"),
                 _ENTRY_TYPES[_enum_value(etype, len(_ENTRY_TYPES), "entry type")])


def _snapshot(o: Any) -> Snapshot:
    if type(o) is not tuple or len(o) != 5:
        raise FrameError("a snapshot is an [index, term, voters, learners, data] array")
    index, term, voters, learners, data = o
    if type(voters) is not tuple or type(learners) is not tuple:
        raise FrameError("a snapshot's voters and learners are arrays")
    cs = ConfState(tuple(check_name(v, "voter") for v in voters),
                   tuple(check_name(v, "learner") for v in learners))
    meta = SnapshotMeta(_check_uint(index, "snapshot index"), _check_uint(term, "snapshot term"),
                        cs)
    return Snapshot(meta, _check_bytes(data, "snapshot data"))
