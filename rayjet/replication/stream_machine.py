"""A stream replica's state machine: raft entries are batches of stream engine ops.

An entry's data is ``ENTRY_OPS`` followed by a msgpack list of encoded ops (one proposal per
client call, however many messages it carries). The store is durable on its own; a snapshot
records the engine state and the store's last sequence, and restoring one rolls the store
back to that sequence so the raft log replays the rest exactly once.

A snapshot sent to a lagging follower carries state, not data: the store's range and counts
and the engine state, a few KB whatever the stream's size. The follower then copies the
store from a peer (:class:`StoreCopy`): chunks of records from its own last seq on, then a
seal cut by the peer in one step at its applied index (the tail, which seqs it deleted, its
engine state), after which the follower's store and engine are the peer's at that index
exactly and it applies the log from there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgpack

from rayjet.api import StreamConfig
from rayjet.clock import SYSTEM_CLOCK, Clock
from rayjet.engine import ApplyResult, Op, StreamEngine, decode_op, encode_op
from rayjet.errors import BadRequestError

ENTRY_OPS = 1  # entry kinds: only add new numbers
_FULL_VERSION = 1  # a snapshot holding the whole store (written by earlier versions)
_STATE_VERSION = 2  # a snapshot holding the store's range and the engine state only


MAX_CHUNK_BYTES = 64 << 20  # a copy chunk is never larger, whatever the copier asks


def _require_count(name: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise BadRequestError(f"{name} must be a whole number >= {least}, not {value!r}")


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
        self.damaged_from = 0  # the first seq the store had lost to damage when it opened

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
        st = self.store.fast_state()
        summary = {"first": st.first_seq, "last": st.last_seq, "last_ts": st.last_ts,
                   "msgs": st.msgs, "bytes": st.bytes, "deleted": st.num_deleted}
        return msgpack.packb([_STATE_VERSION, summary, self.engine.snapshot()],
                             use_bin_type=True)

    def restore(self, data: bytes, *, full: bool) -> bool:
        """Load a snapshot; True when the store must first be copied from a peer."""
        if full:
            version, store_snap, engine_snap = msgpack.unpackb(data, raw=False)
            if version == _STATE_VERSION:
                return True
            self.store.restore(store_snap)
            self.engine.restore(engine_snap)
            return False
        self._drop_damage()
        if not data:
            # no snapshot yet: the log holds everything, so start from an empty store
            self.store.truncate(0)
            self.engine = StreamEngine(self.engine.config, self.store, self.clock, rebuild=True)
            return False
        decoded = msgpack.unpackb(data, raw=False)
        if isinstance(decoded, list):
            if decoded[0] == _STATE_VERSION:
                # installed from the leader, and no snapshot of our own since: the copy
                # may not have finished, so make it again (the store keeps what it has)
                return True
            # a whole-store snapshot installed from the leader is our own snapshot now:
            # the store it carried was written to disk then; reload it only if the disk lost it
            _version, store_snap, data = decoded
            last = msgpack.unpackb(data, raw=False)["last_seq"]
            if self.store.fast_state().last_seq < last:
                self.store.restore(store_snap)
        else:
            last = decoded["last_seq"]
            if self.store.fast_state().last_seq < last:
                return True  # the store lost what the snapshot covers: copy it from a peer
        if self.store.fast_state().last_seq > last:
            self.store.truncate(last)
        self.engine.restore(data)
        return False

    def _drop_damage(self) -> None:
        """The store found records it lost to damage when it opened: keep only what comes
        before the first of them. The rest comes back as a replica that lost its tail gets
        it: the raft log replays what it still holds, and what a snapshot covers is copied
        from a peer before this replica applies, serves a copy or stands for election."""
        first = self.store.first_damaged_seq()
        if first:
            self.damaged_from = first
            self.store.truncate(first - 1)

    # -- serving a copy (any replica that is not copying itself) ----------------------------
    def copy_chunk(self, from_seq: int, max_bytes: int) -> tuple[bytes, int, int]:
        """Records from ``from_seq`` on (about ``max_bytes``), the seq to continue from,
        and our last seq."""
        _require_count("from_seq", from_seq, 1)
        _require_count("max_bytes", max_bytes, 1)
        records, next_seq = self.store.export_range(from_seq, min(max_bytes, MAX_CHUNK_BYTES))
        return records, next_seq, self.store.fast_state().last_seq

    def copy_seal(self, have_last: int) -> dict:
        """Everything a copier holding our messages up to ``have_last`` still needs to be
        exactly our state: cut in one step, so it matches our applied index."""
        _require_count("have_last", have_last, 0)
        st = self.store.fast_state()
        tail, _ = self.store.export_range(have_last + 1, 1 << 62)
        return {"first": st.first_seq, "last": st.last_seq, "last_ts": st.last_ts,
                "msgs": st.msgs, "bytes": st.bytes, "tail": tail,
                "deleted": self.store.deleted_runs(st.first_seq, min(have_last, st.last_seq)),
                "engine": self.engine.snapshot()}

    # -- copying ------------------------------------------------------------------------------
    def take_chunk(self, records: bytes) -> int:
        return self.store.import_records(records)

    def take_seal(self, seal: dict) -> bool:
        """Make store and engine the peer's; False (and an emptied store, so the next copy
        starts over) when the result does not add up to the peer's counts."""
        store = self.store
        store.import_records(seal["tail"])
        if seal["last"] == 0:
            store.truncate(0)
        else:
            store.reconcile(seal["first"] or seal["last"] + 1, seal["last"], seal["last_ts"],
                            [tuple(r) for r in seal["deleted"]])
        st = store.fast_state()
        if (st.msgs, st.bytes, st.last_seq) != (seal["msgs"], seal["bytes"], seal["last"]):
            store.truncate(0)
            return False
        self.engine.restore(seal["engine"])
        return True

    def sync(self) -> None:
        self.store.sync()

    def take_scrubbed(self) -> bool:
        """Whether an erase or purge ran since the last call: the raft log then rewrites
        itself at the next compaction, so the entries that carried the payloads go too."""
        seen, self._scrubs_seen = self._scrubs_seen, self.store.scrubs
        return self._scrubs_seen != seen


class StoreCopy:
    """What a copying follower asks its peer next: chunks from its store's last seq on
    until it has reached the peer's last seq, then the seal. Pure: the shell does the
    calls (any transport), one at a time, which is the flow control."""

    def __init__(self, machine: StreamMachine, chunk_bytes: int = 4 << 20) -> None:
        self.machine = machine
        self.chunk_bytes = chunk_bytes
        self.copied = 0  # records copied (chunks and seals)
        self.restarts = 0  # seals that did not add up (the copy started over)
        self._from = machine.store.fast_state().last_seq + 1
        self._reached = False

    def next_request(self) -> tuple[str, int]:
        """("chunk", from_seq) or ("seal", have_last)."""
        if self._reached:
            return "seal", self.machine.store.fast_state().last_seq
        return "chunk", self._from

    def on_chunk(self, records: bytes, next_seq: int, peer_last: int) -> None:
        self.copied += self.machine.take_chunk(records)
        self._from = max(self._from, next_seq)
        self._reached = next_seq > peer_last

    def on_seal(self, seal: dict) -> bool:
        """True when the copy is complete (the machine is the peer's state)."""
        if self.machine.take_seal(seal):
            return True
        self.restarts += 1
        self._from, self._reached = 1, False
        return False
