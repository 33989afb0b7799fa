"""A simulated disk: writes land in a volatile buffer and become durable only on sync."""

from __future__ import annotations

import random

from rayjet.raft import Entry, HardState, MemoryLogStorage, Snapshot


class Disk:
    """Durable state plus an ordered log of unsynced write records.

    Records are ``("snap", Snapshot)``, ``("ent", Entry)`` (truncate after ``index - 1``,
    then append), ``("hs", HardState)``, ``("mksnap", Snapshot)`` and ``("compact", int)``.
    A crash keeps a prefix of the unsynced records: none (page cache lost), some (torn write),
    or up to a corrupted record that recovery's checksum rejects along with all after it.
    """

    def __init__(self) -> None:
        self.durable = MemoryLogStorage()
        self.pending: list[tuple[str, object]] = []

    def write_snapshot(self, snap: Snapshot) -> None:
        self.pending.append(("snap", snap))

    def write_entries(self, ents: list[Entry]) -> None:
        self.pending.extend(("ent", e) for e in ents)

    def write_hard_state(self, hs: HardState) -> None:
        self.pending.append(("hs", hs))

    def write_local_snapshot(self, snap: Snapshot, compact_to: int) -> None:
        self.pending.append(("mksnap", snap))
        self.pending.append(("compact", compact_to))

    def sync(self) -> None:
        self._apply(self.pending)
        self.pending = []

    def crash(self, rng: random.Random) -> str:
        """Lose unsynced writes the way a power cut would; returns what happened."""
        n = len(self.pending)
        if n == 0:
            how, keep = "nothing unsynced", 0
        else:
            roll = rng.random()
            if roll < 0.5:
                how, keep = f"lost {n} unsynced record(s)", 0
            elif roll < 0.8:
                keep = rng.randint(0, n)
                how = f"torn write kept {keep}/{n} unsynced record(s)"
            else:
                keep = rng.randrange(n)
                how = (f"unsynced record {keep + 1}/{n} corrupted; recovery truncated there "
                       f"(kept {keep})")
        self._apply(self.pending[:keep])
        self.pending = []
        return how

    def _apply(self, records: list[tuple[str, object]]) -> None:
        st = self.durable
        i = 0
        while i < len(records):
            kind, val = records[i]
            if kind == "ent":
                # Coalesce a run of entries into one append (keeps this linear).
                j = i
                while j < len(records) and records[j][0] == "ent":
                    j += 1
                ents = [r[1] for r in records[i:j]]
                self._append_runs(ents)
                i = j
                continue
            if kind == "hs":
                st.set_hard_state(val)
            elif kind == "snap":
                st.apply_snapshot(val)
            elif kind == "mksnap":
                if val.index > st.snapshot().index:
                    st.create_snapshot(val.index, val.meta.conf_state, val.data)
            elif kind == "compact":
                st.compact(min(val, st.snapshot().index))
            i += 1

    def _append_runs(self, ents: list) -> None:
        # Each Ready's entries are contiguous; consecutive Readies may overlap (truncation).
        run = [ents[0]]
        for e in ents[1:]:
            if e.index == run[-1].index + 1:
                run.append(e)
            else:
                self.durable.append(run)
                run = [e]
        self.durable.append(run)
