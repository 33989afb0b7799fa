"""JetStream behind the gateway: stream capture, the ``$JS.API`` subjects, pull requests,
push deliveries and ``$JS.ACK`` answers, all over one :class:`rayjet.client.JetStream`.

Client calls block on Ray, so they run in a thread pool; the event loop only queues and
writes. Publishes that arrive together leave as one ``publish_batch`` (one in flight at a
time, so a client's messages keep their order); acks to one consumer that arrive together
leave as one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from rayjet.actors import direct
from rayjet.actors.cancelling import cancel_and_wait
from rayjet.api import StreamConfig
from rayjet.engine.consumer.delivery_batch import seq_ranges
from rayjet.errors import (
    APIError,
    ConsumerNotFoundError,
    StreamNotFoundError,
)
from rayjet.gateway import audit, directget, jsapi
from rayjet.gateway import protocol as P
from rayjet.gateway.backups import Backups
from rayjet.gateway.catalogue_copy import StreamCatalogueCopy
from rayjet.gateway.events import follow_events
from rayjet.gateway.links import ConsumerLinks
from rayjet.gateway.protocol import no_responders_header
from rayjet.gateway.publishing import Publisher
from rayjet.gateway.pull_request import pin_of, pull_request
from rayjet.gateway.pushing import FC_PREFIX, PushPump
from rayjet.subjects import subject_matches

log = logging.getLogger(__name__)

INFO_AFTER_PUSH_WAIT = 1.0  # s a push consumer's info waits at most for its deliveries
NO_EXPIRY_PULL = 30.0  # a pull without expiry is re-issued in steps this long
UNCONFIRMED_WAIT = 5.0  # s a pull waits past its expiry to learn that its consumer exists
EVENTS_START = 5.0  # s a starting gateway waits to know where the hub's events stand


# a pull or direct get that needs a newer JetStream API than the gateway's
_TOO_NEW = P.status_header(412, "Required Api Level")


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _status(status: tuple) -> tuple[int, str, int, int]:
    """A pull's ending status from the consumer: (code, description[, pending messages,
    pending bytes])."""
    code, description, *pending = status
    msgs, nbytes = (pending + [0, 0])[:2]
    return int(code), str(description), int(msgs), int(nbytes)


class _Internal:
    """An internal subscription's owner: calls ``fn(subject, reply, hdr, payload)``."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def deliver(self, sub: Any, subject: str, reply: str | None, hdr: bytes | None,
                payload: bytes) -> None:
        self.fn(subject, reply, hdr, payload)


