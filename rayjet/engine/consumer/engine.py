"""ConsumerEngine: the deterministic state machine of one consumer replica.

Every replica: :meth:`ConsumerEngine.apply` committed ops (:mod:`.ops`) in log
order to the replicated :class:`~.state.ConsumerState`; :meth:`snapshot` /
:meth:`restore` it. Only the leader decides: which messages go out next (redeliveries first,
then new messages in stream order), what an ack/nak/term/in-progress changes, when ack waits
expire. Each decision returns the ops to propose and is applied at once to the leader's
*view* (a copy of the state plus its proposals in flight), so pipelined decisions build on
each other; a leader change rebuilds the view from the committed state.

Leader-local, never replicated (lost on a leader change, like nats-server): the redelivery
queue, waiting pull requests, the read position past filtered-out messages, the replay and
rate-limit pacing, and the pin of a pinned_client priority group (a new leader starts
unpinned and pins again on its first delivery). Time comes in as ``now`` (ns) or from the
injected clock, and every timestamp a replica needs travels inside the ops.

Two mixins hold the leader's decisions on single messages: :class:`~.delivery.DeliveryDecisions`
(which messages go out next, redelivery timers) and :class:`~.acks.AckDecisions` (acks, naks,
resets). This module keeps leadership, apply and snapshots, the waiting pull requests and
their priority groups, and the consumer's info.
"""

from __future__ import annotations

import os
import random
from collections import deque

import msgpack

from rayjet.api import ConsumerConfig, ConsumerInfo, SequenceInfo, StreamConfig
from rayjet.api.consumer import consumer_defaults
from rayjet.api.enums import (
    AckPolicy,
    DeliverPolicy,
    PriorityPolicy,
    ReplayPolicy,
    RetentionPolicy,
)
from rayjet.api.info import PriorityGroupState
from rayjet.clock import NANOS_PER_SECOND, SYSTEM_CLOCK, Clock, Rng
from rayjet.engine.consumer import waiting as W
from rayjet.engine.consumer.acks import AckDecisions
from rayjet.engine.consumer.delivery import DeliveryDecisions, Round
from rayjet.engine.consumer.ops import ConsumerOp, RestoreStateOp, StartOp
from rayjet.engine.consumer.state import ACK_ALL, ACK_EXPLICIT, ACK_NONE, ConsumerState
from rayjet.engine.consumer.types import (
    GROUP_PINNED,
    GROUP_PINNED_TYPE,
    GROUP_UNPINNED,
    GROUP_UNPINNED_TYPE,
    Advisory,
    Batch,
    ConsumerApplyResult,
    PullRequest,
    RequestStatus,
)
from rayjet.engine.consumer.util import (
    dt,
    go_duration,
    iso,
    parse_sample_freq,
    select_start,
    to_ns,
)
from rayjet.errors import NotLeaderError, error_for
from rayjet.subjects import matches_any

_SNAP_VERSION = 1
_NS = NANOS_PER_SECOND
_OVERFLOW, _PINNED, _PRIORITIZED = (PriorityPolicy.OVERFLOW, PriorityPolicy.PINNED_CLIENT,
                                    PriorityPolicy.PRIORITIZED)
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def new_pin_id() -> str:
    """A 22-character id like a NATS nuid, from the OS's randomness: a new leader must never
    hand out an id an earlier leader gave someone else."""
    n = int.from_bytes(os.urandom(17), "big")
    out = []
    for _ in range(22):
        n, r = divmod(n, 62)
        out.append(_B62[r])
    return "".join(out)


