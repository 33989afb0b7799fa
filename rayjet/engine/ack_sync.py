"""Acks on their way from a consumer to an interest or work-queue stream.

Three pieces, all pure:

- :class:`AckSummary`: which stream seqs a consumer is done with, read from its replicated
  ack state (the ack floor, the last delivered seq and the seqs still pending or counted
  for redelivery). Every replica of the consumer derives the same summary from the same
  committed state, so a new consumer leader knows what the stream may have missed without
  any replica having kept a list of acks.
- :class:`AckOutbox`: the consumer leader's acks that the stream has not confirmed yet.
  Acks stay until the stream answers that it applied them; a failed send goes back in. A
  full reconciliation (the summary instead of a list) replaces the list when the consumer
  starts leading, when the stream's leader changes, and when the list outgrows its bound.
- :func:`sync_seqs`: the stream's side of a reconciliation: of the messages it still
  holds, those this consumer wants and has acked but the stream has not recorded yet.
  Recording them (one stream ``AckOp`` each) removes every message that every interested
  consumer has acked (work queue: its one consumer).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rayjet.engine.retention import Interest

OUTBOX_LIMIT = 65_536  # acks kept one by one; past it a reconciliation stands in for them


@dataclass(frozen=True, slots=True)
class AckSummary:
    """A consumer's settled stream seqs: every seq <= ``last`` not in ``outstanding``.

    ``floor`` is the ack floor (informative: everything at or below it is settled apart
    from ``outstanding`` seqs past max_deliver). Acks only ever add to the set, so an
    older summary never claims more than a newer one."""

    floor: int
    last: int
    outstanding: frozenset[int] = frozenset()

    def acked(self, seq: int) -> bool:
        return 0 < seq <= self.last and seq not in self.outstanding

    def to_list(self) -> list:
        return [self.floor, self.last, sorted(self.outstanding)]

    @classmethod
    def from_list(cls, doc: list) -> AckSummary:
        return cls(int(doc[0]), int(doc[1]), frozenset(int(s) for s in doc[2]))


@dataclass(frozen=True, slots=True)
class Send:
    """One message to the stream: ``seqs`` acked, or (``sync``) a full reconciliation."""

    gen: int
    seqs: tuple[int, ...] = ()
    sync: bool = False


class AckOutbox:
    """The consumer leader's acks not yet confirmed by the stream (one send at a time)."""

    __slots__ = ("_gen", "_queued", "_sending", "limit", "need_sync")

    def __init__(self, limit: int = OUTBOX_LIMIT) -> None:
        self.limit = max(1, limit)
        self._queued: list[int] = []
        self.need_sync = False
        self._sending: Send | None = None
        self._gen = 0

    def __len__(self) -> int:
        """Acks held (queued and in flight)."""
        inflight = len(self._sending.seqs) if self._sending is not None else 0
        return len(self._queued) + inflight

    @property
    def has_work(self) -> bool:
        return self._sending is None and (self.need_sync or bool(self._queued))

    @property
    def busy(self) -> bool:
        """Something is held: queued, in flight or a reconciliation owed."""
        return self.need_sync or bool(self._queued) or self._sending is not None

    def add(self, seqs: Iterable[int]) -> None:
        """Acks just applied on the consumer (leader only)."""
        if self.need_sync:
            return  # the coming reconciliation covers them
        self._queued.extend(seqs)
        if len(self._queued) > self.limit:
            self._queued = []
            self.need_sync = True

    def reconcile(self) -> None:
        """Owe the stream a full reconciliation; the list is covered by it."""
        self._queued = []
        self.need_sync = True

    def clear(self) -> None:
        """Leadership moved: hold nothing; an answer to a send made before is ignored."""
        self._gen += 1
        self._queued = []
        self.need_sync = False
        self._sending = None

    def next(self, max_seqs: int) -> Send | None:
        """What to send now (None: nothing, or a send is in flight). A reconciliation
        comes first and takes the queued acks with it: the caller reads the summary from
        the committed state right after this call, and that state includes them."""
        if self._sending is not None:
            return None
        if self.need_sync:
            self.need_sync = False
            self._queued = []
            self._sending = Send(self._gen, sync=True)
        elif self._queued:
            n = max(1, max_seqs)
            seqs, self._queued = self._queued[:n], self._queued[n:]
            self._sending = Send(self._gen, tuple(seqs))
        return self._sending

    def done(self, send: Send, ok: bool) -> None:
        """The stream applied ``send`` (``ok``), or it may not have: then it goes again."""
        if send.gen != self._gen or self._sending is not send:
            return  # sent under an earlier leadership
        self._sending = None
        if ok:
            return
        if send.sync:
            self.reconcile()
        else:
            self._queued[:0] = send.seqs
            if len(self._queued) > self.limit:
                self.reconcile()


def sync_seqs(interest: Interest, name: str, summary: AckSummary,
              msgs: Iterable[tuple[int, str]]) -> list[int]:
    """The stream seqs (of ``msgs``: (seq, subject) the stream still holds) to record as
    acked by consumer ``name``: it wants them, its summary settles them, and the stream has
    not recorded them yet. Empty for limits retention or a consumer the stream does not
    know (it holds nothing for it)."""
    c = interest.consumers.get(name)
    if c is None or not interest.removes_on_ack:
        return []
    return [seq for seq, subject in msgs
            if summary.acked(seq) and seq not in c.acked and c.wants(seq, subject)]


def kept(interest: Interest, seq: int, subject: str,
         summaries: dict[str, AckSummary]) -> bool:
    """The retention rule itself: a message goes once the consumers that want it (at
    least one) all acked it (``summaries``: each consumer's settled seqs); one nobody
    wants waits for a consumer. Work queue and interest alike, one consumer or many."""
    wanting = [name for name, c in interest.consumers.items() if c.wants(seq, subject)]
    return not wanting or any(name not in summaries or not summaries[name].acked(seq)
                              for name in wanting)


__all__ = ["OUTBOX_LIMIT", "AckOutbox", "AckSummary", "Send", "kept", "sync_seqs"]
