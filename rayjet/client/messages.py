"""Messages delivered by consumers, with the ack methods of nats-py's ``Msg``."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rayjet.actors.router import GroupRouter
from rayjet.api import headers as H
from rayjet.errors import BadRequestError

ACK_FLUSH_EVERY = 0.01  # seconds a plain ack may wait to travel with others


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
    """Sends a subscription's acks to its consumer's leader, batching plain acks."""

    def __init__(self, router: GroupRouter, timeout: float) -> None:
        self.router = router
        self.timeout = timeout
        self._pending: list[tuple[str, int, Any]] = []
        self._lock = threading.Lock()
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
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            self.router.call("ack", batch, False, timeout=self.timeout)

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(ACK_FLUSH_EVERY)
            self._wake.clear()
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - unacked messages are redelivered after ack_wait
                time.sleep(ACK_FLUSH_EVERY)

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=10)
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - best effort on close
            pass


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