class ConsumerEngine(DeliveryDecisions, AckDecisions):
    def __init__(self, config: ConsumerConfig, stream_config: StreamConfig, reader,
                 clock: Clock = SYSTEM_CLOCK, *, created_ns: int | None = None,
                 name: str | None = None, rng: Rng | None = None) -> None:
        self.stream_config = stream_config
        self.stream = stream_config.name
        self.reader = reader
        self.clock = clock
        self.created_ns = clock.now_ns() if created_ns is None else created_ns
        self._set_config(consumer_defaults(config, stream_config))
        self.name = name or self.config.consumer_name or ""
        self._rng = rng if rng is not None else random.Random(self.name)
        self.state = ConsumerState(self._ack_mode)
        self._leader = False
        self._view: ConsumerState | None = None
        self._inflight: deque[ConsumerOp] = deque()
        self._sseq = 1  # next stream seq to look at (leader)
        self._rdq: deque[int] = deque()
        self._rdq_set: set[int] = set()
        self._lss: deque[int] = deque()  # last_per_subject catch-up list
        self._waiting = self._new_wait_queue()
        self._pin = ""  # pinned_client: the current pin id ("" none)
        self._pin_ts = 0  # when it was handed out
        self._pin_seen = 0  # the pinned client's last pull (priority_timeout runs from it)
        self._replay_until = 0
        self._replay_lts = 0
        self._replay_due = 0
        self._rate_next = 0
        self._active_ns = self.created_ns

    # -- config ----------------------------------------------------------------------------------
    def _set_config(self, cfg: ConsumerConfig) -> None:
        self.config = cfg
        self.filters: tuple[str, ...] = tuple(f for f in cfg.filters if f and f != ">")
        self._ack_mode = {AckPolicy.NONE: ACK_NONE, AckPolicy.ALL: ACK_ALL}.get(
            cfg.ack_policy, ACK_EXPLICIT)
        self._ack_wait_ns = to_ns(cfg.ack_wait) if cfg.ack_wait else 30 * _NS
        self._backoff = tuple(to_ns(b) for b in cfg.backoff)
        self._max_deliver = cfg.max_deliver if cfg.max_deliver > 0 else 0
        # -1 (as 0) means no limit, as in nats-server
        self._max_ack_pending = (max(cfg.max_ack_pending or 0, 0)
                                 if self._ack_mode != ACK_NONE else 0)
        self._sample = parse_sample_freq(cfg.sample_freq)
        self._replay = cfg.replay_policy is ReplayPolicy.ORIGINAL
        self._rate_bps = cfg.rate_limit_bps
        self._lps = cfg.deliver_policy is DeliverPolicy.LAST_PER_SUBJECT
        self._forward = self.stream_config.retention is not RetentionPolicy.LIMITS
        self._policy = cfg.priority_policy
        self._pin_ttl = to_ns(cfg.priority_timeout) if cfg.priority_timeout else 0

    def _new_wait_queue(self) -> W.WaitQueue:
        return W.WaitQueue(self.config.max_waiting or 0, prioritized=self._policy is _PRIORITIZED)

    def update_config(self, config: ConsumerConfig) -> None:
        """Take an edited config (the editable fields: ack_wait, backoff, max_deliver,
        max_ack_pending, sample_freq, rate limit, request limits, ...)."""
        self._set_config(consumer_defaults(config, self.stream_config))
        wq = self._waiting
        wq.max_waiting = self.config.max_waiting or 0
        if self._policy is _PRIORITIZED and not wq.prioritized:
            wq.items = deque(sorted(wq.items, key=lambda w: w.priority))
        wq.prioritized = self._policy is _PRIORITIZED
        if self._policy is not _PINNED:
            self._clear_pin()

    # -- leadership ------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def view(self) -> ConsumerState:
        """The leader's running state (committed + in flight); the committed one elsewhere."""
        return self._view if self._view is not None else self.state

    def set_leader(self, now: int | None = None) -> list[ConsumerOp]:
        """Start deciding. Call once every entry committed before this term is applied.
        A consumer that never started resolves its deliver policy into a starting stream
        seq here: propose the returned ops first."""
        now = self.clock.now_ns() if now is None else now
        self._leader = True
        self._view = self.state.copy()
        self._inflight.clear()
        self._rdq.clear()
        self._rdq_set.clear()
        self._waiting = self._new_wait_queue()
        self._clear_pin()
        self._active_ns = max(self._active_ns, now)
        ops: list[ConsumerOp] = []
        if not self.state.started:
            start, resume = self._select_start()
            ops.append(self._propose(StartOp(start, resume)))
        v = self._view
        self._sseq = max(v.dsseq + 1, v.scan, 1)
        self._lss.clear()
        if v.resume and v.scan <= v.resume and v.dsseq < v.resume:
            self._lss.extend(s for s in self.reader.last_per_subject(self.filters, v.resume)
                             if s > v.dsseq)
        self._replay_until = self.reader.bounds()[1] if self._replay else 0
        self._replay_lts = self._replay_due = self._rate_next = 0
        return ops

    def set_follower(self) -> list[RequestStatus]:
        """Stop deciding; the waiting pull requests end (409 Leadership Change)."""
        statuses = self._waiting.clear(W.LEADERSHIP_CHANGE)
        self._clear_pin()
        self._leader = False
        self._view = None
        self._inflight.clear()
        self._rdq.clear()
        self._rdq_set.clear()
        self._lss.clear()
        return statuses

    def leader_reads(self) -> list[tuple]:
        """The stream reads :meth:`set_leader` makes, as (method, *args): an actor fetches
        them ahead (a ``ReadAhead``) so taking the lead never waits on the stream."""
        reads: list[tuple] = [("bounds",)]
        cfg, v = self.config, self.state
        if not v.started:
            dp = cfg.deliver_policy
            if dp is DeliverPolicy.LAST and self.filters:
                reads.append(("last_seq_for", self.filters))
            elif dp is DeliverPolicy.LAST_PER_SUBJECT:
                reads.append(("last_per_subject", self.filters))
            elif dp is DeliverPolicy.BY_START_TIME and cfg.opt_start_time is not None:
                reads.append(("seq_for_time", int(cfg.opt_start_time.timestamp() * _NS)))
        elif v.resume and v.scan <= v.resume and v.dsseq < v.resume:
            reads.append(("last_per_subject", self.filters))
        return reads

    def decision_reads(self, want: int) -> list[tuple]:
        """Reads the next delivery decision makes besides the new-message window:
        queued redeliveries and last-per-subject catch-up messages (leader)."""
        if not self._leader:
            return []
        n = max(1, min(want, 4096))
        view = self._view
        reads: list[tuple] = [("load_msg", s) for s in self._rdq
                              if s in self._rdq_set and s in view.pending][:n]
        if self._lss:
            reads += [("load_msg", s) for s in list(self._lss)[:n]]
            reads.append(("num_pending", self.filters, view.resume + 1, False))
        return reads

    def info_reads(self) -> list[tuple]:
        """The stream read :meth:`info` makes (its ``num_pending``)."""
        if self._leader:
            if self._lss:
                return [("num_pending", self.filters, self._view.resume + 1, False)]
            return [("num_pending", self.filters, self._sseq, False)]
        return [("num_pending", self.filters, max(self.state.dsseq + 1, self.state.scan),
                 False)]

    def advance_reads(self, sseq: int) -> list[tuple]:
        """The stream reads :meth:`prepare_advance` to ``sseq`` makes (leader)."""
        if not self._leader:
            return []
        v = self._view
        start = max(v.dsseq + 1, v.scan, 1)
        return [("bounds",), ("num_pending", self.filters, start, False),
                ("num_pending", self.filters, sseq + 1, False)]

    def read_position(self) -> int:
        """The stream seq the next new message is looked for from (leader; 0 while a
        last-per-subject catch-up reads message by message)."""
        return 0 if self._lss else self._sseq

    def _check_leader(self) -> ConsumerState:
        if not self._leader or self._view is None:
            raise NotLeaderError(group=f"{self.stream} > {self.name}")
        return self._view

    def _propose(self, op: ConsumerOp) -> ConsumerOp:
        self._view.apply(op)
        self._inflight.append(op)
        return op

    def _select_start(self) -> tuple[int, int]:
        return select_start(self.config, self.stream_config, self.reader, self.filters)

    # -- apply (every replica) ---------------------------------------------------------------------
    def apply(self, op: ConsumerOp) -> ConsumerApplyResult:
        acked = self.state.apply(op)
        if self._leader:
            inflight = self._inflight
            if inflight and (inflight[0] is op or inflight[0] == op):
                inflight.popleft()
            else:
                # committed by an earlier leader: rebuild the view on top of it
                view = self.state.copy()
                for o in inflight:
                    view.apply(o)
                self._view = view
                self._sseq = max(self._sseq, view.dsseq + 1)
                if type(op) is RestoreStateOp:
                    self._restart_view()
        return ConsumerApplyResult(op, acked if self._forward else [])

    def apply_all(self, ops) -> list[ConsumerApplyResult]:
        return [self.apply(op) for op in ops]

    def snapshot(self) -> bytes:
        return msgpack.packb({"v": _SNAP_VERSION, "state": self.state.to_doc()},
                             use_bin_type=True)

    def restore(self, snap: bytes) -> None:
        doc = msgpack.unpackb(snap, raw=False)
        if doc.get("v") != _SNAP_VERSION:
            raise error_for("CONSUMER_CREATE", f"unknown consumer snapshot version {doc.get('v')}")
        self.state = ConsumerState.from_doc(doc["state"], self._ack_mode)
        if self._leader:
            self._view = self.state.copy()
            self._inflight.clear()
            self._rdq.clear()
            self._rdq_set.clear()
            self._sseq = max(self._view.dsseq + 1, self._view.scan, 1)

    # -- pull requests -------------------------------------------------------------------------------
    def request(self, req: PullRequest, now: int | None = None) -> Batch:
        """A pull request arrives: refuse it, answer it, or queue it and serve what is there."""
        self._check_leader()
        now = self.clock.now_ns() if now is None else now
        out = Batch()
        self._expire_pin(now, out)
        status = self._check_request(req) or self._check_group(req, now)
        if status is not None:
            out.statuses.append(status)
            return out
        wq = self._waiting
        self._active_ns = wq.last_ns = now
        if wq.full:
            out.statuses.extend(wq.expire(now))
        if req.no_wait:
            avail = self._available()
            if avail == 0 and not req.expires:
                out.statuses.append(RequestStatus(req.reply, *W.NO_MESSAGES))
                return out
            if avail and avail < self._wanted():
                out.statuses.append(RequestStatus(req.reply, *W.REQUESTS_PENDING))
                return out
        hb = to_ns(req.heartbeat)
        w = W.Waiting(req.reply, max(req.batch, 1), max(req.max_bytes, 0),
                      now + to_ns(req.expires) if req.expires else 0, req.no_wait, hb,
                      now + hb if hb else 0, now, priority=req.priority,
                      min_pending=max(req.min_pending, 0),
                      min_ack_pending=max(req.min_ack_pending, 0), pin=req.pin_id)
        if not wq.add(w):
            if not hb:  # a client with heartbeats waits for them instead of retrying at once
                out.statuses.append(w.status(W.EXCEEDED_MAX_WAITING, with_pending=False))
            return out
        self._serve(now, out)
        return out

    def _check_request(self, req: PullRequest) -> RequestStatus | None:
        cfg, reply = self.config, req.reply
        if cfg.is_push:
            return RequestStatus(reply, *W.PUSH_BASED)
        if req.heartbeat and req.heartbeat * 2 > req.expires:
            return RequestStatus(reply, 400, "Bad Request - heartbeat value too large")
        if cfg.max_request_batch > 0 and req.batch > cfg.max_request_batch:
            return RequestStatus(reply, 409, f"Exceeded MaxRequestBatch of {cfg.max_request_batch}")
        if req.expires and cfg.max_request_expires > 0 and req.expires > cfg.max_request_expires:
            return RequestStatus(
                reply, 409, f"Exceeded MaxRequestExpires of {go_duration(cfg.max_request_expires)}")
        if (req.max_bytes > 0 and cfg.max_request_max_bytes > 0
                and req.max_bytes > cfg.max_request_max_bytes):
            return RequestStatus(
                reply, 409, f"Exceeded MaxRequestMaxBytes of {cfg.max_request_max_bytes}")
        return None

    def _check_group(self, req: PullRequest, now: int) -> RequestStatus | None:
        """The priority-group fields of a pull, checked as nats-server does; a pull from
        the pinned client (its pin id) keeps the pin alive for another priority_timeout."""
        policy, reply = self._policy, req.reply
        if (req.min_pending or req.min_ack_pending) and policy is not _OVERFLOW:
            return RequestStatus(reply, 400, "Bad Request - Not a Overflow Priority consumer")
        if req.pin_id and policy is not _PINNED:
            return RequestStatus(reply, 400, "Bad Request - Not a Pinned Client Priority consumer")
        if not 0 <= req.priority <= 9:
            return RequestStatus(reply, 400, "Bad Request - Priority must be between 0 and 9")
        if policy is PriorityPolicy.NONE:
            return None
        if not req.group:
            return RequestStatus(reply, 400, "Bad Request - Priority Group missing")
        if req.group not in self.config.priority_groups:
            return RequestStatus(reply, 400, "Bad Request - Invalid Priority Group")
        if self._pin and req.pin_id:
            if req.pin_id != self._pin:
                return RequestStatus(reply, 423, "Nats-Pin-Id mismatch")
            self._pin_seen = now
        return None

    def _wanted(self) -> int:
        """Messages the waiting requests that may be served now still want (a no_wait pull
        is refused with 408 when the stream has fewer)."""
        wq = self._waiting
        if self._policy is _PINNED:
            return sum(w.n for w in wq.items if self._pin and w.pin == self._pin)
        if self._policy is _OVERFLOW:
            npc, acks = self._num_pending(self._sseq), len(self._view.pending)
            return sum(w.n for w in wq.items if self._overflow_ok(w, npc, acks))
        return wq.wanted()

    def serve(self, now: int | None = None) -> Batch:
        """Give waiting pull requests what is available now (call when the stream grew, an
        ack freed room under max_ack_pending, a redelivery came due, or a request timer
        fired). Expired requests end with 408 first."""
        self._check_leader()
        now = self.clock.now_ns() if now is None else now
        out = Batch()
        self._serve(now, out)
        return out

    def _serve(self, now: int, out: Batch) -> None:
        wq = self._waiting
        self._expire_pin(now, out)
        out.statuses.extend(wq.expire(now))
        if not wq:
            return
        rnd = Round(now, out, self._view.dcseq + 1)
        exhausted = blocked = False
        want = wq.wanted()
        while wq:
            w = wq.head()
            if (len(wq) == 1 and self._policy is PriorityPolicy.NONE and not w.b and not w.hb_ns
                    and (k := self._take_run(rnd, min(w.n, want), w.reply))):
                want -= k
                w.n -= k
                w.d += k
                wq.served(w)
                continue
            cand = self._peek(rnd, want)
            if cand is None:
                exhausted = True
                break
            w = wq.head() if self._policy is PriorityPolicy.NONE else self._pick(rnd, out)
            if w is None:
                blocked = True  # messages wait, but no waiting request may have them now
                break
            if w.b:
                size = cand.delivery.size
                if size > w.b:
                    out.statuses.append(w.status(W.MAX_BYTES_EXCEEDED))
                    wq.remove(w)
                    continue
                w.b -= size
                if w.b == 0:
                    w.n = 1
            pin = ""
            if self._policy is _PINNED:
                if not self._pin:
                    self._assign_pin(w, now, out)
                pin = self._pin
            self._take(rnd, cand, w.reply, pin)
            want -= 1
            w.n -= 1
            w.d += 1
            if w.hb_ns:
                w.hb_next_ns = now + w.hb_ns
            wq.served(w)
            if w.n <= 0 and w.b > 0:
                out.statuses.append(w.status(W.BATCH_COMPLETED))
        self._finish(rnd)
        wq.last_ns = now if rnd.items else wq.last_ns
        # a no_wait pull held back by its priority group ends as at the end of the stream
        if exhausted and not out.stalled or blocked:
            out.statuses.extend(wq.end_of_stream())

    # -- priority groups ---------------------------------------------------------------------------
    def _pick(self, rnd: Round, out: Batch) -> W.Waiting | None:
        """The waiting request the next message goes to under the priority policy (None:
        none may have it now). Pinned: requests with an outdated pin id end with 423."""
        wq = self._waiting
        if self._policy is _PRIORITIZED:
            return wq.head()  # sorted by priority
        if self._policy is _OVERFLOW:
            # rnd.npc counts the candidate itself, as num_pending does before it goes out
            acks = len(self._view.pending) + (rnd.new if self._ack_mode != ACK_NONE else 0)
            return next((w for w in wq.items if self._overflow_ok(w, rnd.npc, acks)), None)
        pin = self._pin
        for w in [w for w in wq.items if w.pin and w.pin != pin]:
            out.statuses.append(w.status(W.WRONG_PIN_ID))
            wq.remove(w)
        if pin:
            return next((w for w in wq.items if w.pin == pin), None)
        # a new pin: the lowest priority number, the earliest pull among equals
        return min(wq.items, key=lambda w: w.priority, default=None)

    @staticmethod
    def _overflow_ok(w: W.Waiting, num_pending: int, num_ack_pending: int) -> bool:
        """Overflow: a pull with conditions is served once either one holds."""
        if not w.min_pending and not w.min_ack_pending:
            return True
        return bool(w.min_pending and num_pending >= w.min_pending
                    or w.min_ack_pending and num_ack_pending >= w.min_ack_pending)

    def _group(self) -> str:
        return self.config.priority_groups[0] if self.config.priority_groups else ""

    def _assign_pin(self, w: W.Waiting, now: int, out: Batch) -> None:
        self._pin = w.pin = new_pin_id()
        self._pin_ts = self._pin_seen = now
        out.advisories.append(self._advisory(GROUP_PINNED, GROUP_PINNED_TYPE, now,
                                             group=self._group(), pinned_id=self._pin))

    def _clear_pin(self) -> None:
        self._pin, self._pin_ts, self._pin_seen = "", 0, 0

    def _expire_pin(self, now: int, out: Batch) -> None:
        """The pinned client made no pull for priority_timeout: the next delivery pins anew."""
        if self._pin and self._pin_ttl and now - self._pin_seen >= self._pin_ttl:
            self._clear_pin()
            out.advisories.append(self._advisory(GROUP_UNPINNED, GROUP_UNPINNED_TYPE, now,
                                                 group=self._group(), reason="timeout"))

    @property
    def pinned(self) -> bool:
        return bool(self._pin)

    def next_pin_deadline(self) -> int:
        """When the current pin runs out unless its client pulls again (0: no pin)."""
        return self._pin_seen + self._pin_ttl if self._pin and self._pin_ttl else 0

    def unpin(self, group: str, now: int | None = None) -> Batch:
        """The UNPIN API: drop the group's pin (advisory, reason "admin") and serve at once,
        so a waiting standby pull becomes the pinned client."""
        self._check_leader()
        now = self.clock.now_ns() if now is None else now
        if not group:
            raise error_for("INVALID_JSON", err="consumer group not specified")
        if group not in self.config.priority_groups:
            raise error_for("CONSUMER_INVALID_PRIORITY_GROUP")
        out = Batch()
        self._clear_pin()
        out.advisories.append(self._advisory(GROUP_UNPINNED, GROUP_UNPINNED_TYPE, now,
                                             group=group, reason="admin"))
        self._serve(now, out)
        return out

    def _available(self) -> int:
        """Messages that could go out now: pending in the stream plus queued redeliveries."""
        return self._num_pending(self._sseq) + len(self._rdq_set)

    def _advisory(self, prefix: str, type_: str, now: int, **body) -> Advisory:
        doc = {"type": type_, "timestamp": iso(now), "stream": self.stream,
               "consumer": self.name, **body}
        return Advisory(f"{prefix}.{self.stream}.{self.name}", doc)

    # -- timers -------------------------------------------------------------------------------------------
    def expire_requests(self, now: int | None = None) -> list[RequestStatus]:
        """408 for expired pull requests and the idle heartbeats that are due."""
        now = self.clock.now_ns() if now is None else now
        return self._waiting.expire(now)

    def cancel_request(self, reply: str) -> bool:
        """The client behind ``reply`` is gone: its request leaves the queue at once and gets
        nothing more (nats-server drops a request whose reply subject lost its interest).
        False when no such request waits (it ended or expired already)."""
        return self._waiting.remove_reply(reply)

    def next_request_deadline(self) -> int:
        return self._waiting.next_deadline()

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def touch(self, now: int | None = None) -> None:
        """Record client activity the engine cannot see (e.g. a push subscriber exists)."""
        self._active_ns = self.clock.now_ns() if now is None else now

    def is_inactive(self, now: int | None = None) -> bool:
        """Whether ``inactive_threshold`` passed with no request, delivery or ack."""
        thr = to_ns(self.config.inactive_threshold)
        if not thr or self._waiting:
            return False
        now = self.clock.now_ns() if now is None else now
        return now - max(self._active_ns, self._waiting.last_ns) >= thr

    # -- state for the stream ------------------------------------------------------------------------------
    def needs_ack(self, sseq: int) -> bool:
        """Whether the consumer still holds stream seq ``sseq`` (interest reconciliation)."""
        if self.filters:
            msg = self.reader.load_msg(sseq)
            if msg is None:
                return False
            if not matches_any(msg.subject, self.filters):
                return False
        return self.view.needs_ack(sseq)

    # -- info ----------------------------------------------------------------------------------------------
    def _num_pending(self, start: int) -> int:
        if self._lss:
            return len(self._lss) + self.reader.num_pending(self.filters, self._view.resume + 1)
        return self.reader.num_pending(self.filters, start, False)

    def num_pending(self) -> int:
        """Messages matching the filters the consumer has not reached yet."""
        if self._leader:
            return self._num_pending(self._sseq)
        return self.reader.num_pending(self.filters, max(self.state.dsseq + 1, self.state.scan),
                                       False)

    def info(self, now: int | None = None) -> ConsumerInfo:
        """ConsumerInfo as nats-server 2.15 reports it (delivered = last delivered)."""
        now = self.clock.now_ns() if now is None else now
        st = self.state
        view = self.view
        num_waiting = 0
        if self.config.is_pull and self._leader:
            num_waiting = sum(1 for w in self._waiting.items
                              if not w.expires_ns or now < w.expires_ns)
        num_redelivered = len(view.redelivered) if self.config.max_deliver != 1 else 0
        groups: tuple[PriorityGroupState, ...] = ()
        if self.config.priority_groups:  # one state, for the first group, as nats-server
            pinned = self._pin and self._leader and not (
                self._pin_ttl and now - self._pin_seen >= self._pin_ttl)
            groups = (PriorityGroupState(self._group(), self._pin if pinned else None,
                                         dt(self._pin_ts) if pinned else None),)
        paused, remaining = False, None
        pu = self.config.pause_until
        if pu is not None:
            left = int(pu.timestamp() * _NS) - now
            if left > 0:
                paused, remaining = True, left / _NS
        return ConsumerInfo(
            stream_name=self.stream, name=self.name, config=self.config,
            created=dt(self.created_ns),
            delivered=SequenceInfo(st.dcseq, st.dsseq, dt(st.last_delivered_ns)),
            ack_floor=SequenceInfo(st.acseq, st.asseq, dt(st.last_ack_ns)),
            num_ack_pending=len(view.pending), num_redelivered=num_redelivered,
            num_waiting=num_waiting, num_pending=self.num_pending(),
            paused=paused, pause_remaining=remaining, timestamp=dt(now),
            priority_groups=groups)


__all__ = ["ConsumerEngine"]
