"""The gateway's copy of the stream catalogue, a mixin of
:class:`rayjet.gateway.jetstream.JetStreamBridge`: which stream captures a subject, each
stream's config, which streams answer direct gets and which republish. It follows the meta
leader by its changes (a long poll answered at each change), and a publish nothing captured
asks again at once (a stream made a moment ago by another client): publishes that come
meanwhile wait in line behind it, so a connection's messages are stored in the order sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rayjet.api import StreamConfig
from rayjet.api.headers import encode_headers
from rayjet.errors import APIError
from rayjet.subjects import matches_any

log = logging.getLogger(__name__)

CATALOGUE_RECHECK = 0.25  # s: a publish nothing captured rechecks a catalogue this old
CATALOGUE_EVERY = 1.0  # seconds between attempts to follow the catalogue without a leader
CATALOGUE_WATCH = 20.0  # seconds one long poll on the stream catalogue lasts at most


class StreamCatalogueCopy:
    """Needs the bridge's ``js``, ``gateway``, ``publisher``, ``links``, ``capture``,
    ``call`` and ``_spawn``."""

    def _init_catalogue(self) -> None:
        # name -> the subjects it captures; subject -> stream name or None
        self._streams: dict[str, tuple[str, ...]] = {}
        self._configs: dict[str, StreamConfig] = {}
        self._captures: dict[str, str | None] = {}
        self._direct: set[str] = set()  # streams that answer direct gets
        self._republishing: dict[str, tuple[Any, asyncio.Task]] = {}
        self._refreshed = 0.0  # when the catalogue was last asked for (monotonic)
        self._refreshing: asyncio.Future | None = None
        self._rechecks = 0  # publishes waiting in line for a catalogue refresh
        self._applied = -1  # the meta catalogue's applied index the stream catalogue is at

    def catalogue_stale(self) -> bool:
        """Is the stream catalogue old enough that a subject nothing captured may belong
        to a stream made since (by another client, or the Python API)? Also while a
        recheck's refresh runs: what misses meanwhile waits for it too."""
        return (time.monotonic() - self._refreshed > CATALOGUE_RECHECK
                or (self._refreshing is not None and not self._refreshing.done()))

    def recheck(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes,
                on_miss: Any) -> None:
        """Capture ``subject`` after a fresh look at the catalogue; ``on_miss()`` when no
        stream captures it even then (publishes keep their order: they wait in line)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshed = time.monotonic()
            # a task of the bridge's own: stopping the gateway cancels it with the others
            self._refreshing = self._spawn(self.refresh_catalogue())
        self._rechecks += 1
        self._spawn(self._recheck(self._refreshing, subject, reply, hdr, payload, on_miss))

    @property
    def rechecks_waiting(self) -> bool:
        """Publishes wait for a catalogue refresh: what follows them waits in line too,
        even where the catalogue already names its stream (a connection's messages are
        stored in the order sent)."""
        return self._rechecks > 0

    async def _recheck(self, refreshing: asyncio.Future, subject: str, reply: str | None,
                       hdr: bytes | None, payload: bytes, on_miss: Any) -> None:
        try:
            await asyncio.shield(refreshing)
            # the waiters resume in the order they came: each is queued in turn
            if not self.capture(subject, reply, hdr, payload):
                on_miss()
        finally:
            self._rechecks -= 1

    async def refresh_catalogue(self, linearizable: bool = True) -> None:
        """Take the stream catalogue again, confirmed by the meta group's quorum (for a
        publish nothing captured) unless ``linearizable=False``."""
        self._refreshed = time.monotonic()
        since = self._applied
        try:  # what changed since the catalogue's index, or every stream
            applied, configs, removed = await self.js.watch_stream_changes(
                since, 0.0, linearizable=linearizable)
        except APIError as exc:
            log.warning("stream catalogue not refreshed: %s", exc)
            return
        if configs is not None and since == self._applied:  # the watch took no change since
            await self._take_catalogue(applied, configs, removed)

    async def _take_catalogue(self, applied: int, configs: list[StreamConfig],
                              removed: list[str] | None = None) -> None:
        """Every stream's config (``removed`` None), or those made or changed since the
        catalogue's applied index and the names deleted since: a change costs what changed."""
        if removed is None:
            if applied != self._applied:  # a stream may have been re-created or moved
                self.publisher.forget_streams()
            gone = set(self._configs) - {c.name for c in configs}
            self._configs = {}
        else:
            gone = set(removed)
        self._applied = applied
        for name in gone:
            self._configs.pop(name, None)
            self.links.forget_stream(name)
        for config in configs:
            self._configs[config.name] = config
        self._changed({c.name for c in configs} | gone, whole=removed is None)
        await self._follow_republish({n for n, c in self._configs.items() if c.republish})

    def _changed(self, names: set[str], *, whole: bool = False) -> None:
        """The routing of streams ``names`` (``whole``: of every stream) from their configs."""
        self.publisher.batches.keep(self._configs)
        self.publisher.fast.keep(self._configs)
        if whole:
            streams = dict(_captured(c) for c in self._configs.values())
            self._direct = {n for n, c in self._configs.items()
                            if c.allow_direct or c.mirror_direct}
            if streams != self._streams:
                self._streams = streams
                self._captures.clear()
            return
        for name in names:
            self.publisher.forget_streams(name)
            config = self._configs.get(name)
            captured = None if config is None else _captured(config)[1]
            if self._streams.get(name) != captured:
                self._captures.clear()
            if captured is None:
                self._streams.pop(name, None)
            else:
                self._streams[name] = captured
            if config is not None and (config.allow_direct or config.mirror_direct):
                self._direct.add(name)
            else:
                self._direct.discard(name)

    async def _changed_stream(self, name: str, config: StreamConfig | None) -> None:
        """One stream made, changed (``config``) or deleted (None) through this gateway: its
        entry of the catalogue, without listing every stream again (a client making
        hundreds of streams would pay for all of them each time)."""
        if config is None:
            self._configs.pop(name, None)
        else:
            self._configs[name] = config
        self._changed({name})
        await self._follow_republish({n for n, c in self._configs.items() if c.republish})

    async def _follow_republish(self, names: set[str]) -> None:
        """What streams republish goes to core subscribers, as nats-server republishes."""
        for name in [n for n in self._republishing if n not in names]:
            sub, task = self._republishing.pop(name)
            task.cancel()
            sub.unsubscribe()
        for name in names - set(self._republishing):
            try:
                sub = await self.call(self.js.subscribe_republished, ">", [name])
            except APIError as exc:
                log.warning("republished messages of %s not followed: %s", name, exc)
                continue
            self._republishing[name] = (sub, self._spawn(self._republished(sub)))

    async def _republished(self, sub: Any) -> None:
        while True:
            try:
                msg = await self.call(sub.next_msg, 1.0)
            except TimeoutError:
                continue
            except APIError:
                await asyncio.sleep(0.2)
                continue
            if msg is None:
                return
            self.gateway.route(msg.subject, None, encode_headers(msg.headers) or None,
                               msg.data)

    async def _catalogue_loop(self) -> None:
        """Follow the meta leader's catalogue: a long poll answered at each change, so the
        gateway learns of streams made elsewhere within a round trip, polls nothing, and
        leaves an idle meta group quiet."""
        while True:
            try:
                applied, configs, removed = await self.js.watch_stream_changes(
                    self._applied, CATALOGUE_WATCH)
            except APIError as exc:  # no meta leader for now: try again shortly
                log.info("stream catalogue not followed: %s", exc)
                await asyncio.sleep(CATALOGUE_EVERY)
                continue
            except Exception:  # noqa: BLE001 - whatever it was, keep following
                log.exception("following the stream catalogue failed; trying again")
                await asyncio.sleep(CATALOGUE_EVERY)
                continue
            if configs is not None:
                self._refreshed = time.monotonic()
                await self._take_catalogue(applied, configs, removed)

    def config_of(self, stream: str) -> StreamConfig | None:
        return self._configs.get(stream)

    def stream_for(self, subject: str) -> str | None:
        if subject in self._captures:
            return self._captures[subject]
        found = None
        for name, filters in self._streams.items():
            if filters and matches_any(subject, filters):
                found = name
                break
        if len(self._captures) > 100_000:
            self._captures.clear()
        self._captures[subject] = found
        return found


def _captured(config: StreamConfig) -> tuple[str, tuple[str, ...]]:
    """A stream's name and the subjects it captures (its name when it lists none and is
    neither a mirror nor sourced)."""
    return config.name, tuple(config.subjects) or (
        (config.name,) if not (config.mirror or config.sources) else ())
