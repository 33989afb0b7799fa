"""Consumer configuration checks, as nats-server applies them at create and update.

:func:`validate_consumer_config` fills in the defaults (see
:func:`rayjet.api.consumer.consumer_defaults`) and checks the result against the parent
stream; it raises ``InvalidConfigError`` carrying the NATS ``err_code`` of the rule.
:func:`validate_consumer_update` adds what may not change (:data:`CONSUMER_EDITABLE`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rayjet.api.consumer import ConsumerConfig, consumer_defaults
from rayjet.api.enums import AckPolicy, DeliverPolicy, PriorityPolicy, RetentionPolicy
from rayjet.api.stream import (
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    MAX_NAME_LEN,
    StreamConfig,
    name_problem,
)
from rayjet.errors import InvalidConfigError
from rayjet.subjects import is_literal, is_subset, is_valid_filter, is_valid_subject
from rayjet.subjects import subjects_collide as _collide

_MIN_HEARTBEAT = 0.1  # seconds
_MIN_REQUEST_EXPIRES = 0.001
_GROUP_NAME = re.compile(r"^[a-zA-Z0-9/_=-]{1,16}$")
_PATH_SEPARATORS = frozenset("/\\")

# Fields that can not change once the consumer exists; the rest can.
CONSUMER_FIXED = (
    "durable_name", "name", "deliver_policy", "opt_start_seq", "opt_start_time", "ack_policy",
    "replay_policy", "idle_heartbeat", "flow_control", "mem_storage", "max_waiting",
)
CONSUMER_EDITABLE: dict[str, bool] = {
    name: name not in CONSUMER_FIXED for name in ConsumerConfig.__dataclass_fields__
}
# deliver_subject may change, but not between push and pull
CONSUMER_EDITABLE["deliver_subject"] = True


def _fail(description: str | None = None, spec: str = "STREAM_INVALID_CONFIG",
          **fields: Any) -> InvalidConfigError:
    return InvalidConfigError(description, spec=spec, **fields)


def check_consumer_name(name: str, *, field: str = "name") -> str:
    """Path separators 10127, too long 10102, other bad characters 10103."""
    if any(ch in _PATH_SEPARATORS for ch in name):
        raise _fail(spec="CONSUMER_NAME_PATH_SEPARATORS")
    if len(name) > MAX_NAME_LEN:
        raise _fail(spec="CONSUMER_NAME_TOO_LONG", max=MAX_NAME_LEN)
    if name_problem(name):
        raise _fail(f"invalid consumer {field} {name!r}: durable name can not contain "
                    "whitespace, '.', '*' or '>'", spec="CONSUMER_BAD_DURABLE_NAME")
    return name


def validate_consumer_config(
    cfg: ConsumerConfig,
    stream_config: StreamConfig | None = None,
    *,
    existing: Iterable[ConsumerConfig] = (),
    strict_filters: bool = False,
) -> ConsumerConfig:
    """Check a consumer config for ``stream_config`` and return it with defaults applied.

    ``existing`` are the stream's other consumers, used for the work-queue rules (one
    unfiltered consumer, filters that do not overlap: 10099/10100). Since NATS 2.10 a filter
    need not match the stream's subjects (a subject removed from the stream may still hold
    messages); ``strict_filters=True`` restores the older rule and raises 10093 for a filter
    that matches none of them. Without ``stream_config`` the stream-dependent rules are skipped.
    """
    if not isinstance(cfg, ConsumerConfig):
        raise _fail(spec="CONSUMER_CONFIG_REQUIRED")
    if cfg.durable_name:
        check_consumer_name(cfg.durable_name, field="durable_name")
    if cfg.name:
        check_consumer_name(cfg.name)
    if cfg.durable_name and cfg.name and cfg.durable_name != cfg.name:
        raise _fail(spec="CONSUMER_DURABLE_NAME_MISMATCH")
    cfg = consumer_defaults(cfg, stream_config)
    stream = stream_config
    if stream is not None:
        _check_replicas(cfg, stream)
    for value in cfg.backoff:
        if value < 0:
            raise _fail(spec="CONSUMER_BACKOFF_NEGATIVE")
    if cfg.ack_wait is not None and cfg.ack_wait < 0:
        raise _fail(spec="CONSUMER_ACK_WAIT_NEGATIVE")
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise _fail(spec="CONSUMER_MAX_DELIVER_BACKOFF")
    if cfg.description and len(cfg.description) > MAX_DESCRIPTION_LEN:
        raise _fail(spec="CONSUMER_DESCRIPTION_TOO_LONG", max=MAX_DESCRIPTION_LEN)
    if cfg.is_push:
        _check_push(cfg, stream)
    else:
        _check_pull(cfg, stream)
    if stream is not None and stream.consumer_limits is not None:
        limits = stream.consumer_limits
        if limits.max_ack_pending and (cfg.max_ack_pending or 0) > limits.max_ack_pending:
            raise _fail(spec="CONSUMER_MAX_PENDING_ACK_EXCESS", limit=limits.max_ack_pending)
        if (limits.inactive_threshold
                and (cfg.inactive_threshold or 0) > limits.inactive_threshold):
            raise _fail(spec="CONSUMER_INACTIVE_THRESHOLD_EXCESS",
                        limit=f"{limits.inactive_threshold}s")
    _check_filters(cfg, stream, strict_filters)
    _check_start(cfg)
    if cfg.sample_freq:
        text = cfg.sample_freq.strip().removesuffix("%")
        if not text.isdigit():
            raise _fail(spec="CONSUMER_INVALID_SAMPLING",
                        err=f"{cfg.sample_freq!r} is not a percentage")
    if cfg.flow_control and not cfg.idle_heartbeat:
        raise _fail(spec="CONSUMER_FC_NEEDS_HEARTBEATS")
    if sum(len(k) + len(v) for k, v in cfg.metadata.items()) > MAX_METADATA_LEN:
        raise _fail(spec="CONSUMER_METADATA_TOO_LONG", limit=f"{MAX_METADATA_LEN // 1024}KB")
    _check_priority(cfg)
    if stream is not None and stream.retention is RetentionPolicy.WORK_QUEUE:
        _check_work_queue(cfg, existing)
    return cfg


def _check_replicas(cfg: ConsumerConfig, stream: StreamConfig) -> None:
    if cfg.num_replicas < 0:
        raise _fail(spec="REPLICAS_COUNT_NEGATIVE")
    if cfg.num_replicas > stream.num_replicas:
        raise _fail(spec="CONSUMER_REPLICAS_EXCEED_STREAM")
    if (stream.retention is not RetentionPolicy.LIMITS and cfg.num_replicas
            and cfg.num_replicas != stream.num_replicas):
        raise _fail(spec="CONSUMER_REPLICAS_SHOULD_MATCH_STREAM")


def _check_push(cfg: ConsumerConfig, stream: StreamConfig | None) -> None:
    subject = cfg.deliver_subject or ""
    if not is_literal(subject):
        raise _fail(spec="CONSUMER_DELIVER_TO_WILDCARDS")
    if not is_valid_subject(subject):
        raise _fail(spec="CONSUMER_INVALID_DELIVER_SUBJECT")
    if stream is not None and any(is_subset(subject, s) for s in stream.subjects):
        raise _fail(spec="CONSUMER_DELIVER_CYCLE")
    if cfg.max_waiting:
        raise _fail(spec="CONSUMER_PUSH_MAX_WAITING")
    if (cfg.max_ack_pending or 0) > 0 and cfg.ack_policy is AckPolicy.NONE:
        raise _fail(spec="CONSUMER_MAX_PENDING_ACK_POLICY")
    if cfg.idle_heartbeat and 0 < cfg.idle_heartbeat < _MIN_HEARTBEAT:
        raise _fail(spec="CONSUMER_SMALL_HEARTBEAT")


def _check_pull(cfg: ConsumerConfig, stream: StreamConfig | None) -> None:
    if (cfg.ack_policy is AckPolicy.NONE and stream is not None
            and stream.retention is RetentionPolicy.WORK_QUEUE):
        raise _fail(spec="CONSUMER_PULL_REQUIRES_ACK")
    if cfg.rate_limit_bps > 0:
        raise _fail(spec="CONSUMER_PULL_WITH_RATE_LIMIT")
    if cfg.max_waiting is not None and cfg.max_waiting < 0:
        raise _fail(spec="CONSUMER_MAX_WAITING_NEGATIVE")
    if cfg.idle_heartbeat:
        raise _fail(spec="CONSUMER_HB_REQUIRES_PUSH")
    if cfg.flow_control:
        raise _fail(spec="CONSUMER_FC_REQUIRES_PUSH")
    if cfg.max_request_batch < 0:
        raise _fail(spec="CONSUMER_MAX_REQUEST_BATCH_NEGATIVE")
    if 0 < cfg.max_request_expires < _MIN_REQUEST_EXPIRES:
        raise _fail(spec="CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL")


def _check_filters(cfg: ConsumerConfig, stream: StreamConfig | None, strict: bool) -> None:
    if cfg.filter_subject and cfg.filter_subjects:
        raise _fail(spec="CONSUMER_DUPLICATE_FILTERS")
    for f in cfg.filter_subjects:
        if not f:
            raise _fail(spec="CONSUMER_EMPTY_FILTER")
    filters = cfg.filters
    for i, f in enumerate(filters):
        if not is_valid_filter(f):
            raise _fail(f"invalid consumer filter subject {f!r}: use '.'-separated tokens, "
                        "'*' for one token and '>' (last) for the rest")
        for other in filters[i + 1:]:
            if is_subset(f, other) or is_subset(other, f):
                raise _fail(f"consumer subject filters cannot overlap: {f!r} and {other!r}",
                            spec="CONSUMER_OVERLAPPING_FILTERS")
        if strict and stream is not None and stream.subjects:
            if not any(_collide(f, s) for s in stream.subjects):
                raise _fail(f"consumer filter subject {f!r} is not a valid subset of the "
                            f"stream subjects {list(stream.subjects)}",
                            spec="CONSUMER_FILTER_NOT_SUBSET")


def _check_start(cfg: ConsumerConfig) -> None:
    policy = cfg.deliver_policy
    seq = cfg.opt_start_seq or 0
    when = cfg.opt_start_time
    label = policy.value.replace("_", " ")

    def bad_start(start: str) -> InvalidConfigError:
        return _fail(f"consumer delivery policy is deliver {label}, but optional start {start} "
                     "is also set: drop it or change deliver_policy",
                     spec="CONSUMER_INVALID_POLICY")

    def not_set(what: str) -> InvalidConfigError:
        return _fail(f"consumer delivery policy is deliver {label}, but optional {what} is "
                     "not set", spec="CONSUMER_INVALID_POLICY")

    if policy is DeliverPolicy.BY_START_SEQUENCE:
        if seq <= 0:
            raise not_set("start sequence (opt_start_seq)")
        if when is not None:
            raise bad_start("time (opt_start_time)")
        return
    if policy is DeliverPolicy.BY_START_TIME:
        if when is None:
            raise not_set("start time (opt_start_time)")
        if seq:
            raise bad_start("sequence (opt_start_seq)")
        return
    if seq > 0:
        raise bad_start("sequence (opt_start_seq)")
    if when is not None:
        raise bad_start("time (opt_start_time)")
    if policy is DeliverPolicy.LAST_PER_SUBJECT and not cfg.filters:
        raise not_set("filter subject")


def _check_priority(cfg: ConsumerConfig) -> None:
    if cfg.priority_policy is not PriorityPolicy.NONE:
        if cfg.is_push:
            raise _fail(spec="CONSUMER_PUSH_WITH_PRIORITY_GROUP")
        if not cfg.priority_groups:
            raise _fail(spec="CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP")
        for group in cfg.priority_groups:
            if not group:
                raise _fail(spec="CONSUMER_EMPTY_GROUP_NAME")
            if not _GROUP_NAME.match(group):
                raise _fail(spec="CONSUMER_INVALID_GROUP_NAME")
        return
    if cfg.priority_groups:
        raise _fail(spec="CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE")
    if cfg.priority_timeout and cfg.priority_timeout > 0:
        raise _fail(spec="CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY")


def _check_work_queue(cfg: ConsumerConfig, existing: Iterable[ConsumerConfig]) -> None:
    if cfg.ack_policy is not AckPolicy.EXPLICIT:
        raise _fail(spec="CONSUMER_WQ_REQUIRES_EXPLICIT_ACK")
    if cfg.deliver_policy is not DeliverPolicy.ALL:
        raise _fail(spec="CONSUMER_WQ_NOT_DELIVER_ALL")
    me = cfg.consumer_name
    others = [o for o in existing if me is None or o.consumer_name != me]
    if not others:
        return
    mine = cfg.filters
    if not mine:
        raise _fail(spec="CONSUMER_WQ_MULTIPLE_UNFILTERED")
    for other in others:
        theirs = other.filters
        if not theirs or any(_collide(a, b) for a in mine for b in theirs):
            raise _fail(f"filtered consumer not unique on workqueue stream: {list(mine)} "
                        f"overlaps consumer {other.consumer_name!r} ({list(theirs) or 'all'})",
                        spec="CONSUMER_WQ_NOT_UNIQUE")


def validate_consumer_update(
    old: ConsumerConfig,
    new: ConsumerConfig,
    stream_config: StreamConfig | None = None,
    *,
    existing: Iterable[ConsumerConfig] = (),
) -> ConsumerConfig:
    """Check ``new`` as an update of the consumer created with ``old``; returns it normalised.

    Fixed after creation (10012): names, deliver_policy, opt_start_seq/time, ack_policy,
    replay_policy, idle_heartbeat, flow_control, mem_storage, max_waiting, and switching
    between push and pull. Everything else (ack_wait, max_deliver, backoff, filters,
    max_ack_pending, rate limit, description, metadata, ...) may change.
    """
    cfg = validate_consumer_config(new, stream_config, existing=existing)
    old = consumer_defaults(old, stream_config)
    if cfg == old:
        return cfg
    if old.consumer_name and cfg.consumer_name and old.consumer_name != cfg.consumer_name:
        raise _fail(f"the consumer name can not be updated (from {old.consumer_name!r} to "
                    f"{cfg.consumer_name!r}): that would be another consumer",
                    spec="CONSUMER_CREATE")
    if old.is_pull and cfg.is_push:
        raise _fail("can not update a pull consumer to push based", spec="CONSUMER_CREATE")
    if old.is_push and cfg.is_pull:
        raise _fail("can not update a push consumer to pull based", spec="CONSUMER_CREATE")
    for field in CONSUMER_FIXED:
        if field in ("durable_name", "name"):
            continue  # compared as one name above (a durable's name is its durable_name)
        before, after = getattr(old, field), getattr(cfg, field)
        if field == "opt_start_seq":
            before, after = before or 0, after or 0
        if before != after:
            raise _fail(f"{field.replace('_', ' ')} can not be updated (from {_show(before)} "
                        f"to {_show(after)}): create a new consumer instead",
                        spec="CONSUMER_CREATE")
    return cfg


def _show(value: object) -> str:
    return repr(getattr(value, "value", value))
