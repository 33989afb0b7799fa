"""The Nats-Msg-Id table: ids stored within the duplicate window and their sequences."""

from __future__ import annotations


class DedupTable:
    """msg id -> (seq, ts). Entries are kept in timestamp order so pruning pops from the front."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: dict[str, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, msg_id: str) -> bool:
        return msg_id in self._ids

    def get(self, msg_id: str, now: int, window_ns: int) -> int:
        """The seq stored under ``msg_id`` if still inside the window at ``now``, else 0."""
        entry = self._ids.get(msg_id)
        if entry is None or entry[1] < now - window_ns:
            return 0
        return entry[0]

    def known(self, msg_ids: set[str]) -> set[str]:
        """The ids of ``msg_ids`` the table holds (in the window or not)."""
        return msg_ids & self._ids.keys()

    def add(self, msg_id: str, seq: int, ts: int) -> None:
        ids = self._ids
        if msg_id in ids:
            del ids[msg_id]  # keep insertion order == timestamp order
        ids[msg_id] = (seq, ts)

    def oldest_ts(self) -> int | None:
        """The timestamp of the oldest id kept (None when empty)."""
        for _seq, ts in self._ids.values():
            return ts
        return None

    def prune(self, now: int, window_ns: int) -> int:
        """Forget ids older than the window; returns how many were dropped."""
        cutoff = now - window_ns
        ids = self._ids
        stale = []
        for msg_id, (_seq, ts) in ids.items():
            if ts >= cutoff:
                break
            stale.append(msg_id)
        for msg_id in stale:
            del ids[msg_id]
        return len(stale)

    def clear(self) -> None:
        self._ids.clear()

    def to_list(self) -> list[list]:
        return [[k, s, t] for k, (s, t) in self._ids.items()]

    @classmethod
    def from_list(cls, rows: list) -> DedupTable:
        table = cls()
        for msg_id, seq, ts in rows:
            table._ids[msg_id] = (seq, ts)
        return table


__all__ = ["DedupTable"]
