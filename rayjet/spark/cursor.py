"""Incremental replay: a durable pull consumer (ack policy all) as a job's cursor.

A run reads ``(ack floor, last_seq at start]`` in bulk from the replicas (not through the
consumer) and, once its results are safe, calls :meth:`Cursor.commit`: one replicated
"advance" op (:meth:`JetStream.advance_consumer`) moves the consumer's ack floor to the
range's last sequence, whatever the range's size. On interest-retention streams, where
the stream must see every ack, the consumer is instead brought up to the end of the range
(header-only deliveries, nothing processed) and one ``ack all`` settles it. A run that fails before ``commit`` leaves the floor where it was, so the
next run reads the same messages again (plus what arrived since): nothing is lost, and
nothing is counted twice as long as the job's output is written before the commit (and
idempotently, e.g. with :func:`rayjet.spark.write_stream`'s message ids).

One job per cursor at a time: two runs sharing a durable would read the same range.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from rayjet.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy
from rayjet.errors import (
    APIError,
    BadRequestError,
    ConsumerNotFoundError,
    NoMessagesError,
    NotLeaderError,
    ServiceUnavailableError,
    TimeoutError,
)

COMMIT_FETCH = 10_000  # messages per fetch while bringing the consumer up to the range end
CURSOR_ACK_WAIT = 3600.0  # delivered-but-unacked messages stay put during a long commit
CURSOR_MAX_ACK_PENDING = 10_000_000
RETRY_PAUSE = 0.2


@dataclass(frozen=True)
class CommitResult:
    durable: str
    ack_floor: int  # the stream sequence everything up to which is now committed
    fetched: int  # messages the consumer delivered to reach it (0 when it advanced at once)


def cursor_config(durable: str, filters: tuple[str, ...], start_seq: int | None = None,
                  start_time: Any = None) -> ConsumerConfig:
    cfg = ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.ALL, headers_only=True,
                         ack_wait=CURSOR_ACK_WAIT, max_ack_pending=CURSOR_MAX_ACK_PENDING,
                         description="rayjet.spark incremental read cursor")
    if len(filters) == 1 and filters[0] != ">":
        cfg = dataclasses.replace(cfg, filter_subject=filters[0])
    elif len(filters) > 1:
        cfg = dataclasses.replace(cfg, filter_subjects=tuple(filters))
    if start_seq:
        cfg = dataclasses.replace(cfg, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                  opt_start_seq=start_seq)
    elif start_time is not None:
        cfg = dataclasses.replace(cfg, deliver_policy=DeliverPolicy.BY_START_TIME,
                                  opt_start_time=start_time)
    return cfg


def consumer_filters(cfg: ConsumerConfig) -> tuple[str, ...]:
    if cfg.filter_subjects:
        return tuple(cfg.filter_subjects)
    if cfg.filter_subject:
        return (cfg.filter_subject,)
    return ()


def open_cursor(js: Any, stream: str, durable: str, filters: tuple[str, ...], *,
                start_seq: int | None = None, start_time: Any = None) -> tuple[int, Any]:
    """Create (or bind) the durable; returns (first seq to read, consumer info)."""
    if not isinstance(durable, str) or not durable:
        raise BadRequestError(f"durable must be a non-empty name, not {durable!r}")
    try:
        info = js.consumer_info(stream, durable)
    except ConsumerNotFoundError:
        info = js.add_consumer(stream, cursor_config(durable, filters, start_seq, start_time))
    cfg = info.config
    if cfg.ack_policy is not AckPolicy.ALL or not cfg.is_pull:
        raise BadRequestError(f"consumer {durable!r} on {stream} is not a cursor: it must be a "
                              "pull consumer with ack_policy all")
    have = tuple(sorted(consumer_filters(cfg)))
    want = tuple(sorted(f for f in filters if f != ">"))
    if have != want:
        raise BadRequestError(f"cursor {durable!r} filters {list(have) or ['>']}, not "
                              f"{list(want) or ['>']}: use another durable name")
    start = info.ack_floor.stream_seq + 1
    if cfg.deliver_policy is DeliverPolicy.BY_START_SEQUENCE and cfg.opt_start_seq:
        start = max(start, cfg.opt_start_seq)
    elif cfg.deliver_policy is DeliverPolicy.BY_START_TIME and cfg.opt_start_time is not None:
        ts_ns = int(cfg.opt_start_time.timestamp() * 1_000_000) * 1000
        start = max(start, js.stream_handle(stream).seq_for_time(ts_ns))
    return start, info


class Cursor:
    """Progress of one incremental run; :meth:`commit` once its output is safe."""

    def __init__(self, js: Any, stream: str, durable: str, start_seq: int, end_seq: int
                 ) -> None:
        self.js = js
        self.stream = stream
        self.durable = durable
        self.start_seq = start_seq
        self.end_seq = end_seq
        self.committed: CommitResult | None = None

    @property
    def empty(self) -> bool:
        """True when the run has no new sequences to read."""
        return self.end_seq < self.start_seq

    def __repr__(self) -> str:
        return (f"Cursor({self.stream} > {self.durable}: seqs {self.start_seq}..{self.end_seq}"
                f"{', committed' if self.committed else ''})")

    def commit(self, timeout: float = 60.0) -> CommitResult:
        """Record that every message up to ``end_seq`` is done (idempotent).

        Every step is safe to repeat (extra deliveries are harmless, acking the same
        sequence again changes nothing), so a leader change or a timeout midway is retried
        until ``timeout`` seconds have passed."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._commit_once()
            except APIError as err:
                if not _transient(err) or time.monotonic() >= deadline:
                    raise
                time.sleep(RETRY_PAUSE)

    def _commit_once(self) -> CommitResult:
        js, stream, name = self.js, self.stream, self.durable
        info = js.consumer_info(stream, name)
        if info.ack_floor.stream_seq >= self.end_seq:
            self.committed = CommitResult(name, info.ack_floor.stream_seq, 0)
            return self.committed
        if js.stream_info(stream).config.retention is RetentionPolicy.LIMITS:
            info = js.advance_consumer(stream, name, self.end_seq)
            self.committed = CommitResult(name, info.ack_floor.stream_seq, 0)
            return self.committed
        return self._commit_by_fetching(info)

    def _commit_by_fetching(self, info: Any) -> CommitResult:
        js, stream, name = self.js, self.stream, self.durable
        sub = js.pull_subscribe(stream=stream, durable=name)
        fetched = 0
        try:
            while True:
                top = info.delivered.stream_seq
                while top < self.end_seq:
                    try:
                        msgs = sub.fetch(batch=COMMIT_FETCH, timeout=0.2)
                    except NoMessagesError:
                        break
                    fetched += len(msgs)
                    top = max([top] + [m.metadata.sequence.stream for m in msgs])
                info = js.consumer_info(stream, name)
                target = min(self.end_seq, info.delivered.stream_seq)
                if target > info.ack_floor.stream_seq:
                    sub.acks.send("ack", target, sync=True)
                    info = js.consumer_info(stream, name)
                stalled = (info.delivered.stream_seq < self.end_seq
                           and info.num_ack_pending >= (info.config.max_ack_pending or 0) > 0)
                if not stalled:
                    break
                # max_ack_pending reached before the end: the floor moved part way, go on
        finally:
            sub.unsubscribe()
        if info.ack_floor.stream_seq < min(self.end_seq, info.delivered.stream_seq):
            raise ServiceUnavailableError(
                f"cursor {name!r}: the ack floor stayed at {info.ack_floor.stream_seq}, "
                f"expected {self.end_seq}; commit again")
        self.committed = CommitResult(name, info.ack_floor.stream_seq, fetched)
        return self.committed


def _transient(err: APIError) -> bool:
    return (isinstance(err, ServiceUnavailableError | TimeoutError | NotLeaderError)
            or getattr(err, "code", None) in (408, 409, 503))


def reset_cursor(js: Any, stream: str, durable: str) -> bool:
    """Forget a cursor (the next run reads from the start again)."""
    try:
        return js.delete_consumer(stream, durable)
    except ConsumerNotFoundError:
        return False
    except APIError:
        raise


__all__ = ["CommitResult", "Cursor", "cursor_config", "open_cursor", "reset_cursor"]
