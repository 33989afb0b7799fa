"""The seqs a store lost to damage: stored messages whose records failed their checksum or
are missing from the block files.

A lost seq is not live in the index (it counts in neither ``msgs`` nor ``bytes``), and reads
that would have to serve it raise ``StoreCorruptionError`` instead of answering as if it had
never been stored. It stops being lost when it is deleted (remove, compact, purge,
truncate, a peer's deleted runs) or when the store is wiped.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable

from rayjet.errors import StoreCorruptionError


class LostSeqs(list):
    """Ascending, distinct seqs (a list, so ``if lost:`` costs nothing on the read paths)."""

    def add(self, seq: int) -> None:
        i = bisect_left(self, seq)
        if i == len(self) or self[i] != seq:
            self.insert(i, seq)

    def update(self, seqs: Iterable[int]) -> None:
        new = set(seqs).difference(self)
        if len(new) < 8:
            for seq in new:
                insort(self, seq)
        elif new:
            self[:] = sorted(new.union(self))

    def replace(self, seqs: Iterable[int]) -> None:
        self[:] = sorted(set(seqs))

    def __contains__(self, seq) -> bool:
        i = bisect_left(self, seq)
        return i < len(self) and self[i] == seq

    def discard(self, seq: int) -> bool:
        i = bisect_left(self, seq)
        if i < len(self) and self[i] == seq:
            del self[i]
            return True
        return False

    def drop_range(self, lo: int, hi: int) -> list[int]:
        """Forget the seqs in ``lo..hi``; returns them."""
        a, b = bisect_left(self, lo), bisect_right(self, hi)
        out = self[a:b]
        del self[a:b]
        return out

    def first_in(self, lo: int, hi: int) -> int:
        """The lowest lost seq in ``lo..hi``, 0 when there is none."""
        i = bisect_left(self, lo)
        return self[i] if i < len(self) and self[i] <= hi else 0

    def first(self) -> int:
        return self[0] if self else 0


def lost_error(seq: int) -> StoreCorruptionError:
    return StoreCorruptionError(err=f"message {seq} was lost to damage in the store files",
                                seq=seq)


__all__ = ["LostSeqs", "lost_error"]
