"""Consumer configuration (NATS ``ConsumerConfig``).

A consumer with a ``deliver_subject`` is a push consumer, one without is a pull consumer.
Fields whose default depends on others (``ack_wait``, ``max_ack_pending``, ``max_waiting``,
``inactive_threshold``) are ``None`` until :meth:`ConsumerConfig.with_defaults` fills them
the way nats-server does at create.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rayjet.api.base import DURATION, DURATIONS, ENUM, MAP, STRS, TIME, FrozenDict, Wire, wire_field
from rayjet.api.enums import AckPolicy, DeliverPolicy, PriorityPolicy, ReplayPolicy

if TYPE_CHECKING:
    from rayjet.api.stream import StreamConfig

DEFAULT_ACK_WAIT = 30.0  # seconds
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512  # pull requests waiting at once
DEFAULT_PINNED_TTL = 120.0  # seconds, priority_policy=pinned_client


@dataclass(frozen=True)
class ConsumerConfig(Wire):
    durable_name: str | None = None
    name: str | None = None
    description: str | None = None
    deliver_policy: DeliverPolicy = wire_field(DeliverPolicy.ALL, kind=ENUM, type_=DeliverPolicy)
    opt_start_seq: int | None = None
    opt_start_time: datetime | None = wire_field(None, kind=TIME)
    ack_policy: AckPolicy = wire_field(AckPolicy.EXPLICIT, kind=ENUM, type_=AckPolicy)
    ack_wait: float | None = wire_field(None, kind=DURATION)
    max_deliver: int = -1
    backoff: tuple[float, ...] = wire_field((), kind=DURATIONS)
    filter_subject: str | None = None
    filter_subjects: tuple[str, ...] = wire_field((), kind=STRS)
    replay_policy: ReplayPolicy = wire_field(ReplayPolicy.INSTANT, kind=ENUM, type_=ReplayPolicy)
    rate_limit_bps: int = 0
    sample_freq: str | None = None
    max_waiting: int | None = None
    max_ack_pending: int | None = None
    flow_control: bool = False
    idle_heartbeat: float | None = wire_field(None, kind=DURATION)
    headers_only: bool = False
    # pull consumers: ceilings for a single fetch request
    max_request_batch: int = wire_field(0, wire="max_batch")
    max_request_expires: float = wire_field(0.0, kind=DURATION, wire="max_expires")
    max_request_max_bytes: int = wire_field(0, wire="max_bytes")
    # push consumers
    deliver_subject: str | None = None
    deliver_group: str | None = None
    inactive_threshold: float | None = wire_field(None, kind=DURATION)
    # 0 means "as many as the stream"
    num_replicas: int = 0
    mem_storage: bool = False
    metadata: FrozenDict = wire_field(kind=MAP, default_factory=FrozenDict)
    pause_until: datetime | None = wire_field(None, kind=TIME)
    priority_groups: tuple[str, ...] = wire_field((), kind=STRS)
    priority_policy: PriorityPolicy = wire_field(
        PriorityPolicy.NONE, kind=ENUM, type_=PriorityPolicy)
    priority_timeout: float | None = wire_field(None, kind=DURATION)

    @property
    def replicas(self) -> int:
        return self.num_replicas

    @property
    def is_pull(self) -> bool:
        return not self.deliver_subject

    @property
    def is_push(self) -> bool:
        return bool(self.deliver_subject)

    @property
    def is_durable(self) -> bool:
        return bool(self.durable_name)

    @property
    def consumer_name(self) -> str | None:
        """The name the consumer is known by: the durable name, else ``name``."""
        return self.durable_name or self.name or None

    @property
    def filters(self) -> tuple[str, ...]:
        """``filter_subject`` and ``filter_subjects`` as one tuple (empty: no filter)."""
        if self.filter_subject:
            return (self.filter_subject, *self.filter_subjects)
        return self.filter_subjects

    def with_defaults(self, stream_config: StreamConfig | None = None) -> ConsumerConfig:
        return consumer_defaults(self, stream_config)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.priority_policy is PriorityPolicy.NONE:
            out.pop("priority_policy", None)
        return out


def consumer_defaults(cfg: ConsumerConfig,
                      stream_config: StreamConfig | None = None) -> ConsumerConfig:
    """Apply nats-server's create-time consumer defaults without validating anything."""
    limits = stream_config.consumer_limits if stream_config is not None else None
    changes: dict[str, Any] = {}
    if cfg.max_deliver == 0 or cfg.max_deliver < -1:
        changes["max_deliver"] = -1
    # negative numbers mean "unset" to nats-server; max_waiting and max_request_batch are
    # checked instead, since silently zeroing them hides a mistake
    if cfg.max_ack_pending is not None and cfg.max_ack_pending < -1:
        changes["max_ack_pending"] = -1
    for name in ("max_request_expires", "max_request_max_bytes"):
        if getattr(cfg, name) < 0:
            changes[name] = 0
    for name in ("idle_heartbeat", "inactive_threshold", "priority_timeout"):
        value = getattr(cfg, name)
        if value is not None and value < 0:
            changes[name] = 0.0
    if cfg.is_pull and not cfg.max_waiting:
        changes["max_waiting"] = DEFAULT_MAX_WAITING
    elif cfg.is_push and cfg.max_waiting is None:
        changes["max_waiting"] = 0
    ack_wait = cfg.ack_wait
    if not ack_wait and cfg.ack_policy in (AckPolicy.EXPLICIT, AckPolicy.ALL):
        ack_wait = DEFAULT_ACK_WAIT
    if cfg.backoff:
        ack_wait = cfg.backoff[0]
    if ack_wait != cfg.ack_wait:
        changes["ack_wait"] = ack_wait
    max_ack_pending = changes.get("max_ack_pending", cfg.max_ack_pending)
    if not max_ack_pending:
        max_ack_pending = (limits.max_ack_pending if limits else None) or 0
        if not max_ack_pending and cfg.ack_policy is not AckPolicy.NONE:
            max_ack_pending = DEFAULT_MAX_ACK_PENDING
        # still 0 (ack none): unset, as nats-server leaves it out of the config's JSON
        changes["max_ack_pending"] = max_ack_pending or None
    if not cfg.inactive_threshold and limits is not None and limits.inactive_threshold:
        changes["inactive_threshold"] = limits.inactive_threshold
    if cfg.priority_policy is PriorityPolicy.PINNED_CLIENT and not cfg.priority_timeout:
        changes["priority_timeout"] = DEFAULT_PINNED_TTL
    return dataclasses.replace(cfg, **changes) if changes else cfg
