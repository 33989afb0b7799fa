"""What applying an op yields: the answer for the client and side effects for the actor."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rayjet.api import PubAck
from rayjet.errors import APIError


@dataclass(frozen=True, slots=True)
class Republish:
    """A message the leader must publish to ``subject`` (stream republish)."""

    subject: str
    hdr: bytes
    data: bytes


@dataclass(slots=True)
class ApplyResult:
    """``ok`` False means the op was skipped (stale seq or refused) and ``error`` says why.

    Publishes answer with ``seq`` (and ``ack``, built on demand: most results of a large
    batch are never turned into PubAcks); other ops with ``value`` (purged count, deleted
    bool...).
    """

    op: Any
    ok: bool = True
    seq: int = 0
    error: APIError | None = None
    value: Any = None
    republish: list[Republish] = field(default_factory=list)
    stream: str = ""
    val: str | None = None  # counter streams: the new value
    batch: str | None = None
    count: int | None = None

    @property
    def answer(self) -> Any:
        """A publish's answer for the client: the stored seq (an int; the client makes the
        plain PubAck), the PubAck when it says more (counter value, batch), or the error."""
        if not self.ok:
            return self.error
        if self.val is None and self.batch is None:
            return self.seq
        return self.ack

    @property
    def ack(self) -> PubAck | None:
        if not self.ok or not self.seq:
            return None
        return PubAck(stream=self.stream, seq=self.seq, val=self.val, batch=self.batch,
                      count=self.count)


@dataclass(slots=True)
class ExpireResult:
    """Local upkeep: messages removed by age/TTL, dedup ids forgotten, and (leader only)
    subject delete marker ops to propose."""

    removed: int = 0
    pruned_ids: int = 0
    ops: list = field(default_factory=list)


__all__ = ["ApplyResult", "ExpireResult", "Republish"]
