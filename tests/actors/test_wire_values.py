"""The values requests and answers carry on the data plane: each type comes back as what
it was, and bytes from anywhere decode to a value or raise, never worse."""

from __future__ import annotations

import datetime

import msgpack
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.actors import wire_values as W
from rayjet.api import StorageType, StreamSourceInfo
from rayjet.api.info import PubAck
from rayjet.engine.consumer.delivery_batch import DeliveryBatch
from rayjet.engine.consumer.reader import Window
from rayjet.errors import DuplicateInProcessError, NotLeaderError, WrongLastSequenceError
from rayjet.storage import columns
from rayjet.storage.protocol import StoredMsg


def _batch() -> DeliveryBatch:
    return DeliveryBatch(
        "S", "C", ["a", "b"], np.array([0, 1, 0], np.uint32), np.array([0, 3, 3], np.int64),
        b"h:1", np.array([1, 3, 6], np.int64), b"xyzuvw", np.array([1, 2, 3], np.int64),
        np.array([1, 2, 3], np.int64), np.array([1, 1, 2], np.int64),
        np.array([5, 4, 3], np.int64), np.array([10, 11, 12], np.int64))


def test_each_kind_of_value_comes_back_as_itself():
    when = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)
    value = {
        "plain": [None, True, 3, -1.5, "s", b"b", {"k": [1]}],
        "tuple": (1, ("nested",), [2, (3,)]),
        "ack": PubAck.stored("S", 7),
        "dup": PubAck(stream="S", seq=8, duplicate=True),
        "errors": [NotLeaderError(group="g", leader="r2"),
                   WrongLastSequenceError(last_seq=4)],
        "batch": pa.record_batch({"seq": [1, 2], "data": [b"a", b"b"]}),
        "table": pa.table({"x": ["a", "b", "c"]}),
        "array": np.arange(5, dtype=np.int64),
        "set": {1, 2, 3},
        "when": when,
        "numpy_scalar": np.int64(9),
        "row_keys": {0: "a", 7: "b"},
        "enum": StorageType.MEMORY,
        "api_object": StreamSourceInfo(name="SRC", lag=3, active=5,
                                       error={"code": 503, "description": "x"}),
    }
    back = W.decode(W.encode(value))
    assert back["plain"] == value["plain"]
    assert back["tuple"] == (1, ("nested",), [2, (3,)])
    assert back["ack"] == PubAck.stored("S", 7) and back["dup"].duplicate is True
    err = back["errors"][0]
    assert isinstance(err, NotLeaderError) and err.fields["leader"] == "r2"
    assert isinstance(back["errors"][1], WrongLastSequenceError)
    assert back["errors"][1].err_code == value["errors"][1].err_code
    assert back["batch"].equals(value["batch"]) and back["table"].equals(value["table"])
    assert back["array"].tolist() == [0, 1, 2, 3, 4] and back["array"].flags.writeable
    assert back["set"] == {1, 2, 3} and back["when"] == when and back["numpy_scalar"] == 9
    assert back["row_keys"] == {0: "a", 7: "b"}
    assert back["enum"] is StorageType.MEMORY
    assert back["api_object"] == value["api_object"]
    hash(back["api_object"])  # frozen all the way down, as built


def test_a_delivery_batch_keeps_its_messages():
    batch = _batch()
    back = W.decode(W.encode({"batch": batch, "status": (409, "gone")}))
    assert back["status"] == (409, "gone")
    got = back["batch"]
    assert [got.message(i) for i in range(3)] == [batch.message(i) for i in range(3)]
    assert [got.reply(i) for i in range(3)] == [batch.reply(i) for i in range(3)]


