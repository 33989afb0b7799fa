"""The consumer half of the client API: manage consumers, pull and push subscriptions."""

from __future__ import annotations

import builtins
import dataclasses
import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from rayjet.actors.names import consumer_actor_name
from rayjet.actors.router import GroupRouter
from rayjet.actors.wire_values import CONSUMER_REQUESTS
from rayjet.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy, StreamConfig
from rayjet.api.headers import get_header
from rayjet.client.buffer import MsgBuffer, until_quiet
from rayjet.client.messages import AckSender, Msg, MsgBatch, ack_all
from rayjet.client.stream_list import listed_names
from rayjet.engine.consumer.delivery_batch import DeliveryBatch
from rayjet.engine.consumer.waiting import CONSUMER_DELETED
from rayjet.errors import (
    APIError,
    BadRequestError,
    ConsumerNotFoundError,
    InvalidPriorityGroupError,
    NoMessagesError,
    PinIdMismatchError,
    TimeoutError,
)
from rayjet.placement.consumers import ephemeral_name, runs_in_stream_leader
from rayjet.subjects import validate_filter

PUSH_BATCH = 256
INFO_THREADS = 16  # consumer infos asked at once by a listing (each mostly waits)
PUSH_MAX_BATCH = 4096  # ordered consumers grow their polls up to this while they keep up
PUSH_MAX_PENDING = 65_536  # flow control: no new poll while this many wait to be read
PUSH_POLL = 1.0  # seconds one push poll waits for messages
PIN_ID_HEADER = "Nats-Pin-Id"


def _consumer_config(config: ConsumerConfig | dict | None, params: dict) -> ConsumerConfig:
    if config is None:
        return ConsumerConfig(**params)
    if isinstance(config, dict):
        config = ConsumerConfig.from_dict(config)
    if not isinstance(config, ConsumerConfig):
        raise BadRequestError(f"pass a ConsumerConfig (or its fields), not "
                              f"{type(config).__name__}")
    return dataclasses.replace(config, **params) if params else config


def _router(ca: dict[str, Any]) -> GroupRouter:
    return GroupRouter({rid: consumer_actor_name(ca["group"], rid) for rid, _ in ca["peers"]},
                       f"consumer {ca['stream']} > {ca['name']}",
                       direct_methods=CONSUMER_REQUESTS,
                       name_for=functools.partial(consumer_actor_name, ca["group"]))


_ROUTER_OPTIONS = ("timeout", "retry_unknown", "attempt_timeout")


class ConsumerReset(NamedTuple):
    """What :meth:`ConsumersAPI.reset_consumer` answers: the consumer's info right after
    the reset and the stream seq it delivers from now."""

    info: ConsumerInfo
    reset_seq: int


class LeaderConsumerRouter:
    """Calls a consumer that runs inside its stream's leader (an ephemeral one, see
    :mod:`rayjet.placement.consumers`) through the stream's router, as a GroupRouter
    calls a dedicated consumer's replicas."""

    def __init__(self, stream_router: GroupRouter, name: str) -> None:
        self.stream_router = stream_router
        self.name = name

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        options = {k: kwargs.pop(k) for k in _ROUTER_OPTIONS if k in kwargs}
        return self.stream_router.call("leader_consumer_call", self.name, method, args, kwargs,
                                       **options)


