"""The batch codec: every message round-trips; nothing a peer sends raises but FrameError."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.dataplane.codec import (
    MAX_NAME,
    FrameError,
    assemble_batch,
    decode_batch,
    encode_batch,
    encode_message,
)
from rayjet.raft.messages import (
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
)

U64 = st.integers(0, 2**64 - 1)
names = st.text(min_size=1, max_size=10) | st.sampled_from(["n" * MAX_NAME, "\u00e9" * MAX_NAME])
entries = st.builds(Entry, U64, U64, st.binary(max_size=40), st.sampled_from(EntryType))
snapshots = st.builds(
    Snapshot,
    st.builds(SnapshotMeta, U64, U64,
              st.builds(ConfState, st.lists(names, max_size=4).map(tuple),
                        st.lists(names, max_size=3).map(tuple))),
    st.binary(max_size=100))
messages = st.builds(
    Message, st.sampled_from(MessageType), names, names, term=U64, log_term=U64, index=U64,
    entries=st.lists(entries, max_size=3), commit=U64, reject=st.booleans(),
    reject_hint=U64, snapshot=st.none() | snapshots, context=st.binary(max_size=20),
    quiesce=st.booleans())
batches = st.tuples(names, st.lists(messages, max_size=4))


def _full(mtype: MessageType) -> Message:
    conf = ConfChange(ConfChangeType.ADD_LEARNER, "n4").encode()
    return Message(mtype, "n2", "n1", term=7, log_term=6, index=41,
                   entries=[Entry(6, 42, b"payload"), Entry(7, 43, conf, EntryType.CONF_CHANGE),
                            Entry(7, 44)],
                   commit=40, reject=True, reject_hint=39,
                   snapshot=Snapshot(SnapshotMeta(30, 5, ConfState(("n1", "n2"), ("n4",))),
                                     b"\x00snapshot\xff"),
                   context=b"read-ctx", quiesce=True)


@pytest.mark.parametrize("mtype", list(MessageType))
def test_every_message_type_round_trips(mtype):
    full, bare = _full(mtype), Message(mtype, "n2", "n1")
    group, decoded = decode_batch(encode_batch("stream:ORDERS", [full, bare]))
    assert group == "stream:ORDERS"
    assert decoded == [full, bare]
    assert type(decoded[0].type) is MessageType
    assert all(type(e.type) is EntryType for e in decoded[0].entries)
    assert decoded[0].snapshot.meta.conf_state.voters == ("n1", "n2")  # tuples, as built


def test_an_empty_batch_and_a_batch_assembled_from_encoded_messages():
    assert decode_batch(encode_batch("g", [])) == ("g", [])
    ms = [_full(MessageType.APP), Message(MessageType.HEARTBEAT, "b", "a", commit=3)]
    assert decode_batch(assemble_batch("g", [encode_message(m) for m in ms])) == ("g", ms)
    beat = Message(MessageType.HEARTBEAT, "b", "a", commit=3)
    group, many = decode_batch(assemble_batch("g", [encode_message(beat)] * 0x10001))
    assert len(many) == 0x10001 and many[-1] == beat  # a 32-bit array header


@settings(max_examples=200, deadline=None)
@given(batches)
def test_encode_decode_round_trip(batch):
    group, ms = batch
    assert decode_batch(encode_batch(group, ms)) == (group, ms)


@pytest.mark.parametrize("bad", [
    Message(MessageType.APP, "b", "a", term=-1),
    Message(MessageType.APP, "b", "a", index=2**64),
    Message(MessageType.APP, "b", "a", commit=True),
    Message(MessageType.APP, "", "a"),
    Message(MessageType.APP, "b", "a" * (MAX_NAME + 1)),
    Message(MessageType.APP, "b\ud800", "a"),
    Message(MessageType.APP, "b", "a", entries=[Entry(1, -1)]),
    Message(MessageType.APP, "b", "a", entries=[Entry(1, 1, "text")]),
    Message(MessageType.APP, "b", "a", context="text"),
    Message(MessageType.APP, "b", "a", reject=1),
    Message(MessageType.APP, "b", "a", snapshot=Snapshot(SnapshotMeta(1, 1, ConfState(("",))))),
    Message(12, "b", "a"),
])
def test_what_a_peer_would_refuse_is_not_encoded(bad):
    with pytest.raises(FrameError):
        encode_batch("g", [bad])


def test_group_names_are_bounded():
    for group in ("", "g" * (MAX_NAME + 1), 5):
        with pytest.raises(FrameError):
            encode_batch(group, [])


def _packed_message(**change) -> list:
    fields = dict(type=0, to="b", frm="a", term=1, log_term=1, index=1,
                  entries=[[1, 2, 0, b"d"]], commit=0, reject=False, hint=0, snap=None,
                  context=b"", quiesce=False)
    fields.update(change)
    return list(fields.values())


@pytest.mark.parametrize("obj", [
    None, 1, "g", b"g", [], ["g"], ["g", [], 1], [1, []], ["", []], ["g" * (MAX_NAME + 1), []],
    ["g", {}], {"g": []}, ["g", [[]]], ["g", [_packed_message()[:-1]]],
    ["g", [_packed_message() + [1]]],
    ["g", [_packed_message(type=10)]], ["g", [_packed_message(type=-1)]],
    ["g", [_packed_message(type=True)]], ["g", [_packed_message(type=1.0)]],
    ["g", [_packed_message(to="")]], ["g", [_packed_message(to=b"b")]],
    ["g", [_packed_message(term=-1)]], ["g", [_packed_message(term=1.5)]],
    ["g", [_packed_message(term=False)]], ["g", [_packed_message(commit=None)]],
    ["g", [_packed_message(reject=0)]], ["g", [_packed_message(quiesce=None)]],
    ["g", [_packed_message(context="x")]], ["g", [_packed_message(entries=None)]],
    ["g", [_packed_message(entries=[[1, 2, 2, b""]])]],
    ["g", [_packed_message(entries=[[1, 2, 0]])]],
    ["g", [_packed_message(entries=[[1, -2, 0, b""]])]],
    ["g", [_packed_message(entries=[[1, 2, 0, "d"]])]],
    ["g", [_packed_message(snap=[])]], ["g", [_packed_message(snap=[1, 1, [], [], "d"])]],
    ["g", [_packed_message(snap=[1, 1, ["a", 2], [], b""])]],
    ["g", [_packed_message(snap=[1, 1, None, [], b""])]],
    ["g", [_packed_message(snap={"index": 1})]],
])
def test_malformed_structures_raise_frame_error(obj):
    with pytest.raises(FrameError):
        decode_batch(msgpack.packb(obj))


@pytest.mark.parametrize("data", [
    b"", b"\xc1", b"\x92", b"\x91" * 100_000, b"\xdd\xff\xff\xff\xff",  # huge array, no data
    b"\x92\xa1g\xdd\x7f\xff\xff\xff", b"\x92\xa2\xff\xfe\x90",  # not UTF-8
    msgpack.packb(["g", []]) + b"\x00",  # trailing bytes
    msgpack.packb(msgpack.ExtType(1, b"x")), b"\xd6\xff\x00\x00\x00\x00",  # ext, timestamp
    b"\xdb\xff\xff\xff\xff",  # str header claiming 4 GiB
    "text", None, 42,
])
def test_bytes_that_are_no_batch_raise_frame_error(data):
    with pytest.raises(FrameError):
        decode_batch(data)


def _valid(result) -> None:
    group, ms = result
    assert isinstance(group, str) and all(isinstance(m, Message) for m in ms)
    encode_batch(group, ms)  # whatever decodes is acceptable to encode again


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_arbitrary_bytes(data):
    try:
        _valid(decode_batch(data))
    except FrameError:
        pass


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=14) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=3),
    max_leaves=24)


@settings(max_examples=300, deadline=None)
@given(msgpack_values)
def test_fuzz_arbitrary_msgpack(obj):
    try:
        _valid(decode_batch(msgpack.packb(obj)))
    except FrameError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.tuples(names, st.lists(messages, min_size=1, max_size=3)), st.data())
def test_fuzz_mutated_batches(batch, data):
    wire = bytearray(encode_batch(*batch))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        pos = data.draw(st.integers(0, max(len(wire) - 1, 0)))
        if op == "flip" and wire:
            wire[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del wire[pos:]
        elif op == "insert":
            wire[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
        elif wire:
            del wire[pos]
    try:
        _valid(decode_batch(bytes(wire)))
    except FrameError:
        pass
