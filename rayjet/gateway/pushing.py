"""Push consumers over the protocol: a pump per consumer with a deliver subject.

While somebody subscribes to the deliver subject, the pump long-polls the consumer and
writes what it hands out there (one write per poll and subscriber); when nothing came for
the consumer's ``idle_heartbeat`` it sends the ``100 Idle Heartbeat`` status with the last
consumer and stream sequences, which ordered consumers use to find gaps. A subscriber that
falls behind holds the pump back instead of growing the gateway's buffers.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rayjet.errors import APIError, ConsumerNotFoundError, StreamNotFoundError
from rayjet.gateway import protocol as P

PUSH_BATCH = 256  # messages a poll asks for at first
PUSH_MAX_BATCH = 4096  # ... and at most, while full polls come back
POLL = 0.5  # seconds a poll waits for messages
NO_INTEREST_CHECK = 2.0  # seconds between checks that an unwatched consumer still exists
BACKLOG_LIMIT = 8 * 1024 * 1024  # bytes a subscriber may have unread before the pump waits


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

    def stop(self) -> None:
        self._stopped = True

    @property
    def heartbeat(self) -> float:
        return (self.config.get("idle_heartbeat") or 0) / 1e9

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.done = True
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
                await asyncio.sleep(0.05)
                continue
            if max(getattr(r.owner, "backlog", lambda: 0)() for r in receivers) > BACKLOG_LIMIT:
                await asyncio.sleep(0.01)
                continue
            hb = self.heartbeat
            wait = min(POLL, hb) if hb else POLL
            try:
                link = await self.bridge.link_for(self.stream, self.consumer)
                got, status = await self.bridge.call(link.pull, self.batch, wait, 0, False, 0.0)
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
                last_activity = time.monotonic()
            elif status is not None and status.code == 409 and "Deleted" in status.description:
                return
            if hb and time.monotonic() - last_activity >= hb:
                last_activity = time.monotonic()
                gateway.route(deliver, None, P.status_header(100, "Idle Heartbeat", [
                    ("Nats-Last-Consumer", str(self.last_cseq)),
                    ("Nats-Last-Stream", str(self.last_sseq))]), b"")

    async def _exists(self) -> bool:
        try:
            await self.bridge.call(self.bridge.js.consumer_info, self.stream, self.consumer)
            return True
        except (ConsumerNotFoundError, StreamNotFoundError):
            return False
        except APIError:
            return True
