"""The cluster's event hub: one detached actor that takes the advisories and metrics every
replica posts (:mod:`rayjet.actors.events`), keeps the recent ones numbered for the
gateways that follow them (:meth:`EventHub.since`, a long poll), and stores each in the
stream whose subjects capture it (a stream on ``$JS.EVENT.ADVISORY.>`` keeps them, as
on nats-server; dead-letter handling reads MAX_DELIVERIES and MSG_TERMINATED there).

Stored events carry their advisory id as ``Nats-Msg-Id``, so an event stored again after
a hub restart is a duplicate, not a second copy."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

import ray

from rayjet.actors.names import NAMESPACE, event_hub_name
from rayjet.engine.event_ring import EventRing
from rayjet.subjects import matches_any, subjects_collide

log = logging.getLogger(__name__)

CAPTURES_EVERY = 2.0  # s the captures are trusted without asking for catalogue changes
POLL_LONGEST = 30.0  # s a reader's poll waits at most
STREAM_ACTIONS = "$JS.EVENT.ADVISORY.STREAM."  # created, updated, deleted


class EventHub:
    """Plain class; :func:`ensure_event_hub` makes it a detached Ray actor."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.ring = EventRing(capacity)
        self.epoch = uuid.uuid4().hex  # a restarted hub numbers from 1 again
        self._changed = asyncio.Event()
        self._to_store: list[tuple[str, bytes]] = []
        self._storing: asyncio.Task | None = None
        self._js: Any = None
        self._captures: dict[str, tuple[str, ...]] = {}  # stream -> its event subjects
        self._captures_applied = -1  # the catalogue's applied index they follow
        self._captures_at = 0.0
        self.stats = {"events": 0, "stored": 0, "store_failed": 0}

    async def ping(self) -> str:
        return "ok"

    async def post(self, events: list[tuple[str, bytes]]) -> None:
        for subject, payload in events:
            self.ring.append(str(subject), bytes(payload))
        self.stats["events"] += len(events)
        self._changed.set()
        self._changed = asyncio.Event()
        self._to_store.extend(events)
        if self._storing is None or self._storing.done():
            self._storing = asyncio.get_running_loop().create_task(self._store())

    async def since(self, after: int, timeout: float = POLL_LONGEST, limit: int = 1000
                    ) -> dict[str, Any]:
        """Events after seq ``after`` (waiting up to ``timeout`` for one): ``events`` as
        (seq, subject, payload), ``last`` the newest seq, ``missed`` how many after ``after``
        the hub no longer keeps, ``epoch`` this hub's life (another: start from 0). ``after``
        -1: none, only the newest seq (a reader starts from now, as a new subscriber
        does)."""
        if after < 0:
            return {"events": [], "last": self.ring.last_seq, "missed": 0, "epoch": self.epoch}
        deadline = time.monotonic() + min(max(timeout, 0.0), POLL_LONGEST)
        while True:
            events, missed = self.ring.since(after, limit)
            left = deadline - time.monotonic()
            if events or missed or left <= 0:
                return {"events": [(e.seq, e.subject, e.payload) for e in events],
                        "last": self.ring.last_seq, "missed": missed, "epoch": self.epoch}
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    async def status(self) -> dict[str, Any]:
        return {**self.stats, "last": self.ring.last_seq}

    # -- storing in the streams that capture events --------------------------------------
    async def _store(self) -> None:
        while self._to_store:
            batch, self._to_store = self._to_store, []
            try:
                captures = await self._capture_list(batch)
                if captures:
                    await asyncio.to_thread(self._store_batch, batch, captures)
            except Exception:  # noqa: BLE001 - the cluster is busy: these events are lost
                self.stats["store_failed"] += len(batch)
                log.warning("events could not be stored", exc_info=True)

    def _store_batch(self, batch: list[tuple[str, bytes]],
                     captures: list[tuple[str, ...]]) -> None:
        import json

        items = []
        for subject, payload in batch:
            if any(matches_any(subject, subjects) for subjects in captures):
                try:
                    msg_id = json.loads(payload).get("id")
                except ValueError:
                    msg_id = None
                headers = {"Nats-Msg-Id": msg_id} if msg_id else None
                items.append((subject, payload, headers))
        if not items:
            return
        answers = self._client().publish_batch(items)
        failed = sum(isinstance(a, BaseException) for a in answers)
        self.stats["stored"] += len(items) - failed
        self.stats["store_failed"] += failed

    async def _capture_list(self, batch: list[tuple[str, bytes]]) -> list[tuple[str, ...]]:
        """The subjects of the streams that capture events, brought up to date by the
        catalogue's changes (one stream per change, not the whole catalogue: a hub reading
        every stream at each creation cost O(streams) per stream made). A batch naming a
        stream action asks at once: the meta leader posts it after the change is applied."""
        acted = any(subject.startswith(STREAM_ACTIONS) for subject, _ in batch)
        if acted or time.monotonic() - self._captures_at > CAPTURES_EVERY:
            js = await asyncio.to_thread(self._client)
            applied, configs, removed = await js.watch_stream_changes(
                self._captures_applied, 0)
            if configs is not None:
                if removed is None:  # the whole catalogue
                    self._captures = {}
                for name in removed or ():
                    self._captures.pop(name, None)
                for cfg in configs:
                    self._captures.pop(cfg.name, None)
                    if any(subjects_collide(s, "$JS.EVENT.>") for s in cfg.subjects or ()):
                        self._captures[cfg.name] = tuple(cfg.subjects)
                self._captures_applied = applied
            self._captures_at = time.monotonic()
        return list(self._captures.values())

    def _client(self) -> Any:
        if self._js is None:
            import rayjet

            self._js = rayjet.connect()
        return self._js


def poll(hub: Any, after: int, timeout: float) -> dict[str, Any]:
    """One long poll of the hub (blocking): see :meth:`EventHub.since`."""
    return ray.get(hub.since.remote(after, timeout), timeout=timeout + 30)


def ensure_event_hub() -> Any:
    """The event hub's handle, started when missing (a process of its own, no CPU)."""
    name = event_hub_name()
    with contextlib.suppress(ValueError):
        return ray.get_actor(name, namespace=NAMESPACE)
    cls = ray.remote(EventHub)
    return cls.options(name=name, namespace=NAMESPACE, lifetime="detached",
                       get_if_exists=True, num_cpus=0, max_restarts=-1,
                       max_task_retries=0, max_concurrency=1000).remote()