class ConsumersAPI:
    """Mixed into :class:`rayjet.client.JetStream`."""

    def _consumer_router(self, stream: str, name: str) -> GroupRouter | LeaderConsumerRouter:
        if (stream, name) not in self._in_leader:
            try:
                return _router(self._meta_call("consumer_assignment", stream, name))
            except ConsumerNotFoundError:
                pass  # not in the catalogue: an ephemeral consumer in the stream leader?
        return LeaderConsumerRouter(self._stream(stream)[1], name)

    def _init_consumers(self) -> None:
        # (stream, name) of the consumers this client made in a stream leader
        self._in_leader: set[tuple[str, str]] = set()

    def _runs_in_leader(self, stream: str, cfg: ConsumerConfig) -> bool:
        assignment, _ = self._stream(stream)
        return runs_in_stream_leader(cfg, StreamConfig.from_dict(assignment["config"]))

    def _leader_consumer_names(self, stream: str) -> list[str]:
        return self._stream_call(stream, "leader_consumer_names")

    def add_consumer(self, stream: str, config: ConsumerConfig | dict | None = None,
                     **params: Any) -> ConsumerInfo:
        cfg = _consumer_config(config, params)
        if self._runs_in_leader(stream, cfg):
            # a stream just made may still be starting its replicas: wait as the catalogue
            # path does
            wait = max(self.timeout, 60)
            if cfg.name:
                raw = self._stream_call(stream, "add_leader_consumer", cfg.to_dict(),
                                        timeout=wait)
            else:  # named here, so that a retried call finds the one it made
                raw = self._stream_call(stream, "add_leader_consumer",
                                        dataclasses.replace(cfg, name=ephemeral_name()).to_dict(),
                                        True, timeout=wait)
            info = ConsumerInfo.from_dict(raw)
            self._in_leader.add((stream, info.name))
            return info
        ca = self._meta_call("add_consumer", stream, cfg.to_dict(), timeout=max(self.timeout, 60))
        # the answer is the consumer's assignment: its replicas, asked without a second
        # catalogue call
        return ConsumerInfo.from_dict(_router(ca).call("info", timeout=self.timeout))

    def _consumer_exists(self, stream: str, name: str) -> bool:
        try:
            self._meta_call("consumer_assignment", stream, name)
            return True
        except ConsumerNotFoundError:
            return name in self._leader_consumer_names(stream)

    def update_consumer(self, stream: str, config: ConsumerConfig | dict | None = None,
                        **params: Any) -> ConsumerInfo:
        cfg = _consumer_config(config, params)
        name = cfg.durable_name or cfg.name
        if not name or not self._consumer_exists(stream, name):
            raise ConsumerNotFoundError(f"consumer {name!r} not found")
        return self.add_consumer(stream, cfg)

    def delete_consumer(self, stream: str, name: str) -> bool:
        if (stream, name) not in self._in_leader:
            try:
                return bool(self._meta_call("delete_consumer", stream, name,
                                            timeout=max(self.timeout, 60)))
            except ConsumerNotFoundError:
                pass
        self._in_leader.discard((stream, name))
        return bool(self._stream_call(stream, "delete_leader_consumer", name))

    def consumer_info(self, stream: str, name: str) -> ConsumerInfo:
        raw = self._consumer_router(stream, name).call("info", timeout=self.timeout)
        return ConsumerInfo.from_dict(raw)

    def consumer_leader_stepdown(self, stream: str, name: str) -> str | None:
        """Move the consumer's leadership to another replica
        (``$JS.API.CONSUMER.LEADER.STEPDOWN``); the new leader's id, None for a consumer of
        one replica (one in its stream's leader moves with the stream's leadership)."""
        router = self._consumer_router(stream, name)
        if isinstance(router, LeaderConsumerRouter):
            router.call("info", timeout=self.timeout)  # ConsumerNotFoundError when gone
            return None
        new = router.call("step_down", timeout=self.timeout, retry_unknown=False)
        if new is not None:
            router.leader = new
        return new

    def advance_consumer(self, stream: str, name: str, stream_seq: int) -> ConsumerInfo:
        """Settle everything up to ``stream_seq`` for an ack-all pull consumer at once, as
        if each message had been delivered and acked (a rayjet extension: a batch job that
        reads the stream in bulk keeps its progress in a durable consumer this way). One
        replicated op whatever the distance; the consumer's sequence still counts every
        matching message. Limits-retention streams only."""
        if isinstance(stream_seq, bool) or not isinstance(stream_seq, int) or stream_seq < 1:
            raise BadRequestError(f"stream_seq must be a sequence number >= 1, not "
                                  f"{stream_seq!r}")
        raw = self._consumer_router(stream, name).call("advance", stream_seq,
                                                        timeout=self.timeout)
        return ConsumerInfo.from_dict(raw)

    def reset_consumer(self, stream: str, name: str, seq: int | None = None) -> ConsumerReset:
        """Deliver again from stream seq ``seq``, or (None) from just past the ack floor,
        as ``$JS.API.CONSUMER.RESET`` does: nothing stays pending, consumer seqs start
        again at 1, and both floors are the reset seq - 1. A consumer that delivers all may
        go anywhere, a by_start_sequence or by_start_time one not below its start, others
        only back to their ack floor (else error 10204). Replicated like any consumer
        change: a new leader goes on from there."""
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
            raise BadRequestError(f"seq must be a stream sequence number, not {seq!r}")
        raw = dict(self._consumer_router(stream, name).call("reset", seq or 0,
                                                             timeout=self.timeout))
        reset_seq = int(raw.pop("reset_seq"))
        return ConsumerReset(ConsumerInfo.from_dict(raw), reset_seq)

    def consumers_info(self, stream: str) -> list[ConsumerInfo]:
        infos = []
        for info in self.consumer_infos(stream, self.consumer_names(stream)).values():
            if isinstance(info, APIError):
                raise info
            infos.append(info)
        return infos

    def consumer_infos(self, stream: str, names: Iterable[str]
                       ) -> dict[str, ConsumerInfo | APIError]:
        """The infos of consumers ``names`` of ``stream``, asked side by side (a listing of
        hundreds asked them one after another); a consumer that could not say maps to its
        error (ConsumerNotFoundError when deleted meanwhile)."""
        def one(name: str) -> ConsumerInfo | APIError:
            try:
                return self.consumer_info(stream, name)
            except APIError as err:
                return err

        names = listed_names(names, "consumer")
        if len(names) <= 1:
            return {name: one(name) for name in names}
        with ThreadPoolExecutor(min(INFO_THREADS, len(names))) as pool:
            return dict(zip(names, pool.map(one, names), strict=True))

    def consumer_advisories(self, stream: str, name: str) -> list[tuple[str, dict]]:
        """Advisories and metrics the consumer emitted since the last call, as
        ``(subject, body)``: ack samples (``$JS.EVENT.METRIC.CONSUMER.ACK.<stream>.<name>``,
        per ``sample_freq``), max deliveries, naks, terminated messages and priority-group
        pins (``$JS.EVENT.ADVISORY.CONSUMER.*``), with nats-server's JSON bodies."""
        return self._consumer_router(stream, name).call("advisories", timeout=self.timeout)

    def unpin_consumer(self, stream: str, name: str, group: str) -> bool:
        """``$JS.API.CONSUMER.UNPIN``: the pinned client of ``group`` (a pinned_client
        consumer) loses its pin; the next message pins a waiting standby pull. Its next pull
        with the old id gets :class:`PinIdMismatchError`."""
        return bool(self._consumer_router(stream, name).call("unpin", group,
                                                              timeout=self.timeout))

    def pause_consumer(self, stream: str, name: str, until: datetime | None) -> ConsumerInfo:
        """Hold deliveries until ``until`` (an aware datetime), as ``$JS.API.CONSUMER.PAUSE``
        does; ``None`` resumes at once."""
        config = self.consumer_info(stream, name).config
        return self.update_consumer(stream, dataclasses.replace(config, pause_until=until))

    def resume_consumer(self, stream: str, name: str) -> ConsumerInfo:
        return self.pause_consumer(stream, name, None)

    def consumer_link(self, stream: str, name: str) -> ConsumerLink:
        """Raw access to one consumer, as a protocol server needs it (see
        :class:`ConsumerLink`)."""
        return ConsumerLink(self._consumer_router(stream, name), self.timeout)

    def consumer_names(self, stream: str) -> list[str]:
        """Every consumer: the catalogue's, and the ephemeral ones the stream leader runs."""
        names = {ca["name"] for ca in self._meta_call("list_consumers", stream)}
        return sorted(names | set(self._leader_consumer_names(stream)))

    # -- subscriptions ----------------------------------------------------------------------
    def _bind(self, subject: str | None, stream: str | None) -> str:
        if stream:
            return stream
        if not subject:
            raise BadRequestError("give a subject or a stream to subscribe to")
        validate_filter(subject)
        return self.find_stream_name_by_subject(subject)

    def pull_subscribe(self, subject: str | None = None, durable: str | None = None,
                       stream: str | None = None, config: ConsumerConfig | None = None,
                       **params: Any) -> PullSubscription:
        """Bind to (or create) a pull consumer; ``fetch`` from it."""
        stream = self._bind(subject, stream)
        cfg = _consumer_config(config, params)
        name = durable or cfg.durable_name or cfg.name
        if name and self._consumer_exists(stream, name):
            return PullSubscription(self, stream, name, ephemeral=False)
        changes: dict[str, Any] = {}
        if durable:
            changes["durable_name"] = durable
        if subject and not cfg.filter_subject and not cfg.filter_subjects:
            changes["filter_subject"] = subject
        if cfg.ack_policy is None:
            changes["ack_policy"] = AckPolicy.EXPLICIT
        info = self.add_consumer(stream, dataclasses.replace(cfg, **changes))
        return PullSubscription(self, stream, info.name, ephemeral=not durable)

    def subscribe(self, subject: str | None = None, durable: str | None = None,
                  stream: str | None = None, *, queue: str | None = None,
                  ordered_consumer: bool = False, deliver_policy: DeliverPolicy | None = None,
                  config: ConsumerConfig | None = None, cb: Callable[[Msg], None] | None = None,
                  manual_ack: bool = False, headers_only: bool | None = None,
                  pending_msgs_limit: int = PUSH_MAX_PENDING,
                  **params: Any) -> PushSubscription:
        """A push subscription: messages arrive in the background; iterate them with
        ``messages()``/``next_msg()`` or have ``cb`` called for each. ``queue`` shares one
        consumer among several subscribers (a deliver group); ``ordered_consumer=True``
        gives every message in stream order exactly once, re-creating its consumer on a gap.
        Flow control: a poll asks for no more than fits under ``pending_msgs_limit``
        messages waiting to be read, and none is made while the limit is reached."""
        if isinstance(pending_msgs_limit, bool) or not isinstance(pending_msgs_limit, int) \
                or pending_msgs_limit < 1:
            raise BadRequestError(f"pending_msgs_limit must be a positive number of messages, "
                                  f"not {pending_msgs_limit!r}")
        stream = self._bind(subject, stream)
        cfg = _consumer_config(config, params)
        changes: dict[str, Any] = {}
        if deliver_policy is not None:
            changes["deliver_policy"] = deliver_policy
        if headers_only is not None:
            changes["headers_only"] = headers_only
        if subject and not cfg.filter_subject and not cfg.filter_subjects:
            changes["filter_subject"] = subject
        if not cfg.deliver_subject:
            changes["deliver_subject"] = f"_INBOX.{uuid.uuid4().hex}"
        if ordered_consumer:
            if durable or queue:
                raise BadRequestError("an ordered consumer is ephemeral: no durable, no queue")
            changes.update(ack_policy=AckPolicy.NONE, mem_storage=True, num_replicas=1,
                           flow_control=True, idle_heartbeat=5.0, inactive_threshold=300.0)
        else:
            if durable:
                changes["durable_name"] = durable
            if queue:
                changes["deliver_group"] = queue
                changes.setdefault("durable_name", durable or queue)
            if cfg.ack_policy is None:
                changes["ack_policy"] = AckPolicy.EXPLICIT
        cfg = dataclasses.replace(cfg, **changes)
        name = cfg.durable_name or cfg.name
        created = None
        if not (name and self._consumer_exists(stream, name)):
            created = self.add_consumer(stream, cfg)
            name = created.name
        sub = PushSubscription(self, stream, name, cfg, ordered=ordered_consumer,
                               ephemeral=not (durable or queue), cb=cb, manual_ack=manual_ack,
                               max_pending=pending_msgs_limit)
        # the consumer's state before any delivery (e.g. how many messages it owes now)
        sub.created_info = created
        sub.start()
        return sub