class JetStreamBridge(StreamCatalogueCopy):
    def __init__(self, js: Any, *, threads: int = 64) -> None:
        self.js = js
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="rayjet-gateway")
        self.gateway: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._init_catalogue()
        self.publisher = Publisher(self)
        self._acks: dict[tuple[str, str], list] = defaultdict(list)
        self.domain: str | None = None
        self.api_total = self.api_errors = 0  # $JS.API requests answered (account info)
        self.links = ConsumerLinks(js)
        self.audit = audit.ApiAudit(self)  # $JS.EVENT.ADVISORY.API
        self.backups = Backups(self)
        self._pumps: dict[tuple[str, str], PushPump] = {}
        self._flow_waits: dict[str, PushPump] = {}  # flow control request subject -> pump
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False

    @property
    def cluster_js(self) -> Any:
        """The whole cluster's connection (monitoring reports on every account's streams),
        where ``js`` may be one account's view."""
        return getattr(self.js, "cluster", self.js)

    # -- life ----------------------------------------------------------------------------
    async def start(self, gateway: Any) -> None:
        self.gateway = gateway
        self.loop = asyncio.get_running_loop()
        self.publisher.start()
        self._stopping = False
        gateway.subscribe_internal(jsapi.API_PREFIX + ">", _Internal(self._on_api))
        self.domain = gateway.options.domain
        if self.domain:
            prefix = f"$JS.{self.domain}.API."
            gateway.subscribe_internal(prefix + ">", _Internal(
                lambda subject, *rest: self._on_api(jsapi.API_PREFIX + subject[len(prefix):],
                                                    *rest)))
        gateway.subscribe_internal("$JS.ACK.>", _Internal(self._on_ack))
        gateway.subscribe_internal(FC_PREFIX + ">", _Internal(self._on_flow_answer))
        await self.refresh_catalogue()
        self._spawn(self.publisher.run())
        self._spawn(self._catalogue_loop())
        following = asyncio.Event()
        self._spawn(follow_events(self, following))
        with contextlib.suppress(asyncio.TimeoutError):  # events from the gateway's start on
            await asyncio.wait_for(following.wait(), EVENTS_START)
        await self._resume_pumps()

    async def stop(self) -> None:
        self._stopping = True
        for sub, _ in self._republishing.values():
            sub.unsubscribe()
        self._republishing.clear()
        for pump in list(self._pumps.values()):
            pump.stop()
        # a push pump waits on its events through wait_for, which can swallow one cancel
        await asyncio.gather(*(cancel_and_wait(t) for t in list(self._tasks)))
        self._pumps.clear()
        self.publisher.forget_streams()
        await direct.close_loop_requests()  # this loop's connections to the leaders

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and not self._stopping:
            log.error("gateway task failed", exc_info=task.exception())

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a blocking client call in the pool."""
        return await asyncio.get_running_loop().run_in_executor(
            self.pool, partial(fn, *args, **kwargs))

    # -- publishing ----------------------------------------------------------------------
    def capture(self, subject: str, reply: str | None, hdr: bytes | None,
                payload: bytes) -> bool:
        """Queue a message for the stream that captures ``subject``; False when none does."""
        return self.publisher.capture(subject, reply, hdr, payload)

    async def stored_so_far(self) -> None:
        """Wait until every publish queued before now has its answer."""
        await self.publisher.stored_so_far()

    # -- $JS.API ---------------------------------------------------------------------------
    def _on_api(self, subject: str, reply: str | None, hdr: bytes | None,
                payload: bytes) -> None:
        if not reply:
            return  # nobody to answer
        tokens = subject[len(jsapi.API_PREFIX):].split(".")
        if tokens[:3] == ["CONSUMER", "MSG", "NEXT"]:
            if len(tokens) != 5:  # no consumer listens on such a subject
                self.gateway.route(reply, None, no_responders_header(subject), b"")
                return
            self._spawn(self._pull(tokens, reply, payload, jsapi.needs_newer_api(hdr)))
        elif tokens[:2] in (["STREAM", "SNAPSHOT"], ["STREAM", "RESTORE"]) and len(tokens) == 3:
            backup = self.backups.snapshot if tokens[1] == "SNAPSHOT" else self.backups.restore
            self._spawn(self._counted(backup(tokens, reply, payload, self.audit.client(),
                                             jsapi.needs_newer_api(hdr))))
        elif tokens[:2] == ["DIRECT", "GET"]:
            if len(tokens) < 3 or tokens[2] not in self._direct:
                # nats-server: only streams with allow_direct listen for direct gets
                self.gateway.route(reply, None, no_responders_header(subject), b"")
                return
            if jsapi.needs_newer_api(hdr):
                self.gateway.route(reply, None, _TOO_NEW, b"")
                return
            self._spawn(self._direct_get(tokens, reply, payload))
        else:
            self._spawn(self._api(tokens, reply, payload, self.audit.client(), hdr))

    @property
    def stopping(self) -> bool:
        return self._stopping

    def api_counts(self) -> dict[str, int]:
        """The ``api`` of account info and monitoring: requests this gateway answered."""
        return {"level": jsapi.API_LEVEL, "total": self.api_total, "errors": self.api_errors}

    async def _counted(self, request: Any) -> None:
        self.api_total += 1
        await request

    async def changed_stream(self, name: str, config: StreamConfig | None) -> None:
        """A stream made, changed or deleted here other than by a plain API request."""
        await self._changed_stream(name, config)

    async def _api(self, tokens: list[str], reply: str, payload: bytes, client: Any,
                   hdr: bytes | None = None) -> None:
        await self.stored_so_far()
        doc = await self.call(jsapi.answer, self.js, tokens, payload, hdr)
        if doc is None:
            return  # nats-server leaves a subject it does not serve unanswered
        if tokens == ["INFO"] and "error" not in doc:
            # the requests this gateway answered before this one, as nats-server counts an
            # account's (per gateway here: each keeps its own count)
            doc["api"] = self.api_counts()
            if self.domain:
                doc["domain"] = self.domain
        self.api_total += 1
        self.api_errors += "error" in doc
        log.debug("$JS.API.%s %s -> %s", ".".join(tokens), payload[:200], str(doc)[:300])
        if "error" not in doc:
            if tokens[0] == "STREAM" and tokens[1] in ("CREATE", "UPDATE", "DELETE"):
                await self._changed_stream(
                    tokens[2], None if tokens[1] == "DELETE"
                    else StreamConfig.from_dict(jsapi.without_reserved(doc["config"])))
            self.links.after_api(tokens)
            if tokens[0] == "CONSUMER" and "CREATE" in tokens[:3]:
                self._watch_push(doc)
            if tokens[0] == "CONSUMER":
                for info in doc.get("consumers") or [doc]:
                    self._mark_push_bound(info)
            if tokens[:2] == ["CONSUMER", "INFO"] and len(tokens) >= 4:
                await self._pushed_before_info(tokens[2], tokens[3], doc)
        self.audit.answered(tokens, reply, payload, _json(doc), client)

    async def _pushed_before_info(self, stream: str, consumer: str, doc: dict) -> None:
        """A push consumer's info answers after the deliveries it counts have gone out
        through this gateway's pump (nats-server writes both on one connection in order)."""
        pump = self._pumps.get((stream, consumer))
        delivered = (doc.get("delivered") or {}).get("consumer_seq") or 0
        if pump is not None and not pump.done and delivered > pump.last_cseq:
            await pump.written(delivered, INFO_AFTER_PUSH_WAIT)

    async def _direct_get(self, tokens: list[str], reply: str, payload: bytes) -> None:
        await directget.answer(self, tokens, reply, payload)

    # -- pull requests -------------------------------------------------------------------
    async def link_for(self, stream: str, consumer: str) -> Any:
        """The consumer's link: cached, else looked up in the pool (a catalogue call)."""
        link = self.links.cached(stream, consumer)
        if link is None:
            link = await self.call(self.links.link, stream, consumer)
        return link

    def forget_link(self, stream: str, consumer: str) -> None:
        """Look the consumer up again next time (its leader or replicas changed)."""
        self.links.forget(stream, consumer)

    async def _pull(self, tokens: list[str], reply: str, payload: bytes,
                    too_new: bool = False) -> None:
        stream, consumer = tokens[3], tokens[4]
        if too_new:  # the consumer answers it (a missing one is nobody: no responders)
            try:
                await self.call(self.js.consumer_info, stream, consumer)
            except (ConsumerNotFoundError, StreamNotFoundError):
                self.gateway.route(reply, None, no_responders_header(
                    f"{jsapi.API_PREFIX}{'.'.join(tokens)}"), b"")
                return
            except APIError:
                pass
            self.gateway.route(reply, None, _TOO_NEW, b"")
            return
        try:
            req = pull_request(payload)
        except APIError as exc:
            self.gateway.route(reply, None, P.status_header(400, exc.description), b"")
            return
        answers, ranges = self._take_quiet_acks((stream, consumer))
        await self.stored_so_far()
        await self.serve_pull(stream, consumer, reply, req, answers, ranges)

    def _take_quiet_acks(self, key: tuple[str, str]) -> tuple[list, Any]:
        """The acks queued for ``key``'s consumer, to travel with a pull request that came
        right after them (a client acks a fetch, then fetches again): one call and one
        replicated step instead of two. Only acks nobody waits an answer for."""
        items = self._acks.get(key)
        if not items or any(reply or a[2] == "next" for a, reply in items):
            return [], ()
        del self._acks[key]
        return ([a for a, _ in items if a[0] != "ack"],
                seq_ranges([a[1] for a, _ in items if a[0] == "ack"]))

    async def serve_pull(self, stream: str, consumer: str, reply: str,
                         req: dict[str, Any], answers: list | None = None,
                         ranges: Any = ()) -> None:
        batch, max_bytes, shift = req["batch"], req["max_bytes"], req.get("shift", 0)
        expires, no_wait, hb = req["expires"], req["no_wait"], req["idle_heartbeat"]
        end = time.monotonic() + expires if expires else None
        active = [time.monotonic()]  # when the requester last heard from us
        # A no-wait pull with an expiry waits (with heartbeats) only when nothing is there
        # (as nats-server's): it is first asked without waiting and its heartbeats start
        # once that found nothing. A heartbeat sent while a slow first read is under way
        # would reach the client ahead of the messages, and nats.py's fetch takes a
        # heartbeat first for "nothing there" and pulls again (twice the batch delivered).
        probe = bool(no_wait and end is not None)
        key = (stream, consumer)
        # the priority-group fields go with every call that serves this request; a pin the
        # consumer gives it goes with the calls for the rest of its batch (pinned client)
        group = dict(req.get("priority") or {})
        beat = self._spawn(self._heartbeats(reply, hb, active, key)) if hb and not probe else None
        relinked = False
        try:
            while True:
                if not self.gateway.interest.has_interest(reply):
                    return  # nobody listens for the messages (nats-server drops the request)
                if end is None or probe:  # no_wait without expires answers at once (404 if empty)
                    left = 0.0 if no_wait else NO_EXPIRY_PULL
                else:
                    left = max(end - time.monotonic(), 0.001)
                # the heartbeats are the gateway's (above); the consumer's waiting pull gets
                # one that fits what is left of the expiry, which the request's own
                # (checked against the whole expiry, as nats-server does) may not: the
                # JavaScript client asks for exactly half
                wait_hb = 0.0 if probe else min(hb, left / 2)
                try:
                    link = await self.link_for(stream, consumer)
                    call = asyncio.ensure_future(self.call(
                        link.pull, batch, left, max_bytes, no_wait, wait_hb, answers, ranges,
                        **group))
                    answers, ranges = None, ()  # applied with the first call
                    if end is not None and not probe:
                        await asyncio.wait({call}, timeout=max(end - time.monotonic(), 0.0))
                        if not call.done() and not self.links.answered(stream, consumer) \
                                and not getattr(link, "known_to_exist", False):
                            # it may not exist: nats-server answers a pull to a missing
                            # consumer with no responders, never with a 408
                            await asyncio.wait({call}, timeout=UNCONFIRMED_WAIT)
                        if not call.done():
                            self._expired(reply, call, batch + shift, max_bytes)
                            return
                    got, status = await call
                    self.links.mark_answered(stream, consumer)
                    if probe and not len(got) and status is not None and status[0] == 404:
                        probe = False  # nothing there: wait out the expiry
                        active[0] = time.monotonic()
                        if hb:
                            beat = self._spawn(self._heartbeats(reply, hb, active, key))
                        continue
                    probe = False
                except (ConsumerNotFoundError, StreamNotFoundError):
                    self.forget_link(stream, consumer)
                    if not relinked:  # a cached link may point at a consumer made again
                        relinked = True
                        continue
                    # nats-server: nobody listens on a pull subject without its consumer
                    subject = f"{jsapi.API_PREFIX}CONSUMER.MSG.NEXT.{stream}.{consumer}"
                    self.gateway.route(reply, None, P.status_header(
                        503, extra=[("Nats-Subject", subject)]), b"")
                    return
                except APIError as exc:
                    self.forget_link(stream, consumer)
                    self.gateway.route(reply, None, P.status_header(exc.code or 503,
                                                                    exc.description), b"")
                    return
                if len(got):
                    self.deliver(reply, got)
                    self.links.delivered(stream, consumer, got)
                    if group.get("group") and (pin := pin_of(got)):
                        group["pin_id"] = pin
                    active[0] = time.monotonic()
                    batch -= len(got)
                    if max_bytes:  # one budget for the whole request, however it is served
                        max_bytes -= _delivered_bytes(got)
                        if max_bytes <= 0:
                            return
                if status is not None and status[0] != 100:
                    code, description, pending_msgs, pending_bytes = _status(status)
                    if end is None and code == 408 and batch > 0 \
                            and self.gateway.interest.has_interest(reply):
                        continue  # no expiry: keep waiting while the requester listens
                    extra = []
                    if code in (408, 409, 423) and (pending_msgs or pending_bytes):
                        extra = [("Nats-Pending-Messages", str(pending_msgs + shift)),
                                 ("Nats-Pending-Bytes", str(pending_bytes))]
                    self.gateway.route(reply, None, P.status_header(code, description, extra),
                                       b"")
                    return
                if batch <= 0:
                    return
                if no_wait:
                    if len(got) and int(got.num_pending[-1]) == 0:
                        # the end of the stream: nats-server ends a no-wait pull that got
                        # part of its batch with a 404 then, so the client stops waiting
                        self.gateway.route(reply, None, P.status_header(404, "No Messages"),
                                           b"")
                    return
                if end is not None and time.monotonic() >= end:
                    return
                if not self.gateway.interest.has_interest(reply):
                    return
        finally:
            if beat is not None:
                beat.cancel()

    def _expired(self, reply: str, call: asyncio.Future, batch: int, max_bytes: int) -> None:
        """A pull's expiry on the requester's clock, before the consumer's answer came (its
        own timer runs from when the request reached it, and the answer travels back): the
        408 goes now, as nats-server sends it at the expiry. nats.py's fetch times out at
        the expiry and takes a 408 that comes after that for the next fetch's answer.
        Messages the consumer decided for the request meanwhile still go out when its answer
        comes (they are pending on the consumer, never dropped)."""
        extra = [("Nats-Pending-Messages", str(batch)), ("Nats-Pending-Bytes", str(max_bytes))]
        self.gateway.route(reply, None, P.status_header(408, "Request Timeout", extra), b"")

        def late(done: asyncio.Future) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            got, _status = done.result()
            if len(got):
                self.deliver(reply, got)

        call.add_done_callback(late)

    async def _heartbeats(self, reply: str, every: float, active: list[float],
                          key: tuple[str, str]) -> None:
        """``100 Idle Heartbeat`` to a waiting pull whenever nothing went to it for
        ``every`` seconds, with the consumer's last delivered sequences as nats-server's."""
        while True:
            await asyncio.sleep(max(active[0] + every - time.monotonic(), 0.001))
            if time.monotonic() - active[0] >= every:
                active[0] = time.monotonic()
                cseq, sseq = self.links.last(*key)
                hdr = P.status_header(100, "Idle Heartbeat", [
                    ("Nats-Last-Consumer", str(cseq)), ("Nats-Last-Stream", str(sseq))])
                self.gateway.route(reply, None, hdr, b"")

    def deliver(self, deliver_subject: str, got: Any) -> int:
        """Send a DeliveryBatch to ``deliver_subject``'s subscribers (their subject is each
        message's own; the reply is its ``$JS.ACK`` subject): every plain subscriber gets
        each message, a queue group (a deliver group) one member per message. How many
        subscribers there were."""
        plain, groups = self.gateway.interest.match(deliver_subject)
        if not plain and not groups:
            return 0
        choose = self.gateway.interest.pick
        for i in range(len(got)):
            subject, hdr, data = got.message(i)
            reply = got.reply(i)
            for sub in plain:
                sub.owner.deliver(sub, subject, reply, hdr or None, data)
            for group in groups:
                sub = choose(group)
                sub.owner.deliver(sub, subject, reply, hdr or None, data)
        return len(plain) + len(groups)

    # -- push consumers ------------------------------------------------------------------
    def _mark_push_bound(self, info: Any) -> None:
        """``push_bound``: somebody subscribes to a push consumer's deliver subject."""
        if not isinstance(info, dict):
            return
        deliver = (info.get("config") or {}).get("deliver_subject")
        if deliver and self.gateway.interest.has_interest(deliver):
            info["push_bound"] = True

    def _watch_push(self, info: dict[str, Any]) -> None:
        cfg = info.get("config") or {}
        if not cfg.get("deliver_subject"):
            return
        key = (info["stream_name"], info["name"])
        pump = self._pumps.get(key)
        if pump is not None and not pump.done:
            pump.config = cfg
            return
        pump = PushPump(self, key[0], key[1], cfg)
        self._pumps[key] = pump
        pump.task = self._spawn(pump.run())

    def subscribed(self, subject: str) -> None:
        """A client subscribed to ``subject``: the push pumps it may be for start now
        (nats.py makes the consumer first and subscribes to its deliver subject after)."""
        for pump in self._pumps.values():
            if subject_matches(pump.config.get("deliver_subject") or "", subject):
                pump.interest_arrived()

    def expect_flow_answer(self, subject: str, pump: PushPump) -> None:
        self._flow_waits[subject] = pump

    def _on_flow_answer(self, subject: str, reply: str | None, hdr: bytes | None,
                        payload: bytes) -> None:
        pump = self._flow_waits.pop(subject, None)
        if pump is not None:
            pump.flow_answered(subject)

    def pumps_of(self, stream: str) -> list[PushPump]:
        """The push pumps feeding consumers of ``stream`` (PubAcks wait for them)."""
        return [p for (s, _), p in self._pumps.items() if s == stream] if self._pumps else []

    def push_consumers(self) -> list[tuple[str, str]]:
        """(stream, consumer) of every push consumer the gateway feeds now."""
        return list(self._pumps)

    def pump_ended(self, pump: PushPump) -> None:
        if pump.fc_subject is not None:
            self._flow_waits.pop(pump.fc_subject, None)
        if self._pumps.get((pump.stream, pump.consumer)) is pump:
            del self._pumps[(pump.stream, pump.consumer)]
        self.forget_link(pump.stream, pump.consumer)

    async def _resume_pumps(self) -> None:
        """Push consumers made before this gateway started get their pumps."""
        try:
            infos = await self.call(_push_consumers, self.js)
        except APIError as exc:
            log.warning("push consumers not resumed: %s", exc)
            return
        for info in infos:
            self._watch_push(info)

    # -- $JS.ACK ---------------------------------------------------------------------------
    def _on_ack(self, subject: str, reply: str | None, hdr: bytes | None,
                payload: bytes) -> None:
        toks = subject.split(".")
        if len(toks) == 9:
            stream, consumer, sseq = toks[2], toks[3], toks[5]
        elif len(toks) >= 11:  # the form with domain and account hash
            stream, consumer, sseq = toks[4], toks[5], toks[7]
        else:
            return
        if not sseq.isdigit():
            return
        answer = _answer(payload, int(sseq))
        if answer is None:
            return
        key = (stream, consumer)
        queue = self._acks[key]
        queue.append((answer, reply))
        if len(queue) == 1:
            self._spawn(self._send_acks(key))

    async def _send_acks(self, key: tuple[str, str]) -> None:
        await asyncio.sleep(0)  # gather the acks that arrived in the same read
        items = self._acks.pop(key, [])
        if not items:
            return
        replies = [r for _, r in items if r]
        nexts = [(a, r) for a, r in items if a[0] == "ack" and a[2] == "next"]
        # plain acks cross as seq ranges (a client acking a fetch one by one sends a run)
        plain = [s for (k, s, _), _ in items if k == "ack"]
        others = [a for a, _ in items if a[0] != "ack"]
        try:
            link = await self.link_for(*key)
            await self.call(link.answer, others, seq_ranges(plain), bool(replies))
        except APIError as exc:
            self.forget_link(*key)
            log.debug("acks to %s lost with %s", key, exc)
            return
        for (_, _, arg), reply in items:
            if reply and arg != "next":
                self.gateway.route(reply, None, None, b"")
        for (_, _, _), reply in nexts:
            if reply:
                self._spawn(self.serve_pull(key[0], key[1], reply, pull_request(b"")))


