"""Messages delivered by consumers, with the ack methods of nats-py's ``Msg``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from ray.exceptions import RayError

from rayjet.actors.router import GroupRouter
from rayjet.api import headers as H
from rayjet.api.metadata import MsgMetadata, SequencePair
from rayjet.engine.consumer.delivery_batch import DeliveryBatch, expand_ranges, seq_ranges
from rayjet.errors import BadRequestError, ServiceUnavailableError

ACK_FLUSH_EVERY = 0.01  # seconds an answer may wait to travel with others (or a fetch)
ACK_RETRY_PAUSE = 0.2  # seconds between sends of a batch that did not get through
ACK_RETRY_FOR = 60.0  # seconds a batch is sent again before it is given up
ACK_SEND_AT = 512  # queued acks that go out at once, without waiting for the next turn



class AckSender:
    """Sends a subscription's acks to its consumer's leader, batching plain acks.

    A batch that does not reach the leader (a leader election, a slow or paused replica)
    is sent again: acks are idempotent (by stream sequence), and an ack dropped on the way
    leaves a message the application already handled to be redelivered. After
    ``ACK_RETRY_FOR`` seconds of failures the batch is given up (its messages come back
    after ack_wait, as with any lost ack)."""

    def __init__(self, router: GroupRouter, timeout: float) -> None:
        self.router = router
        self.timeout = timeout
        self._pending: list[tuple[str, int, Any]] = []  # naks, progress, terms
        self._plain: list[int] = []  # stream seqs of plain acks
        self._since: float | None = None  # when the oldest queued answer was queued
        self._failing_since: float | None = None
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()  # one batch on its way at a time, in order
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="rayjet-acks", daemon=True)
        self._thread.start()

    def send(self, kind: str, seq: int, arg: Any = None, *, sync: bool = False) -> bool:
        if sync:
            self.flush()
            (ok,) = self.router.call("ack", [(kind, seq, arg)], True, timeout=self.timeout)
            return ok
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
            if kind == "ack":
                self._plain.append(seq)
            else:
                self._pending.append((kind, seq, arg))
            if len(self._pending) + len(self._plain) >= ACK_SEND_AT:
                self._wake.set()
        return True

    def send_many(self, seqs: list[int]) -> None:
        """Plain acks of ``seqs``, queued as one."""
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
            self._plain.extend(seqs)
            if len(self._pending) + len(self._plain) >= ACK_SEND_AT:
                self._wake.set()

    def take(self) -> tuple[list[tuple[str, int, Any]], Any]:
        """What is queued, taken out to travel with another call (a fetch) as ``acks`` and
        ``ranges``; :meth:`put_back` if that call fails."""
        with self._send_lock, self._lock:
            batch, self._pending = self._pending, []
            plain, self._plain = self._plain, []
            self._since = None
        return batch, (seq_ranges(plain) if plain else ())

    def put_back(self, batch: list[tuple[str, int, Any]], ranges: Any) -> None:
        """Answers :meth:`take` gave whose call may not have arrived: queued again, ahead
        of newer ones (sending twice is harmless: answers go by stream seq)."""
        with self._lock:
            self._pending[:0] = batch
            self._plain[:0] = expand_ranges(ranges) if len(ranges) else []
            self._since = self._since or time.monotonic()
        self._wake.set()

    def flush(self) -> None:
        """Send what is queued; on a failure it stays queued (ahead of newer acks) and the
        error is raised."""
        with self._send_lock:
            with self._lock:
                batch, self._pending = self._pending, []
                plain, self._plain = self._plain, []
                self._since = None
            if not batch and not plain:
                return
            try:
                if plain:  # plain acks cross as ranges of stream seqs
                    self.router.call("ack", batch, False, timeout=self.timeout,
                                     ranges=seq_ranges(plain))
                else:
                    self.router.call("ack", batch, False, timeout=self.timeout)
            except (ServiceUnavailableError, RayError, TimeoutError):  # may not have arrived
                now = time.monotonic()
                if self._failing_since is None:
                    self._failing_since = now
                if now - self._failing_since < ACK_RETRY_FOR:
                    with self._lock:
                        self._pending[:0] = batch
                        self._plain[:0] = plain
                        self._since = self._since or now
                else:
                    self._failing_since = None  # give this batch up; ack_wait redelivers
                raise
            self._failing_since = None

    def _run(self) -> None:
        while not self._stopped:
            woken = self._wake.wait(ACK_FLUSH_EVERY)
            self._wake.clear()
            since = self._since
            if not woken and (since is None or time.monotonic() - since < ACK_FLUSH_EVERY):
                continue  # nothing, or acks too young: the next fetch may take them along
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - kept for the next turn (see flush)
                time.sleep(ACK_RETRY_PAUSE)

    def stop(self) -> None:
        """Stop the sender; what is queued goes out first (retried within ``timeout``)."""
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=10)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                self.flush()
                return
            except Exception:  # noqa: BLE001 - best effort on close
                if time.monotonic() >= deadline or not (self._pending or self._plain):
                    return
                time.sleep(ACK_RETRY_PAUSE)


def stream_seqs(batch) -> list[int]:
    """The stream seqs of fetched messages: a record batch or table's ``stream_seq``
    column, or the seqs themselves."""
    if isinstance(batch, pa.RecordBatch | pa.Table):
        if "stream_seq" not in batch.schema.names:
            raise BadRequestError("acking a batch needs its stream_seq column")
        col = batch.column("stream_seq")
        if col.null_count:
            raise BadRequestError("stream_seq holds nulls")
        seqs = col.to_pylist()
    else:
        seqs = list(batch)
    for seq in seqs:
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise BadRequestError(f"a stream seq is an int >= 1, not {seq!r}")
    return seqs


def ack_all(acks: AckSender | None, batch) -> None:
    """Ack every message of a fetched batch at once: a :class:`MsgBatch` (what is not
    answered yet), or a record batch / table / stream seqs (see :func:`stream_seqs`)."""
    if isinstance(batch, MsgBatch):
        batch.ack()
        return
    if acks is None:
        raise BadRequestError("this consumer does not take acks (ack_policy none)")
    acks.send_many(stream_seqs(batch))


class Msg:
    """A delivered message. ``ack``/``nak``/``in_progress``/``term`` answer it once."""

    __slots__ = ("subject", "data", "_hdr", "_batch", "_i", "_headers", "_metadata", "_acks",
                 "_acked", "_ack_policy_none")

    def __init__(self, batch: DeliveryBatch, i: int, acks: AckSender | None,
                 ack_none: bool = False) -> None:
        self.subject, self._hdr, self.data = batch.message(i)
        self._batch = batch
        self._i = i
        self._headers: dict[str, str] | None = None
        self._metadata: MsgMetadata | None = None
        self._acks = acks
        self._acked = False
        self._ack_policy_none = ack_none

    @property
    def reply(self) -> str:
        """The ``$JS.ACK...`` subject nats-server would give this delivery."""
        return self._batch.reply(self._i)

    @property
    def stream_seq(self) -> int:
        return self._batch.lists()[3][self._i]

    @property
    def metadata(self) -> MsgMetadata:
        # built on first use: many readers never look, and a datetime per message is dear
        if self._metadata is None:
            b, i = self._batch, self._i
            _, _, _, sseq, cseq, delivered, pending, ts = b.lists()
            self._metadata = MsgMetadata(
                SequencePair(sseq[i], cseq[i]), delivered[i], pending[i],
                datetime.fromtimestamp(ts[i] / 1e9, tz=UTC), b.stream, b.consumer)
        return self._metadata

    @property
    def headers(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = H.decode_headers(self._hdr)
        return self._headers

    def __repr__(self) -> str:
        return f"Msg(subject={self.subject!r}, seq={self.stream_seq}, data={self.data[:32]!r})"

    def _check_answer(self) -> None:
        if self._ack_policy_none or self._acks is None:
            raise BadRequestError("this consumer does not take acks (ack_policy none)")
        if self._acked:
            raise BadRequestError(f"message {self.stream_seq} was already answered (ack, "
                                  "nak or term)")

    def _answer(self, kind: str, arg: Any = None, *, sync: bool = False) -> bool:
        self._check_answer()
        ok = self._acks.send(kind, self.stream_seq, arg, sync=sync)
        if kind != "progress":
            self._acked = True
        return ok

    def ack(self) -> None:
        self._answer("ack")

    def ack_sync(self, timeout: float | None = None) -> None:
        """Ack and wait until the ack is durable on a majority of the consumer's replicas."""
        self._answer("ack", sync=True)

    def nak(self, delay: float | None = None) -> None:
        if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int | float)
                                  or delay < 0):
            raise BadRequestError(f"nak delay must be seconds >= 0, not {delay!r}")
        self._answer("nak", delay)

    def in_progress(self) -> None:
        self._answer("progress")

    def term(self, reason: str | None = None) -> None:
        self._answer("term", reason or "")


