"""The leader's view of proposals in flight (prepared, not yet applied).

Checks made before proposing must see earlier proposals that are not applied yet, or two
pipelined publishes could both pass an expected-sequence, dedup or discard-new check.
"""

from __future__ import annotations


class SubjectPending:
    __slots__ = ("ops", "bytes", "last_seq", "counter", "schedule")

    def __init__(self) -> None:
        self.ops = 0
        self.bytes = 0
        self.last_seq = 0
        self.counter: int | None = None  # counter value after the last in-flight increment
        self.schedule = False  # the last in-flight message on the subject is a schedule


class Pending:
    __slots__ = ("next_seq", "last_ts", "last_msg_id", "by_seq", "runs", "subjects", "ids",
                 "msgs", "bytes")

    def __init__(self) -> None:
        self.next_seq = 1
        self.last_ts = 0
        self.last_msg_id = ""
        self.by_seq: dict[int, tuple[str, int, str]] = {}
        # first seq -> a run proposed as one op: (count, {subject: (msgs, bytes)}, bytes, ids)
        self.runs: dict[int, tuple[int, dict[str, tuple[int, int]], int, list[str]]] = {}
        self.subjects: dict[str, SubjectPending] = {}
        self.ids: dict[str, int] = {}
        self.msgs = 0
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.by_seq) + sum(r[0] for r in self.runs.values())

    def holds(self, seq: int) -> bool:
        """Whether ``seq`` is proposed and not applied yet."""
        return seq in self.by_seq or any(0 <= seq - first < r[0] for first, r in self.runs.items())

    def reset(self, last_seq: int, last_ts: int, last_msg_id: str) -> None:
        """Forget everything in flight and continue after the applied state."""
        self.next_seq = last_seq + 1
        self.last_ts = last_ts
        self.last_msg_id = last_msg_id
        self.by_seq.clear()
        self.runs.clear()
        self.subjects.clear()
        self.ids.clear()
        self.msgs = 0
        self.bytes = 0

    def add(self, seq: int, subject: str, size: int, msg_id: str, counter: int | None,
            schedule: bool) -> None:
        self.by_seq[seq] = (subject, size, msg_id)
        sp = self.subjects.get(subject)
        if sp is None:
            sp = self.subjects[subject] = SubjectPending()
        sp.ops += 1
        sp.bytes += size
        sp.last_seq = seq
        sp.schedule = schedule
        if counter is not None:
            sp.counter = counter
        if msg_id:
            self.ids[msg_id] = seq
        self.msgs += 1
        self.bytes += size
        self.last_msg_id = msg_id

    def add_run(self, first: int, count: int, subjects: dict[str, tuple[int, int, int]],
                size: int, ids: list[str]) -> None:
        """A run of ``count`` plain messages from seq ``first``: ``subjects`` maps each
        subject to (messages, bytes, its last seq in the run); ``ids`` are the run's msg
        ids in order ("" for none)."""
        for subject, (msgs, nbytes, last) in subjects.items():
            sp = self.subjects.get(subject)
            if sp is None:
                sp = self.subjects[subject] = SubjectPending()
            sp.ops += msgs
            sp.bytes += nbytes
            sp.last_seq = last
            sp.schedule = False
        if ids:
            for seq, msg_id in enumerate(ids, first):
                if msg_id:
                    self.ids[msg_id] = seq
            self.last_msg_id = ids[-1]
        else:
            self.last_msg_id = ""
        self.runs[first] = (count, {s: (m, b) for s, (m, b, _) in subjects.items()}, size, ids)
        self.msgs += count
        self.bytes += size

    def applied_run(self, first: int) -> None:
        run = self.runs.pop(first, None)
        if run is None:
            return
        count, subjects, size, ids = run
        for subject, (msgs, nbytes) in subjects.items():
            sp = self.subjects.get(subject)
            if sp is not None:
                sp.ops -= msgs
                sp.bytes -= nbytes
                if sp.ops <= 0:
                    del self.subjects[subject]
        for seq, msg_id in enumerate(ids, first):
            if msg_id and self.ids.get(msg_id) == seq:
                del self.ids[msg_id]
        self.msgs -= count
        self.bytes -= size

    def skip(self, num: int) -> int:
        """Reserve ``num`` sequences without messages; returns the first."""
        seq = self.next_seq
        self.next_seq += num
        return seq

    def applied(self, seq: int) -> None:
        entry = self.by_seq.pop(seq, None)
        if entry is None:
            return
        subject, size, msg_id = entry
        sp = self.subjects.get(subject)
        if sp is not None:
            sp.ops -= 1
            sp.bytes -= size
            if sp.ops <= 0:
                del self.subjects[subject]
        if msg_id and self.ids.get(msg_id) == seq:
            del self.ids[msg_id]
        self.msgs -= 1
        self.bytes -= size


__all__ = ["Pending", "SubjectPending"]
