"""String enums whose values are the NATS wire strings."""

from __future__ import annotations

from enum import StrEnum


class _WireEnum(StrEnum):
    @classmethod
    def parse(cls, value: object, *, field: str):
        """Accept a member or its wire string; anything else is a typed config error."""
        from rayjet.errors import InvalidConfigError

        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in cls)
            raise InvalidConfigError(
                f"invalid {field} {value!r}: use one of {allowed}") from None


class StorageType(_WireEnum):
    FILE = "file"
    MEMORY = "memory"


class RetentionPolicy(_WireEnum):
    LIMITS = "limits"
    INTEREST = "interest"
    WORK_QUEUE = "workqueue"


class DiscardPolicy(_WireEnum):
    OLD = "old"
    NEW = "new"


class StoreCompression(_WireEnum):
    NONE = "none"
    S2 = "s2"


class PersistMode(_WireEnum):
    DEFAULT = "default"
    ASYNC = "async"


class AckPolicy(_WireEnum):
    NONE = "none"
    ALL = "all"
    EXPLICIT = "explicit"


class DeliverPolicy(_WireEnum):
    ALL = "all"
    LAST = "last"
    NEW = "new"
    BY_START_SEQUENCE = "by_start_sequence"
    BY_START_TIME = "by_start_time"
    LAST_PER_SUBJECT = "last_per_subject"


class ReplayPolicy(_WireEnum):
    INSTANT = "instant"
    ORIGINAL = "original"


class KeyValueOp(_WireEnum):
    """The KV-Operation header values (absent means PUT)."""

    PUT = "PUT"
    DELETE = "DEL"
    PURGE = "PURGE"


class PriorityPolicy(_WireEnum):
    """How a pull consumer with priority groups picks the requests it serves."""

    NONE = "none"
    OVERFLOW = "overflow"
    PINNED_CLIENT = "pinned_client"
    PRIORITIZED = "prioritized"