class MsgBatch(Sequence[Msg]):
    """The messages of one fetch or push poll, in delivery order: a ``Msg`` is made when
    first looked at (the same object every time after). :meth:`ack` answers all of them
    at once; :meth:`to_arrow` gives them as an Arrow record batch."""

    __slots__ = ("batch", "_msgs", "_acks", "_ack_none", "_all_acked")

    def __init__(self, batch: DeliveryBatch, acks: AckSender | None,
                 ack_none: bool = False) -> None:
        self.batch = batch
        self._msgs: list[Msg | None] = [None] * len(batch)
        self._acks = acks
        self._ack_none = ack_none
        self._all_acked = False

    def __len__(self) -> int:
        return len(self._msgs)

    def _msg(self, i: int) -> Msg:
        msg = self._msgs[i]
        if msg is None:
            msg = self._msgs[i] = Msg(self.batch, i, self._acks, self._ack_none)
            msg._acked = self._all_acked
        return msg

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._msg(j) for j in range(*i.indices(len(self._msgs)))]
        if i < 0:
            i += len(self._msgs)
        if not 0 <= i < len(self._msgs):
            raise IndexError("message index out of range")
        return self._msg(i)

    def __iter__(self) -> Iterator[Msg]:
        for i in range(len(self._msgs)):
            yield self._msg(i)

    def __add__(self, other) -> list[Msg]:
        return [*self, *other]

    def __radd__(self, other) -> list[Msg]:
        return [*other, *self]

    def __repr__(self) -> str:
        return f"MsgBatch({len(self)} messages of {self.batch.stream} > {self.batch.consumer})"

    @property
    def stream_seqs(self) -> list[int]:
        return self.batch.lists()[3]

    def to_arrow(self) -> pa.RecordBatch:
        """The messages as rows (see :data:`rayjet.engine.consumer.delivery_batch.ARROW_SCHEMA`)."""
        return self.batch.to_arrow()

    def ack(self) -> None:
        """Ack every message of the batch not answered yet, in one go (the acks cross to
        the consumer as ranges of stream seqs)."""
        if self._ack_none or self._acks is None:
            raise BadRequestError("this consumer does not take acks (ack_policy none)")
        seqs = self.stream_seqs
        todo = [seq for seq, msg in zip(seqs, self._msgs, strict=True)
                if msg is None or not msg._acked]
        for msg in self._msgs:
            if msg is not None:
                msg._acked = True
        self._all_acked = True  # messages looked at later are answered already
        self._acks.send_many(todo)
