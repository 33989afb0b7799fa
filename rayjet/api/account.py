"""JetStream account limits: what nats-server's account ``jetstream`` block sets, here one
set for the whole cluster (rayjet has a single account)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

from rayjet.api.base import Wire
from rayjet.api.consumer import ConsumerConfig
from rayjet.api.enums import AckPolicy
from rayjet.errors import BadRequestError, error_for


@dataclass(frozen=True)
class AccountLimits(Wire):
    """-1: no limit. ``max_memory``/``max_storage`` bound the bytes the streams of each
    storage type may reserve (their ``max_bytes`` times their replicas);
    ``*_max_stream_bytes`` bound one stream's ``max_bytes``; ``max_bytes_required``: every
    stream must set ``max_bytes``; ``max_ack_pending`` caps (and, when unset, fills in) a
    consumer's ``max_ack_pending``."""

    max_memory: int = -1
    max_storage: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1
    memory_max_stream_bytes: int = -1
    storage_max_stream_bytes: int = -1
    max_bytes_required: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "max_bytes_required":
                if not isinstance(value, bool):
                    raise BadRequestError(f"max_bytes_required must be a bool, not {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise BadRequestError(f"{f.name} must be an int >= -1 (-1: no limit), "
                                      f"not {value!r}")


NO_LIMITS = AccountLimits()


def within_ack_pending(cfg: ConsumerConfig, limits: AccountLimits,
                       unset: bool) -> ConsumerConfig:
    """A validated consumer config under the account's ``max_ack_pending``: a default above
    it (``unset``: the client gave none) comes down to it, an asked value above it is
    refused (10121), as nats-server does (-1, unlimited, is above any cap)."""
    cap = limits.max_ack_pending
    if cap < 0 or cfg.ack_policy == AckPolicy.NONE:
        return cfg
    if cfg.max_ack_pending is None or cfg.max_ack_pending < 0 or cfg.max_ack_pending > cap:
        if unset:
            return dataclasses.replace(cfg, max_ack_pending=cap)
        raise error_for("CONSUMER_MAX_PENDING_ACK_EXCESS", limit=cap)
    return cfg


__all__ = ["NO_LIMITS", "AccountLimits", "within_ack_pending"]
