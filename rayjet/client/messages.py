"""Messages delivered by consumers, with the ack methods of nats-py's ``Msg``."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ray.exceptions import RayError

from rayjet.actors.router import GroupRouter
from rayjet.api import headers as H
from rayjet.errors import BadRequestError, ServiceUnavailableError

ACK_FLUSH_EVERY = 0.01  # seconds a plain ack may wait to travel with others
ACK_RETRY_PAUSE = 0.2  # seconds between sends of a batch that did not get through
ACK_RETRY_FOR = 60.0  # seconds a batch is sent again before it is given up


@dataclass(frozen=True)
class SequencePair:
    stream: int
    consumer: int


@dataclass(frozen=True)
class MsgMetadata:
    sequence: SequencePair
    num_delivered: int
    num_pending: int
    timestamp: datetime
    stream: str
    consumer: str
    domain: str | None = None


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
        self._pending: list[tuple[str, int, Any]] = []
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
            self._pending.append((kind, seq, arg))
            if len(self._pending) >= 512:
                self._wake.set()
        return True

    def flush(self) -> None:
        """Send what is queued; on a failure it stays queued (ahead of newer acks) and the
        error is raised."""
        with self._send_lock:
            with self._lock:
                batch, self._pending = self._pending, []
            if not batch:
                return
            try:
                self.router.call("ack", batch, False, timeout=self.timeout)
            except (ServiceUnavailableError, RayError, TimeoutError):  # may not have arrived
                now = time.monotonic()
                if self._failing_since is None:
                    self._failing_since = now
                if now - self._failing_since < ACK_RETRY_FOR:
                    with self._lock:
                        self._pending[:0] = batch
                else:
                    self._failing_since = None  # give this batch up; ack_wait redelivers
                raise
            self._failing_since = None

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(ACK_FLUSH_EVERY)
            self._wake.clear()
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
                if time.monotonic() >= deadline or not self._pending:
                    return
                time.sleep(ACK_RETRY_PAUSE)


class Msg:
    """A delivered message. ``ack``/``nak``/``in_progress``/``term`` answer it once."""

    __slots__ = ("subject", "data", "reply", "_hdr", "_headers", "_raw", "_metadata", "_acks",
                 "_acked", "_ack_policy_none")

    def __init__(self, raw: dict[str, Any], acks: AckSender | None, ack_none: bool = False):
        self.subject: str = raw["subject"]
        self.data: bytes = raw["data"]
        self.reply: str = raw["reply"]
        self._hdr: bytes = raw["hdr"]
        self._headers: dict[str, str] | None = None
        self._raw = raw
        self._metadata: MsgMetadata | None = None
        self._acks = acks
        self._acked = False
        self._ack_policy_none = ack_none

    @property
    def metadata(self) -> MsgMetadata:
        # built on first use: many readers never look, and a datetime per message is dear
        if self._metadata is None:
            raw = self._raw
            self._metadata = MsgMetadata(
                SequencePair(raw["stream_seq"], raw["consumer_seq"]), raw["num_delivered"],
                raw["num_pending"], datetime.fromtimestamp(raw["timestamp"] / 1e9, tz=UTC),
                raw["stream"], raw["consumer"])
        return self._metadata

    @property
    def headers(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = H.decode_headers(self._hdr)
        return self._headers

    def __repr__(self) -> str:
        return (f"Msg(subject={self.subject!r}, seq={self.metadata.sequence.stream}, "
                f"data={self.data[:32]!r})")

    def _answer(self, kind: str, arg: Any = None, *, sync: bool = False) -> bool:
        if self._ack_policy_none or self._acks is None:
            raise BadRequestError("this consumer does not take acks (ack_policy none)")
        if self._acked:
            raise BadRequestError(f"message {self.metadata.sequence.stream} was already "
                                  "answered (ack, nak or term)")
        ok = self._acks.send(kind, self._raw["stream_seq"], arg, sync=sync)
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