def test_a_consumers_stream_reads_come_back_as_they_were_read():
    msg = StoredMsg("S.a", b"NATS/1.0\r\n\r\n", b"x", 3, 99)
    cols = columns.from_rows([4, 5], [7, 8], ["S.a", "S.b"], [b"", b""], [b"y", b"z"])
    answers = W.decode(W.encode([
        (1, 5), msg, ([msg], 3), 2, [4, 5],
        Window(("S.a",), 4, 10, cols, 5, 2), Window((), 3, 1, [msg], 3, 1)]))
    bounds, one, (batch, last), pending, seqs, columnar, listed = answers
    assert (bounds, one, batch, last, pending, seqs) == ((1, 5), msg, [msg], 3, 2, [4, 5])
    assert (columnar.filters, columnar.start, columnar.limit, columnar.last,
            columnar.pending) == (("S.a",), 4, 10, 5, 2)
    assert columnar.messages(0, 10) == [StoredMsg("S.a", b"", b"y", 4, 7),
                                        StoredMsg("S.b", b"", b"z", 5, 8)]
    assert listed.msgs == [msg] and listed.count == 1


def test_a_window_whose_columns_are_not_the_stores_is_refused():
    forged = msgpack.ExtType(W.WINDOW, W.encode(
        [["S.a"], 1, 10, pa.record_batch({"seq": [1]}), 1, 1]))
    with pytest.raises(ValueError):
        W.decode(msgpack.packb(forged))


def test_an_error_among_publish_answers_keeps_its_class():
    answers = [1, PubAck.stored("S", 2), DuplicateInProcessError()]
    back = W.decode(W.encode(answers))
    assert back[0] == 1 and isinstance(back[2], DuplicateInProcessError)


def test_what_has_no_wire_form_is_refused_when_encoding():
    with pytest.raises(TypeError):
        W.encode({"x": object()})
    with pytest.raises(TypeError):
        W.encode(np.zeros((2, 2)))  # two dimensions
    with pytest.raises(TypeError):
        W.encode(np.array(["a"], dtype=object))


@pytest.mark.parametrize("code,payload", [
    (W.TUPLE, msgpack.packb({"a": 1})),
    (W.ERROR, msgpack.packb([1, 2])),
    (W.PUBACK, msgpack.packb(["S"])),
    (W.ARROW_BATCH, b"not arrow"),
    (W.NDARRAY, msgpack.packb(["|O", b"\x00" * 8])),  # object arrays never
    (W.NDARRAY, msgpack.packb(["<i8", b"\x00" * 7])),  # not a whole number of items
    (W.DELIVERIES, msgpack.packb(["S", "C"])),
    (W.SET, msgpack.packb(1)),
    (W.DATETIME, b"yesterday"),
    (W.WIRE, msgpack.packb(["StreamSourceInfo", {"name": "x"}])),  # fields missing
    (W.WIRE, msgpack.packb(["Popen", {}])),  # not an API class
    (W.ENUM, msgpack.packb(["StorageType", "tape"])),
    (W.STORED_MSG, msgpack.packb(["a", b"", "not bytes", 1, 2])),
    (W.STORED_MSG, msgpack.packb(["a", b"", b"x", 1])),
    (W.WINDOW, msgpack.packb([["a"], 1, 10, [1, 2], 2, 2])),  # messages of no kind
    (W.WINDOW, msgpack.packb([[1], 1, 10, [], 2, 2])),  # a filter that is not a subject
    (99, b""),
])
def test_malformed_extensions_raise(code, payload):
    with pytest.raises(Exception):  # noqa: B017 - any exception: the frame is then refused
        W.decode(msgpack.packb(msgpack.ExtType(code, payload)))


def test_a_delivery_batch_whose_offsets_lie_is_refused():
    args = list(_batch().__reduce__()[1])
    args[4] = np.array([0, 3, 99], np.int64)  # past the end of the header bytes
    forged = msgpack.ExtType(W.DELIVERIES, W.encode(args))
    with pytest.raises(ValueError):
        W.decode(msgpack.packb(forged))


@settings(max_examples=300, deadline=None)
@given(code=st.integers(0, 127), payload=st.binary(max_size=200))
def test_a_strangers_extension_decodes_or_raises(code, payload):
    try:
        W.decode(msgpack.packb(msgpack.ExtType(code, payload)))
    except Exception:  # noqa: BLE001, S110 - refused: what a malformed frame gets
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_decode_or_raise(data):
    try:
        W.decode(data)
    except Exception:  # noqa: BLE001, S110
        pass
