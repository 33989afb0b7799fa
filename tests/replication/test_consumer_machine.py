"""A consumer replica's raft entries: batches of consumer ops, kept apart from a stream's."""

from __future__ import annotations

import pytest

from rayjet.engine.consumer.ops import AckOp, DeliveredOp, StartOp
from rayjet.errors import BadRequestError
from rayjet.replication.consumer_machine import ENTRY_CONSUMER_OPS, decode_entry, encode_entry
from rayjet.replication.stream_machine import ENTRY_OPS


def test_entry_codec_round_trip():
    ops = [StartOp(1), DeliveredOp(5, ((1, 1, 1), (2, 2, 1))), AckOp(6, ((1, 1),))]
    data = encode_entry(ops)
    assert data[0] == ENTRY_CONSUMER_OPS
    assert decode_entry(data) == ops


def test_a_stream_entry_is_not_a_consumer_entry():
    assert ENTRY_OPS != ENTRY_CONSUMER_OPS
    with pytest.raises(BadRequestError):
        decode_entry(bytes((ENTRY_OPS,)) + encode_entry([StartOp(1)])[1:])
    with pytest.raises(BadRequestError):
        decode_entry(b"")
