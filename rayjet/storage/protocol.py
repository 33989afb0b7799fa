"""The StreamStore interface shared by MemStore and FileStore, and the values it returns.

Sequences start at 1; 0 means "none". Timestamps are int nanoseconds since the epoch.
Missing messages raise ``NotFoundError`` (err_code 10037); writes refused by a discard-new
limit raise ``StoreLimitError`` (err_code 10077). A message the store lost to damage is not
missing: reads that reach it raise ``StoreCorruptionError`` (its ``fields["seq"]`` names it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from rayjet.storage.config import StoreConfig


@dataclass(frozen=True, slots=True)
class StoredMsg:
    subject: str
    hdr: bytes
    data: bytes
    seq: int
    ts: int

    def __reduce__(self):
        # plain positional pickling: a third of the cost of the dataclass default, and
        # messages cross between actors by the thousand
        return (StoredMsg, (self.subject, self.hdr, self.data, self.seq, self.ts))


@dataclass(frozen=True, slots=True)
class StoreState:
    msgs: int = 0
    bytes: int = 0
    first_seq: int = 0
    first_ts: int = 0
    last_seq: int = 0
    last_ts: int = 0
    num_subjects: int = 0
    num_deleted: int = 0
    deleted: list[int] = field(default_factory=list)
    # seqs of stored messages lost to damage (FileStore: a record failed its checksum or is
    # missing from the files), ascending; not live (not in msgs/bytes, counted in
    # num_deleted and listed in deleted), but reads that reach one raise
    # StoreCorruptionError. fast_state() has them too.
    lost: list[int] = field(default_factory=list)


# one message of a batch: (subject, hdr, data) or (subject, hdr, data, ttl)
BatchItem = tuple[str, bytes, bytes] | tuple[str, bytes, bytes, int]
# one replicated record: (subject, hdr, data, seq, ts, ttl), seq and ts fixed by the leader
RawItem = tuple[str, bytes, bytes, int, int, int]
# called with (subject, hdr) of a subject delete marker instead of storing it locally
MarkerHandler = Callable[[str, bytes], None]


@runtime_checkable
class StreamStore(Protocol):
    config: StoreConfig
    # Subject delete markers: when max_age or a TTL removes the last message of a subject
    # and ``subject_delete_marker_ttl`` is set, the store writes a marker message itself
    # while this is None. A replicated stream sets it instead (to a callable taking the
    # marker's subject and header bytes): the store then only reports the marker, and the
    # leader proposes it so that every replica stores the same one at the same seq.
    marker_handler: MarkerHandler | None

    # -- writes ------------------------------------------------------------------------------
    def store_msg(self, subject: str, hdr: bytes, data: bytes, ttl: int = 0) -> tuple[int, int]:
        """Append with the next seq and the clock's time; discard-new limits apply."""

    def store_batch(self, msgs: Iterable[BatchItem]) -> list[tuple[int, int]]:
        """Append many messages with one write and (with sync 'always') one fsync."""

    def store_raw(self, subject: str, hdr: bytes, data: bytes, seq: int, ts: int,
                  ttl: int = 0, discard_new_check: bool = False) -> None:
        """Store a record whose seq and ts were fixed by the leader; seq must be > last_seq."""

    def store_raw_batch(self, items: Sequence[RawItem],
                        discard_new_check: bool = False) -> None:
        """:meth:`store_raw` for many ``(subject, hdr, data, seq, ts, ttl)`` items with
        consecutive seqs above last_seq, in one write and (sync 'always') one fsync; the
        resulting state is the one of calling :meth:`store_raw` for each item in turn."""

    def skip_msg(self, seq: int = 0) -> int: ...

    def skip_msgs(self, seq: int, num: int) -> None: ...

    # -- reads -------------------------------------------------------------------------------
    def load_msg(self, seq: int) -> StoredMsg: ...

    def load_next_msg(self, filter: str = ">", wildcard: bool = True,
                      start_seq: int = 0) -> tuple[StoredMsg, int]: ...

    def load_last_msg(self, subject: str = ">") -> StoredMsg: ...

    def load_prev_msg(self, start_seq: int, filter: str = ">",
                      wildcard: bool = True) -> tuple[StoredMsg, int]: ...

    def last_seq_for_subject(self, subject: str) -> int:
        """The seq :meth:`load_last_msg` would return, or 0 when there is none (no read)."""

    # -- deletes -----------------------------------------------------------------------------
    def remove_msg(self, seq: int) -> bool: ...

    def erase_msg(self, seq: int) -> bool: ...

    def purge(self) -> int: ...

    def purge_ex(self, subject: str = "", seq: int = 0, keep: int = 0) -> int: ...

    def compact(self, seq: int) -> int: ...

    def truncate(self, seq: int) -> None:
        """Drop every message above ``seq``; seqs above it lost to damage are forgotten."""

    def first_damaged_seq(self) -> int:
        """The lowest seq lost to damage (``StoreState.lost``), 0 when none (MemStore: 0)."""

    def expire(self, now_ns: int | None = None) -> int: ...

    def next_expiry_ns(self) -> int | None: ...

    # -- state -------------------------------------------------------------------------------
    def state(self) -> StoreState: ...

    def fast_state(self) -> StoreState: ...

    def subjects_totals(self, filter: str = ">") -> dict[str, int]: ...

    def num_pending(self, start_seq: int, filter: str = ">",
                    last_per_subject: bool = False) -> tuple[int, int]: ...

    def snapshot(self) -> bytes: ...

    def restore(self, snapshot: bytes | Sequence[bytes]) -> None: ...

    def update_config(self, cfg: StoreConfig) -> None: ...

    def flush(self) -> None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...

    def stop(self) -> None: ...


__all__ = ["BatchItem", "MarkerHandler", "RawItem", "StoreState", "StoredMsg", "StreamStore"]
