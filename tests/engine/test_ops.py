"""The op codec: type byte first, compact msgpack, append-only layouts."""

from __future__ import annotations

import msgpack
import pytest

from rayjet.engine import (
    AckOp,
    BatchOp,
    ConsumerOp,
    DeleteOp,
    MsgOp,
    PurgeOp,
    SkipOp,
    UpdateConfigOp,
    decode_op,
    encode_op,
)
from rayjet.engine.ops import OP_MSG, SweepOp
from rayjet.errors import APIError

OPS = [
    MsgOp(7, 123, "s.a", b"NATS/1.0\r\nA: b\r\n\r\n", b"data", -1, "id", 3, 5, "s.sched", 9, 42),
    MsgOp(1, 2, "s.b"),
    BatchOp("b1", (MsgOp(1, 2, "s.a", data=b"x"), MsgOp(2, 2, "s.b")), 7),
    SkipOp(5, 3, 1),
    PurgeOp("s.a", 10, 2),
    PurgeOp(),
    DeleteOp(4, True),
    UpdateConfigOp({"name": "S", "subjects": ["s.>"], "max_msgs": 5}),
    AckOp("C", 9),
    ConsumerOp("C", ("s.a", "s.b"), 3, False),
    SweepOp(3, 40, (3, 7, 11)),
]


@pytest.mark.parametrize("op", OPS, ids=lambda op: type(op).__name__)
def test_round_trip(op):
    buf = encode_op(op)
    assert buf[0] == op.code
    assert decode_op(buf) == op


def test_sweep_op_code():
    assert SweepOp(1, 1).code == 10  # appended after SourceOp (9)


def test_type_bytes_are_fixed():
    # replicated logs depend on these numbers: they never change
    assert [op.code for op in (OPS[0], OPS[2], OPS[3], OPS[4], OPS[6], OPS[7], OPS[8],
                               OPS[9])] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_plain_message_is_compact():
    op = MsgOp(1000, 1_700_000_000_000_000_000, "s.a", b"", b"x" * 128, pid=1)
    assert len(encode_op(op)) < 128 + 40


def test_older_shorter_entry_takes_defaults():
    buf = bytes((OP_MSG,)) + msgpack.packb([3, 4, "s.a", b"", b"d"], use_bin_type=True)
    assert decode_op(buf) == MsgOp(3, 4, "s.a", b"", b"d")


def test_newer_longer_entry_keeps_known_fields():
    fields = OPS[0].fields() + ["a field from the future"]
    buf = bytes((OP_MSG,)) + msgpack.packb(fields, use_bin_type=True)
    assert decode_op(buf) == OPS[0]


def test_unknown_type_is_refused():
    with pytest.raises(APIError):
        decode_op(bytes((250,)) + msgpack.packb([]))
    with pytest.raises(APIError):
        decode_op(b"")


def test_config_op_carries_a_stream_config():
    op = UpdateConfigOp({"name": "S", "subjects": ["s.>"], "max_msgs": 5})
    assert decode_op(encode_op(op)).stream_config().max_msgs == 5
