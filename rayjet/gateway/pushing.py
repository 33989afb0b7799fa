"""Push consumers over the protocol: a pump per consumer with a deliver subject.

While somebody subscribes to the deliver subject, the pump long-polls the consumer and
writes what it hands out there (one write per poll and subscriber); when nothing came for
the consumer's ``idle_heartbeat`` it sends the ``100 Idle Heartbeat`` status with the last
consumer and stream sequences, which ordered consumers use to find gaps. A subscriber that
falls behind holds the pump back instead of growing the gateway's buffers.

A consumer with ``flow_control`` gets nats-server's flow control: once half a window of
bytes has gone out since the subscriber last confirmed, a ``100 FlowControl Request`` with a
``$JS.FC.<stream>.<consumer>.<n>`` reply follows the messages; the client publishes to it
when it has processed what came before. With a whole window unconfirmed the pump stalls, and
its heartbeats carry ``Nats-Consumer-Stalled`` (the request's subject) so the client
answers even if the request was lost. The window starts at 2 MB and doubles with each answer
up to 32 MB, as nats-server's slow start does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Any

from rayjet.errors import APIError, ConsumerNotFoundError, StreamNotFoundError
from rayjet.gateway import protocol as P
from rayjet.subjects import matches_any

PUSH_BATCH = 256  # messages a poll asks for at first
PUSH_MAX_BATCH = 4096  # ... and at most, while full polls come back
POLL = 0.5  # seconds a poll waits for messages
NO_INTEREST_CHECK = 2.0  # seconds between checks that an unwatched consumer still exists
NO_INTEREST_WAIT = 0.5  # seconds an unwatched pump sleeps unless a subscription wakes it
BACKLOG_LIMIT = 8 * 1024 * 1024  # bytes a subscriber may have unread before the pump waits
FC_WINDOW = 32 * 1024 * 1024  # flow control: bytes out unconfirmed before a stall (nats-server's)
FC_PREFIX = "$JS.FC."
ROOM_CHECK_FROM = 4 * 1024 * 1024  # window room below which polls carry a byte limit
PUSH_HOLD = 0.1  # s a PubAck waits at most for the push deliveries of its message


class PushPump:
    def __init__(self, bridge: Any, stream: str, consumer: str, config: dict[str, Any]) -> None:
        self.bridge = bridge
        self.stream = stream
        self.consumer = consumer
        self.config = config
        self.task: asyncio.Task | None = None
        self.done = False
        self._stopped = False
        self.last_cseq = 0
        self.last_sseq = 0
        self.batch = PUSH_BATCH
        # flow control: the outstanding request's subject, the bytes it covers, the bytes
        # delivered since the last confirmed request
        self.fc_subject: str | None = None
        self.fc_covers = 0
        self.unconfirmed = 0
        self.window_full = False  # the next message does not fit the window's room
        # bytes that may be out unconfirmed now: a slow start, as nats-server's (a 16th of
        # the window, doubled by each answer)
        self.window = max(FC_WINDOW // 16, 1)
        self._fc_answered = asyncio.Event()
        self._fc_ids = itertools.count(1)
        self._interest = asyncio.Event()  # set when a client subscribes to the deliver subject
        self._written: list[tuple[int, asyncio.Future]] = []  # (consumer seq, its waiter)
        self._through: list[tuple[int, asyncio.Future]] = []  # (stream seq, its waiter)
        self.lag_until = 0  # a hold timed out: no holds until delivered past this seq

    def stop(self) -> None:
        self._stopped = True
        self._interest.set()

    def interest_arrived(self) -> None:
        self._interest.set()

    async def written(self, cseq: int, timeout: float) -> None:
        """Wait (``timeout`` at most) until the delivery with consumer sequence ``cseq`` is
        written out: a consumer info that counts it must not overtake it (nats.py's KV watch
        takes "nothing pending, nothing received" for an empty bucket)."""
        if self.last_cseq >= cseq or self.done:
            return
        fut = asyncio.get_running_loop().create_future()
        self._written.append((cseq, fut))
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:  # (a slow subscriber): answer anyway, and forget the waiter
            self._written = [(c, f) for c, f in self._written if f is not fut]

    def holds_for(self, subject: str) -> bool:
        """Does a PubAck for a message on ``subject`` wait for this pump's delivery of it?
        As with nats-server, where a push consumer's delivery leaves before the PubAck of
        the message: only while a subscriber keeps up (not stalled, not lagging)."""
        if self.done or self._stopped or self.stalled or self.last_sseq < self.lag_until:
            return False
        cfg = self.config
        filters = cfg.get("filter_subjects") or (
            [cfg["filter_subject"]] if cfg.get("filter_subject") else [])
        if filters and not matches_any(subject, filters):
            return False
        return self.bridge.gateway.interest.has_interest(cfg.get("deliver_subject") or "")

    def delivered_through(self, sseq: int) -> asyncio.Future:
        """A future done once deliveries reached stream seq ``sseq`` (or the consumer had
        nothing more to give)."""
        fut = asyncio.get_running_loop().create_future()
        if self.last_sseq >= sseq or self.done:
            fut.set_result(None)
        else:
            self._through.append((sseq, fut))
        return fut

    def hold_timed_out(self, sseq: int) -> None:
        self.lag_until = max(self.lag_until, sseq)

    def _release_through(self, everything: bool = False) -> None:
        keep = []
        for sseq, fut in self._through:
            if everything or sseq <= self.last_sseq:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                keep.append((sseq, fut))
        self._through = keep

    def _release_written(self, everything: bool = False) -> None:
        keep = []
        for cseq, fut in self._written:
            if everything or cseq <= self.last_cseq:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((cseq, fut))
        self._written = keep

    @property
    def heartbeat(self) -> float:
        return (self.config.get("idle_heartbeat") or 0) / 1e9

    @property
    def flow_control(self) -> bool:
        return bool(self.config.get("flow_control"))

    def flow_answered(self, subject: str) -> None:
        """The subscriber answered a flow control request."""
        if subject == self.fc_subject:
            self.unconfirmed = max(0, self.unconfirmed - self.fc_covers)
            self.fc_subject, self.fc_covers = None, 0
            self.window_full = False
            self.window = min(self.window * 2, FC_WINDOW)  # the subscriber keeps up
            self._fc_answered.set()

    def _ask_flow_control(self, deliver: str) -> None:
        self.fc_subject = f"{FC_PREFIX}{self.stream}.{self.consumer}.{next(self._fc_ids)}"
        self.fc_covers = self.unconfirmed
        self.bridge.expect_flow_answer(self.fc_subject, self)
        self.bridge.gateway.route(deliver, self.fc_subject,
                                  P.status_header(100, "FlowControl Request"), b"")

    @property
    def stalled(self) -> bool:
        return self.flow_control and (self.window_full or self.unconfirmed >= self.window)

    def _idle_heartbeat(self, deliver: str) -> None:
        extra = [("Nats-Last-Consumer", str(self.last_cseq)),
                 ("Nats-Last-Stream", str(self.last_sseq))]
        if self.fc_subject is not None and self.stalled:
            extra.append(("Nats-Consumer-Stalled", self.fc_subject))
        self.bridge.gateway.route(deliver, None,
                                  P.status_header(100, "Idle Heartbeat", extra), b"")

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.done = True
            self._release_written(everything=True)
            self._release_through(everything=True)
            self.bridge.pump_ended(self)

    async def _run(self) -> None:
        gateway = self.bridge.gateway
        last_activity = time.monotonic()
        last_check = time.monotonic()
        while not self._stopped:
            deliver = self.config["deliver_subject"]
            receivers = gateway.interest.receivers(deliver)
            now = time.monotonic()
            if not receivers:
                if now - last_check >= NO_INTEREST_CHECK:
                    last_check = now
                    if not await self._exists():
                        return
                self._interest.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._interest.wait(), NO_INTEREST_WAIT)
                continue
            if max(getattr(r.owner, "backlog", lambda: 0)() for r in receivers) > BACKLOG_LIMIT:
                await asyncio.sleep(0.01)
                continue
            hb = self.heartbeat
            if self.stalled:
                # stalled until the subscriber confirms what it has
                if self.fc_subject is None:
                    self._ask_flow_control(deliver)
                self._fc_answered.clear()
                try:
                    await asyncio.wait_for(self._fc_answered.wait(), min(hb or POLL, POLL))
                except TimeoutError:
                    if hb and time.monotonic() - last_activity >= hb:
                        last_activity = time.monotonic()
                        self._idle_heartbeat(deliver)
                continue
            wait = min(POLL, hb) if hb else POLL
            try:
                link = await self.bridge.link_for(self.stream, self.consumer)
                # flow control: near the window's end, no more in a poll than it has room
                # for (a byte limit costs the consumer per message: only where it matters)
                room = 0  # no byte limit
                if self.flow_control and self.window - self.unconfirmed < ROOM_CHECK_FROM:
                    room = max(self.window - self.unconfirmed, 1)
                got, status = await self.bridge.call(link.pull, self.batch, wait, room, False,
                                                     0.0)
            except (ConsumerNotFoundError, StreamNotFoundError):
                return
            except APIError:
                self.bridge.forget_link(self.stream, self.consumer)
                await asyncio.sleep(0.2)
                continue
            # a subscriber that keeps up gets bigger polls (fewer calls per message)
            if len(got) >= self.batch:
                self.batch = min(self.batch * 2, PUSH_MAX_BATCH)
            elif len(got) < self.batch // 4:
                self.batch = max(self.batch // 2, PUSH_BATCH)
            if len(got):
                self.bridge.deliver(deliver, got)
                self.last_cseq = int(got.consumer_seq[-1])
                self.last_sseq = int(got.stream_seq[-1])
                if self._written:
                    self._release_written()
                if self._through:
                    self._release_through()
                last_activity = time.monotonic()
                if self.flow_control:
                    self.unconfirmed += len(got.hdrs) + len(got.data)
                    if self.fc_subject is None and self.unconfirmed >= self.window // 2:
                        self._ask_flow_control(deliver)
            else:
                if self._through:
                    # it had nothing more to give (filtered, or max_ack_pending reached):
                    # hold no more PubAcks for it until it delivers past them
                    self.lag_until = max(self.lag_until, max(s for s, _ in self._through))
                    self._release_through(everything=True)
                if status is not None and status[0] == 409 and "Deleted" in status[1]:
                    return
                if status is not None and status[0] == 409 and room:
                    self.window_full = True  # the next message is bigger than the room left
            if hb and time.monotonic() - last_activity >= hb:
                last_activity = time.monotonic()
                self._idle_heartbeat(deliver)

    async def _exists(self) -> bool:
        try:
            await self.bridge.call(self.bridge.js.consumer_info, self.stream, self.consumer)
            return True
        except (ConsumerNotFoundError, StreamNotFoundError):
            return False
        except APIError:
            return True


def push_holds(pumps: list[PushPump], subject_seqs: list[tuple[str, int]]
               ) -> list[tuple[PushPump, int, asyncio.Future]]:
    """For stored messages ``(subject, seq)`` of one stream: what their PubAcks wait for,
    per pump feeding a push consumer of the stream (its delivery of the last of them)."""
    out = []
    for pump in pumps:
        last = max((seq for subject, seq in subject_seqs if pump.holds_for(subject)), default=0)
        if last:
            out.append((pump, last, pump.delivered_through(last)))
    return out
