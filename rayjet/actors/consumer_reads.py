"""How a consumer replica reads its stream: from the stream's leader, ahead of its decisions.

The consumer engine reads messages through a :class:`~rayjet.engine.consumer.reader.ReadAhead`.
Before each delivery decision the replica awaits what the decision reads (one call to the
stream's leader, or none when that leader runs in this process), so the decision itself does
not block the event loop. What was not fetched ahead goes through
:class:`RemoteStreamReader`, a blocking call. While pull requests wait, one call stays open at
the stream's leader to learn when new messages are stored, instead of polling it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rayjet.actors import in_process
from rayjet.actors.router import GroupRouter
from rayjet.engine.consumer.reader import Window
from rayjet.errors import ServiceUnavailableError

log = logging.getLogger(__name__)

TIMER_EVERY = 0.05  # redeliveries, request expiry, waiting requests
WATCH_WAIT = 1.0  # seconds one wait for new messages stays open at the stream's leader
READ_AHEAD_MAX = 4096  # messages read ahead for one delivery decision (a full push poll)
READ_AHEAD_SPARE = 64  # messages read past what a decision wants
READ_AHEAD_TRIES = 5  # reads of the window while other decisions keep moving past it
STREAM_CALL_TIMEOUT = 5.0
MISS_TIMEOUT = 1.0  # a read not fetched ahead (blocks): short


class RemoteStreamReader:
    """The engine's StreamReader over calls to the stream's leader, for the reads the
    actor did not fetch ahead (rare: the actor awaits what a decision needs first). While
    the stream is known to be unreachable it fails at once instead of blocking."""

    def __init__(self, router: GroupRouter) -> None:
        self.router = router
        self.unreachable = False
        self.blocking_reads = 0  # calls made on the event loop (status() reports them)

    def _call(self, method: str, *args: Any) -> Any:
        if self.unreachable:
            raise ServiceUnavailableError("the stream's leader is not reachable; retry")
        here = in_process.stream_leader_here(getattr(self.router, "names", {}).values())
        if here is not None:  # a blocking call to our own process would wait on itself
            return here.read_local(method, *args)
        self.blocking_reads += 1
        return self.router.call("reader_call", method, *args, timeout=MISS_TIMEOUT)

    def bounds(self):
        return self._call("bounds")

    def load_msg(self, seq):
        return self._call("load_msg", seq)

    def load_next_batch(self, filters, start_seq, limit):
        return self._call("load_next_batch", tuple(filters), start_seq, limit)

    def num_pending(self, filters, start_seq, last_per_subject=False):
        return self._call("num_pending", tuple(filters), start_seq, last_per_subject)

    def last_seq_for(self, filters):
        return self._call("last_seq_for", tuple(filters))

    def last_per_subject(self, filters, max_seq):
        return self._call("last_per_subject", tuple(filters), max_seq)

    def seq_for_time(self, ts_ns):
        return self._call("seq_for_time", ts_ns)


class StreamReads:
    """Mixed into :class:`~rayjet.actors.consumer.ConsumerReplica` (kept apart: the replica
    class is large enough), which has ``engine``, ``reader`` (the engine's ReadAhead),
    ``remote`` (its RemoteStreamReader), ``stream`` (calls to the stream's leader),
    ``host``, ``_known_last`` and ``_watch``."""

    async def _prefetch(self, reads: list, timeout: float = STREAM_CALL_TIMEOUT) -> bool:
        """Fetch ``reads`` ((method, *args)) from the stream leader into the read-ahead
        memo, awaiting the answer; False (and the reader fails fast) when it is away."""
        if not reads:
            return True
        here = in_process.stream_leader_here(getattr(self.stream, "names", {}).values())
        try:
            if here is not None:  # the stream's leader runs beside us: no actor call
                results = here.read_local("read_many", reads)
            else:
                results = await self.stream.acall("reader_call", "read_many", reads,
                                                  timeout=timeout, attempt_timeout=timeout)
        except Exception as err:  # noqa: BLE001 - unreachable, electing, or gone
            log.debug("stream reads for %s failed: %s", self.host.name, err)
            self.reader.drop()
            self.remote.unreachable = True
            return False
        self.remote.unreachable = False
        self.reader.offer_reads(reads, results)
        return True

    async def _read_ahead(self, want: int, *, watched: bool = False) -> bool:
        """Fetch what the next delivery decision reads (the next messages, queued
        redeliveries, a last-per-subject catch-up) from the stream leader without blocking
        the event loop; the engine takes them from the read-ahead. False: the stream did
        not answer (the engine's own reads then fail at once instead of blocking).
        ``watched`` (the timer's rounds for waiting pulls): when a wait at the stream's
        leader says nothing was stored past what this consumer looked at, the new-message
        window is known to be empty and the stream is not asked."""
        for _ in range(READ_AHEAD_TRIES):
            if not self.engine.is_leader:
                return False
            start = self.engine.read_position()
            # a little more than wanted: room for another decision that moves the position
            # meanwhile (see below; the store checks every record it reads, so what the
            # decision does not take is work thrown away)
            want = int(want)
            limit = max(1, min(want + min(want, READ_AHEAD_SPARE), READ_AHEAD_MAX))
            reads = self.engine.decision_reads(limit)
            filters = tuple(self.engine.filters)
            if watched:
                self._ensure_watch()
                known = self._known_last
                if not reads and start and known is not None and known < start:
                    self.reader.offer(Window(filters, start, limit, [], known, 0))
                    return True
            if start:
                reads.append(("read_window", filters, start, limit))
            if not await self._prefetch(reads):
                return False
            # another request's decision may have moved the read position while this read
            # was out (pulls that arrive together): the window still serves this decision
            # when it holds what is wanted from the new position (the read past the wanted
            # leaves room for that); otherwise the decision's reads past it would each
            # block the event loop on a call: read again
            now = self.engine.read_position()
            if now == start or (now > start and self.reader.window_serves(
                    filters, now, max(1, want))):
                return True
        return True

    def _ensure_watch(self) -> None:
        if self._watch is None or self._watch.done():
            self._watch = asyncio.get_running_loop().create_task(self._watch_stream())

    async def _watch_stream(self) -> None:
        """While pull requests wait: keep a wait open at the stream's leader and note the
        last seq it answers with (:meth:`_read_ahead` ``watched``). Ends when nothing
        waits, leadership moves, or the stream cannot be asked (the timer then reads)."""
        try:
            while self.engine.is_leader and self.engine.num_waiting:
                start = self.engine.read_position()
                if not start:
                    return
                # the first answer at once (what is there now), then waits for more
                wait = 0.0 if self._known_last is None else WATCH_WAIT
                try:
                    last = await self._stream_waits(start - 1, wait)
                except Exception as err:  # noqa: BLE001 - away or moving: the timer reads
                    log.debug("stream watch of %s ended: %s", self.host.name, err)
                    return
                self._known_last = last
                if last >= start:
                    # new messages: the timer's next round reads them; watch again after it
                    await asyncio.sleep(TIMER_EVERY)
        finally:
            self._known_last = None

    async def _until_new_messages(self, answered: asyncio.Future, deadline: float) -> None:
        """Wait (until ``deadline``) for the stream to store past what this consumer looked
        at, or for ``answered`` (a fetch's future: a redelivery reached it): the stream's
        leader answers when a message arrives, instead of being polled. Polls when it
        cannot wait there."""
        loop = asyncio.get_running_loop()
        left = deadline - loop.time()
        after = self.engine.read_position() - 1 if self.engine.is_leader else -1
        if after < 0:  # a last-per-subject catch-up, or not leading
            await asyncio.sleep(max(0.0, min(TIMER_EVERY, left)))
            return
        waiter = asyncio.ensure_future(self._stream_waits(after, left))
        delivered = asyncio.ensure_future(asyncio.shield(answered))
        try:
            done, _ = await asyncio.wait({waiter, delivered}, timeout=max(left, 0.0),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            delivered.cancel()
            waiter.cancel()
        if waiter in done and waiter.exception() is not None:
            # the stream's leader is away or moving: poll as before meanwhile
            await asyncio.sleep(max(0.0, min(TIMER_EVERY, deadline - loop.time())))

    async def _stream_waits(self, after: int, timeout: float) -> int:
        here = in_process.stream_leader_here(getattr(self.stream, "names", {}).values())
        if here is not None:  # the stream's leader runs beside us: no actor call
            return await here.wait_for_messages(after, timeout)
        return await self.stream.acall("wait_for_messages", after, timeout,
                                       timeout=timeout + STREAM_CALL_TIMEOUT,
                                       attempt_timeout=timeout + STREAM_CALL_TIMEOUT)
