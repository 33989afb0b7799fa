"""A stream replica's state machine: raft entries are batches of stream engine ops.

An entry's data is ``ENTRY_OPS`` followed by a msgpack list of encoded ops (one proposal per
client call, however many messages it carries). The store is durable on its own; a snapshot
records the engine state and the store's last sequence, and restoring one rolls the store
back to that sequence so the raft log replays the rest exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgpack

from rayjet.api import StreamConfig
from rayjet.clock import SYSTEM_CLOCK, Clock
from rayjet.engine import ApplyResult, Op, StreamEngine, decode_op, encode_op
from rayjet.errors import BadRequestError

ENTRY_OPS = 1  # entry kinds: only add new numbers
_FULL_VERSION = 1


def encode_entry(ops: Sequence[Op]) -> bytes:
    return bytes((ENTRY_OPS,)) + msgpack.packb([encode_op(op) for op in ops], use_bin_type=True)


def decode_entry(data: bytes) -> list[Op]:
    if not data or data[0] != ENTRY_OPS:
        raise BadRequestError(f"unknown stream entry kind {data[:1]!r}")
    return [decode_op(raw) for raw in msgpack.unpackb(memoryview(data)[1:], raw=False)]


class StreamMachine:
    def __init__(self, config: StreamConfig, store, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.engine = StreamEngine(config, store, clock, rebuild=False)
        self.on_applied: list[Callable[[list[ApplyResult]], None]] = []
        # the leader applies the ops it proposed without decoding its own entry again
        self._proposed: dict[int, tuple[bytes, list[Op]]] = {}
        self._scrubs_seen = 0  # store.scrubs at the last take_scrubbed

    def encode(self, ops: list[Op]) -> bytes:
        """Encode ``ops`` for proposing from this replica, remembering them for apply."""
        data = encode_entry(ops)
        if len(self._proposed) > 4096:  # proposals that never committed (lost leadership)
            self._proposed.clear()
        self._proposed[id(data)] = (data, ops)
        return data

    def apply(self, index: int, data: bytes) -> list[ApplyResult]:
        mine = self._proposed.pop(id(data), None)
        ops = mine[1] if mine is not None and mine[0] is data else decode_entry(data)
        results = self.engine.apply_batch(ops)
        for hook in self.on_applied:
            hook(results)
        return results

    def snapshot(self) -> bytes:
        return self.engine.snapshot()

    def full_snapshot(self) -> bytes:
        return msgpack.packb([_FULL_VERSION, self.store.snapshot(), self.engine.snapshot()],
                             use_bin_type=True)

    def restore(self, data: bytes, *, full: bool) -> None:
        if full:
            _version, store_snap, engine_snap = msgpack.unpackb(data, raw=False)
            self.store.restore(store_snap)
            self.engine.restore(engine_snap)
            return
        if not data:
            # no snapshot yet: the log holds everything, so start from an empty store
            self.store.truncate(0)
            self.engine = StreamEngine(self.engine.config, self.store, self.clock, rebuild=True)
            return
        decoded = msgpack.unpackb(data, raw=False)
        if isinstance(decoded, list):
            # the snapshot this replica installed from its leader is its own snapshot now:
            # the store it carried was written to disk then; reload it only if the disk lost it
            _version, store_snap, data = decoded
            last = msgpack.unpackb(data, raw=False)["last_seq"]
            if self.store.fast_state().last_seq < last:
                self.store.restore(store_snap)
        else:
            last = decoded["last_seq"]
        if self.store.fast_state().last_seq > last:
            self.store.truncate(last)
        self.engine.restore(data)

    def sync(self) -> None:
        self.store.sync()

    def take_scrubbed(self) -> bool:
        """Whether an erase or purge ran since the last call: the raft log then rewrites
        itself at the next compaction, so the entries that carried the payloads go too."""
        seen, self._scrubs_seen = self._scrubs_seen, self.store.scrubs
        return self._scrubs_seen != seen
