"""Interest and work-queue retention: who still needs a message.

Consumers register their filter subjects and the first stream sequence they care about.
Under interest retention a message is removed once every consumer interested in it acked it;
under work-queue retention the first ack removes it. Limits still apply as upper bounds (the
store enforces them). The consumer state machine itself lives elsewhere; this is the hook.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rayjet.api.enums import RetentionPolicy
from rayjet.errors import error_for
from rayjet.subjects import subject_matches, subjects_collide, validate_filter


@dataclass(slots=True)
class ConsumerInterest:
    filters: tuple[str, ...]
    start_seq: int = 0  # interested in sequences >= start_seq
    acked: set[int] = field(default_factory=set)

    def wants(self, seq: int, subject: str) -> bool:
        if seq < self.start_seq:
            return False
        if not self.filters:
            return True
        return any(subject_matches(subject, f) for f in self.filters)


class Interest:
    __slots__ = ("consumers", "retention")

    def __init__(self, retention: RetentionPolicy = RetentionPolicy.LIMITS) -> None:
        self.retention = retention
        self.consumers: dict[str, ConsumerInterest] = {}

    def __len__(self) -> int:
        return len(self.consumers)

    @property
    def removes_on_ack(self) -> bool:
        return self.retention is not RetentionPolicy.LIMITS

    def register(self, name: str, filters: tuple[str, ...] | list[str] = (), start_seq: int = 0,
                 max_consumers: int = -1) -> None:
        """Add or update a consumer. Raises 10026 over max_consumers, and the work-queue
        rules 10099/10100 (one consumer per subject)."""
        filters = tuple(f for f in filters if f and f != ">")
        for f in filters:
            validate_filter(f)
        existing = self.consumers.get(name)
        if existing is None and max_consumers > 0 and len(self.consumers) >= max_consumers:
            raise error_for("CONSUMER_MAX_CONSUMERS")
        if self.retention is RetentionPolicy.WORK_QUEUE:
            for other_name, other in self.consumers.items():
                if other_name == name:
                    continue
                if not filters and not other.filters:
                    raise error_for("CONSUMER_WQ_MULTIPLE_UNFILTERED")
                if not filters or not other.filters or any(
                        subjects_collide(a, b) for a in filters for b in other.filters):
                    raise error_for("CONSUMER_WQ_NOT_UNIQUE")
        if existing is None:
            self.consumers[name] = ConsumerInterest(filters, start_seq)
        else:
            existing.filters = filters

    def unregister(self, name: str) -> bool:
        return self.consumers.pop(name, None) is not None

    def has_interest(self, subject: str) -> bool:
        return any(c.wants(c.start_seq, subject) for c in self.consumers.values())

    def needed(self, seq: int, subject: str) -> bool:
        """Whether a consumer interested in (seq, subject) has not acked it yet."""
        return any(c.wants(seq, subject) and seq not in c.acked for c in self.consumers.values())

    def ack(self, name: str, seq: int, subject: str) -> bool:
        """Record the ack; True when the message should now be removed."""
        consumer = self.consumers.get(name)
        if consumer is None or not self.removes_on_ack:
            return False
        if self.retention is RetentionPolicy.WORK_QUEUE:
            return consumer.wants(seq, subject)
        consumer.acked.add(seq)
        if self.needed(seq, subject):
            return False
        self.forget(seq)
        return True

    def forget(self, seq: int) -> None:
        for c in self.consumers.values():
            c.acked.discard(seq)

    def prune(self, first_seq: int) -> None:
        """Drop ack records below the stream's first sequence."""
        for c in self.consumers.values():
            if c.acked:
                c.acked = {s for s in c.acked if s >= first_seq}

    def to_list(self) -> list[list]:
        return [[n, list(c.filters), c.start_seq, sorted(c.acked)]
                for n, c in self.consumers.items()]

    def load(self, rows: list) -> None:
        self.consumers = {n: ConsumerInterest(tuple(f), s, set(a)) for n, f, s, a in rows}


__all__ = ["ConsumerInterest", "Interest"]