class ConsumerLink:
    """One consumer without a subscription around it: pull requests answered with the
    columns of their messages and the status that ended them, and answers (acks) applied
    as given. The NATS gateway serves ``$JS.API.CONSUMER.MSG.NEXT``, push deliveries and
    ``$JS.ACK`` subjects through it."""

    def __init__(self, router: Any, timeout: float) -> None:
        self.router = router
        self.timeout = timeout

    @property
    def known_to_exist(self) -> bool:
        """Whether the lookup that made this link found the consumer (a durable one is in
        the catalogue); an ephemeral one in its stream's leader is known once it answers."""
        return not isinstance(self.router, LeaderConsumerRouter)

    def pull(self, batch: int, expires: float, max_bytes: int = 0, no_wait: bool = False,
             heartbeat: float = 0.0, acks: list | None = None, ranges: Any = (),
             **priority: Any) -> tuple[DeliveryBatch, Any]:
        """One pull request: (DeliveryBatch, RequestStatus or None). It answers as soon as
        some messages are out (the status is then None): ask again for the rest. ``acks``
        and ``ranges`` (as :meth:`answer` takes them) are applied first, in the same
        replicated step as the delivery."""
        out = self.router.call("fetch", batch, expires, max_bytes, no_wait, heartbeat,
                               timeout=expires + self.timeout, eager=True, acks=acks,
                               ranges=ranges, **priority)
        return out["batch"], out["status"]

    def answer(self, acks: list[tuple[str, int, Any]], ranges: Any = (), sync: bool = False
               ) -> list[bool]:
        """Apply answers ``(kind, stream seq, arg)`` (kind ack|nak|progress|term) and plain
        acks as ``ranges``; ``sync`` waits until they are replicated."""
        return self.router.call("ack", acks, sync, self.timeout, ranges, timeout=self.timeout)


