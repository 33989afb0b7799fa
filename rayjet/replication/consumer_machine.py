"""A consumer replica's state machine: raft entries are batches of consumer engine ops.

An entry's data is ``ENTRY_CONSUMER_OPS`` followed by a msgpack list of encoded consumer ops
(:mod:`rayjet.engine.consumer.ops`): one entry per delivery decision or batch of answers.
The delivery state lives in the raft log and its snapshots (the engine's snapshot), so
there is nothing else to sync or restore.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgpack

from rayjet.engine.consumer.engine import ConsumerEngine
from rayjet.engine.consumer.ops import decode_consumer_op, encode_consumer_op
from rayjet.errors import BadRequestError

ENTRY_CONSUMER_OPS = 2  # entry kinds: only add new numbers (a stream's entries are 1)


def encode_entry(ops: Sequence) -> bytes:
    return bytes((ENTRY_CONSUMER_OPS,)) + msgpack.packb([encode_consumer_op(o) for o in ops],
                                                        use_bin_type=True)


def decode_entry(data: bytes) -> list:
    if not data or data[0] != ENTRY_CONSUMER_OPS:
        raise BadRequestError(f"unknown consumer entry kind {data[:1]!r}")
    return [decode_consumer_op(raw) for raw in msgpack.unpackb(memoryview(data)[1:], raw=False)]


class ConsumerMachine:
    def __init__(self, engine: ConsumerEngine) -> None:
        self.engine = engine

    def apply(self, index: int, data: bytes) -> list:
        return [self.engine.apply(op) for op in decode_entry(data)]

    def snapshot(self) -> bytes:
        return self.engine.snapshot()

    def full_snapshot(self) -> bytes:
        return self.engine.snapshot()

    def restore(self, data: bytes, *, full: bool) -> None:
        if data:  # none yet: a fresh engine is the start, the log replays the rest
            self.engine.restore(data)

    def sync(self) -> None:
        pass  # the state lives in the raft log and its snapshots