def _delivered_bytes(got: Any) -> int:
    """What a pull request's max_bytes counts of a DeliveryBatch (as the consumer counts
    it): subject, reply, header block and payload of each message."""
    total = 0
    for i in range(len(got)):
        subject, hdr, data = got.message(i)
        total += len(subject) + len(got.reply(i)) + len(hdr) + len(data)
    return total


def _answer(payload: bytes, sseq: int) -> tuple[str, int, Any] | None:
    """An ack payload as (kind, stream seq, arg); None when it is not one."""
    body = payload.strip()
    if body in (b"", b"+ACK"):
        return ("ack", sseq, None)
    if body.startswith(b"+NXT"):
        return ("ack", sseq, "next")
    if body.startswith(b"-NAK"):
        delay = None
        rest = body[4:].strip()
        if rest:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                delay = json.loads(rest).get("delay", 0) / 1e9 or None
        return ("nak", sseq, delay)
    if body == b"+WPI":
        return ("progress", sseq, None)
    if body.startswith(b"+TERM"):
        return ("term", sseq, body[5:].strip().decode(errors="replace"))
    return None


def _push_consumers(js: Any) -> list[dict[str, Any]]:
    out = []
    for name in js.stream_names():
        try:
            for info in js.consumers_info(name):
                if info.config.deliver_subject:
                    out.append(info.to_dict())
        except (StreamNotFoundError, ConsumerNotFoundError):
            continue
    return out