class PullSubscription:
    def __init__(self, js: ConsumersAPI, stream: str, name: str, *, ephemeral: bool) -> None:
        self.js = js
        self.stream = stream
        self.name = name
        self.ephemeral = ephemeral
        self.router = js._consumer_router(stream, name)
        self.acks = AckSender(self.router, js.timeout)
        self._closed = False
        self.pin_id = ""  # pinned_client: the pin this subscription holds ("" none)

    def fetch(self, batch: int = 1, timeout: float | None = 5.0, max_bytes: int = 0,
              heartbeat: float = 0.0, *, group: str | None = None, min_pending: int = 0,
              min_ack_pending: int = 0, priority: int = 0) -> MsgBatch:
        """Up to ``batch`` messages: what is there now, else wait up to ``timeout`` for at
        least one. Raises :class:`NoMessagesError` (a TimeoutError) when none came. The
        answer is a sequence of :class:`Msg` (made as they are looked at) that can also
        ``ack()`` them all at once or turn into Arrow (``to_arrow()``).

        Consumers with priority groups need ``group``. Overflow: ``min_pending`` /
        ``min_ack_pending`` hold the pull back until the consumer is that far behind.
        Pinned client: the subscription keeps the ``Nats-Pin-Id`` it was given and sends it
        along; :class:`PinIdMismatchError` when another client got the pin (the id is
        dropped, so the next fetch waits as a standby). ``priority`` 0..9: lower is served
        first (prioritized) or pinned first (pinned client)."""
        if self._closed:
            raise BadRequestError("the subscription is closed")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise BadRequestError(f"batch must be a positive int, not {batch!r}")
        timeout = 5.0 if timeout is None else timeout
        if timeout <= 0:
            raise BadRequestError(f"timeout must be positive, not {timeout!r}")
        pg: dict[str, Any] = {}
        if group is not None:
            pg = {"group": group, "min_pending": min_pending,
                  "min_ack_pending": min_ack_pending, "priority": priority}
        end = time.monotonic() + timeout
        # every pull expires with this fetch: a pull left waiting would take messages
        # (e.g. those an ack frees under max_ack_pending) that nobody reads. The queued
        # acks travel with it and are applied first: they may free room under
        # max_ack_pending.
        answers = self.acks.take()
        try:
            msgs, status = self._pull(batch, timeout, max_bytes, True, heartbeat, timeout, pg,
                                      answers)
        except BaseException:
            self.acks.put_back(*answers)
            raise
        left = end - time.monotonic()
        if not msgs and status and status[1] == "Requests Pending" and left > 0:
            # other pulls want more than there is: wait in line for the first message
            msgs, _ = self._pull(1, left, max_bytes, False, heartbeat, left, pg)
            left = end - time.monotonic()
            if msgs and batch > 1 and left > 0:
                more = self._pull(batch - 1, left, max_bytes, True, 0.0, left, pg)[0]
                msgs = MsgBatch(DeliveryBatch.concat([msgs.batch, more.batch]), self.acks)
        if not msgs:
            raise NoMessagesError(f"no messages from {self.stream} > {self.name} within "
                                  f"{timeout:.1f}s")
        return msgs

    def fetch_batch(self, batch: int = 1, timeout: float | None = 5.0, max_bytes: int = 0,
                    **kwargs: Any) -> pa.RecordBatch:
        """:meth:`fetch` for bulk consumers: the messages as one Arrow record batch
        (subject, data, headers as NATS header blocks, stream_seq, consumer_seq,
        num_delivered, num_pending, timestamp; the stream and consumer names in the schema
        metadata). Ack them with :meth:`ack_batch`."""
        return self.fetch(batch, timeout, max_bytes, **kwargs).to_arrow()

    def messages_batches(self, batch: int = 1000, timeout: float | None = 1.0,
                         **kwargs: Any) -> Iterator[pa.RecordBatch]:
        """Record batches of :meth:`fetch_batch` until a fetch waits ``timeout`` seconds in
        vain."""
        while True:
            try:
                yield self.fetch_batch(batch, timeout, **kwargs)
            except NoMessagesError:
                return

    def ack_batch(self, batch: pa.RecordBatch | pa.Table | MsgBatch | Iterable[int]) -> None:
        """Ack every message of a fetched batch (a record batch or table with a
        ``stream_seq`` column, a :class:`MsgBatch`, or stream seqs) at once: the acks cross
        as ranges of stream seqs."""
        ack_all(self.acks, batch)

    def _pull(self, batch: int, expires: float, max_bytes: int, no_wait: bool,
              heartbeat: float, timeout: float, pg: dict[str, Any],
              answers: tuple[list, Any] = ([], ())
              ) -> tuple[MsgBatch, tuple[int, str] | None]:
        """One pull request: its messages and the status that ended it. ``answers``
        (queued acks, see AckSender.take) go with it."""
        deadline = time.monotonic() + timeout + 10.0
        acks, ranges = answers
        while True:
            if pg and self.pin_id:
                pg = {**pg, "pin_id": self.pin_id}
            extra = {"acks": acks, "ranges": ranges} if acks or len(ranges) else {}
            out = self.router.call("fetch", batch, expires, max_bytes, no_wait, heartbeat,
                                   timeout=max(deadline - time.monotonic(), 1.0), **pg,
                                   **extra)
            msgs = MsgBatch(out["batch"], self.acks)
            if out["batch"].hdrs:
                for msg in msgs:
                    pin = get_header(msg._hdr, PIN_ID_HEADER) if msg._hdr else None
                    if pin:
                        self.pin_id = pin
            status = out["status"]
            if status and status[0] == 423:
                self.pin_id = ""  # the pin moved on: the next pull waits as a standby
                if not msgs:
                    raise PinIdMismatchError(f"{status[0]} {status[1]}")
            if status and status[0] == 400 and not msgs:
                if "Invalid Priority Group" in status[1]:
                    raise InvalidPriorityGroupError(f"{status[0]} {status[1]}")
                raise BadRequestError(f"{status[0]} {status[1]}")
            if msgs or not status or status[0] != 409:
                return msgs, status
            # nothing was handed out: after a leadership change ask the new leader
            if "Leadership Change" not in status[1] or time.monotonic() >= deadline:
                raise APIError(f"{status[0]} {status[1]}", spec="CONSUMER_INVALID_POLICY")

    def consumer_info(self) -> ConsumerInfo:
        return self.js.consumer_info(self.stream, self.name)

    def unsubscribe(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.acks.stop()
        if self.ephemeral:
            try:
                self.js.delete_consumer(self.stream, self.name)
            except APIError:
                pass


class PushSubscription:
    """Messages pushed to this client by a background thread (a long poll of the consumer)."""

    def __init__(self, js: ConsumersAPI, stream: str, name: str, config: ConsumerConfig, *,
                 ordered: bool, ephemeral: bool, cb: Callable[[Msg], None] | None,
                 manual_ack: bool, max_pending: int = PUSH_MAX_PENDING) -> None:
        self.js = js
        self.stream = stream
        self.name = name
        self.config = config
        self.ordered = ordered
        self.ephemeral = ephemeral or ordered
        self.cb = cb
        self.manual_ack = manual_ack
        self._queue = MsgBuffer()  # MsgBatch per poll; None ends the subscription
        self._room = threading.Condition()  # signalled when the reader takes messages
        self._read_lock = threading.Lock()
        self._reading: MsgBatch | None = None  # the batch next_msg takes from
        self._pos = 0
        self._queued = 0  # messages put in the queue (the poller counts)
        self._taken = 0  # messages taken out (readers count, under _read_lock)
        self.max_pending = max_pending
        self._batch = PUSH_BATCH
        self._stop = threading.Event()
        self._ack_none = config.ack_policy is AckPolicy.NONE
        self._bind_router()
        self._next_cseq = 1
        self._last_sseq = 0
        self.error: BaseException | None = None
        self.created_info: ConsumerInfo | None = None
        self._thread = threading.Thread(target=self._run, name="rayjet-push", daemon=True)

    def _bind_router(self) -> None:
        self.router = self.js._consumer_router(self.stream, self.name)
        self.acks = None if self._ack_none else AckSender(self.router, self.js.timeout)

    def start(self) -> None:
        self._thread.start()

    def _wait_for_room(self) -> None:
        """Flow control: while the reader is this far behind, ask for nothing more."""
        with self._room:
            while self.pending() >= self.max_pending and not self._stop.is_set():
                self._room.wait(PUSH_POLL)

    def _adapt(self, got: int) -> None:
        """Ordered consumers (one reader, no acks to spread) poll for more while full
        polls come back and the reader keeps up; back to the base size when idle."""
        if not self.ordered:
            return
        if got >= self._batch and self.pending() < self.max_pending // 4:
            self._batch = min(self._batch * 2, PUSH_MAX_BATCH)
        elif got < self._batch // 4:
            self._batch = max(self._batch // 2, PUSH_BATCH)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.cb is None:
                self._wait_for_room()
            # an ordered consumer is cheap to re-create: give up on a lost one quickly
            wait = PUSH_POLL + (1.0 if self.ordered else self.js.timeout)
            try:
                room = max(self.max_pending - self.pending(), 1)
                out = self.router.call("fetch", min(self._batch, room), PUSH_POLL, 0, False,
                                       0.0, timeout=wait)
                batch: DeliveryBatch = out["batch"]
                self._adapt(len(batch))
                status = out["status"]
                if not len(batch) and status and status[0] == 409:
                    if status[1].startswith(("Leadership Change", "Server Shutdown")):
                        continue  # the next poll finds the new leader or location
                    if status[1] == CONSUMER_DELETED[1]:
                        raise ConsumerNotFoundError(f"consumer {self.name!r}: {status[1]}")
                    raise APIError(f"{status[0]} {status[1]}", code=status[0])
            except ConsumerNotFoundError:
                if not self.ordered:
                    self.error = ConsumerNotFoundError(f"consumer {self.name!r} was deleted")
                    self._queue.put(None)
                    return
                self._recreate()
                continue
            except APIError as err:
                if self._stop.is_set():
                    return
                if self.ordered:
                    self._recreate()
                    continue
                self.error = err
                continue
            gap = self._gap(batch) if self.ordered else len(batch)
            if gap:
                batch = batch.slice(0, gap)
                self._hand_out(MsgBatch(batch, self.acks, ack_none=self._ack_none))
                if self.ordered:
                    self._next_cseq += gap
                    self._last_sseq = int(batch.stream_seq[-1])
            if gap < len(out["batch"]):
                self._recreate()  # a gap: start again after the last one shown

    def _gap(self, batch: DeliveryBatch) -> int:
        """Ordered consumers: how many messages of ``batch`` follow on without a gap in
        the consumer sequence."""
        expected = np.arange(self._next_cseq, self._next_cseq + len(batch))
        wrong = np.flatnonzero(batch.consumer_seq != expected)
        return int(wrong[0]) if len(wrong) else len(batch)

    def _hand_out(self, msgs: MsgBatch) -> None:
        if self.cb is None:
            self._queued += len(msgs)
            self._queue.put(msgs)  # one wake-up per poll, not per message
            return
        for msg in msgs:
            self._call_back(msg)

    def _call_back(self, msg: Msg) -> None:
        try:
            self.cb(msg)
            if not self.manual_ack and not self._ack_none:
                msg.ack()
        except Exception as err:  # noqa: BLE001 - a failing callback must not stop delivery
            self.error = err

    def _recreate(self) -> None:
        """Ordered consumers: a new ephemeral consumer starting after the last message."""
        old = self.name
        cfg = dataclasses.replace(self.config, name=None, durable_name=None,
                                  deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                  opt_start_seq=self._last_sseq + 1, opt_start_time=None)
        if self._last_sseq == 0:
            cfg = dataclasses.replace(self.config, name=None, durable_name=None)
        try:
            self.js.delete_consumer(self.stream, old)
        except APIError:
            pass
        while not self._stop.is_set():
            try:
                self.name = self.js.add_consumer(self.stream, cfg).name
                self._bind_router()
                self._next_cseq = 1
                return
            except APIError as err:
                self.error = err
                self._stop.wait(0.5)

    def _next_batch(self, deadline: float | None) -> MsgBatch:
        """The next poll's messages (caller holds ``_read_lock``)."""
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            item = self._queue.get(timeout=left)
        except builtins.TimeoutError:
            raise TimeoutError("no message within the timeout") from None
        if item is None:
            self._queue.put_back(None)
            raise self.error or TimeoutError("the subscription ended")
        with self._room:  # the poller may be waiting for room
            self._room.notify()
        return item

    def next_msg(self, timeout: float | None = 1.0) -> Msg:
        with self._read_lock:
            reading, pos = self._reading, self._pos
            if reading is None or pos >= len(reading):
                deadline = None if timeout is None else time.monotonic() + timeout
                reading, pos = self._next_batch(deadline), 0
                self._reading = reading
            self._pos = pos + 1
            self._taken += 1
            return reading._msg(pos)

    def next_batch(self, timeout: float | None = 1.0) -> MsgBatch:
        """The messages that have arrived (what is left of a poll ``next_msg`` started
        on, else the next poll's), waiting up to ``timeout`` for some."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._read_lock:
            if self._reading is not None and self._pos < len(self._reading):
                reading, pos = self._reading, self._pos
                got = MsgBatch(reading.batch.slice(pos), self.acks, ack_none=self._ack_none)
            else:
                got = self._next_batch(deadline)
            self._reading, self._pos = None, 0
            self._taken += len(got)
        return got

    def messages(self, timeout: float | None = 1.0) -> Iterator[Msg]:
        """Yield messages until none arrives within ``timeout`` seconds."""
        return until_quiet(self.next_msg, timeout)

    def messages_batches(self, timeout: float | None = 1.0) -> Iterator[pa.RecordBatch]:
        """Yield what arrives as Arrow record batches (see
        :meth:`PullSubscription.fetch_batch`) until nothing does within ``timeout``."""
        for got in until_quiet(self.next_batch, timeout):
            yield got.to_arrow()

    def ack_batch(self, batch: pa.RecordBatch | pa.Table | MsgBatch | Iterable[int]) -> None:
        """Ack every message of ``batch`` at once (see :meth:`PullSubscription.ack_batch`)."""
        ack_all(self.acks, batch)

    def pending(self) -> int:
        """Messages arrived and not read yet."""
        return self._queued - self._taken

    def consumer_info(self) -> ConsumerInfo:
        return self.js.consumer_info(self.stream, self.name)

    def unsubscribe(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        with self._room:
            self._room.notify_all()
        self._thread.join(timeout=PUSH_POLL + self.js.timeout + 5)
        if self.acks is not None:
            self.acks.stop()
        self._queue.put(None)
        if self.ephemeral:
            try:
                self.js.delete_consumer(self.stream, self.name)
            except APIError:
                pass
