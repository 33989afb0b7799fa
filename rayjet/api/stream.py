"""Stream configuration types (NATS ``StreamConfig`` and its parts).

Python names follow nats-py; wire names are the nats-server JSON tags. Durations are float
seconds, timestamps aware datetimes. Constructor defaults are the values nats-server stores
for an unset field, except those that depend on other fields (``subjects``,
``duplicate_window``): :meth:`StreamConfig.with_defaults` fills those in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rayjet.api.base import (
    DURATION,
    ENUM,
    MAP,
    OBJ,
    OBJS,
    STRS,
    TIME,
    FrozenDict,
    Wire,
    wire_field,
)
from rayjet.api.enums import (
    DiscardPolicy,
    PersistMode,
    RetentionPolicy,
    StorageType,
    StoreCompression,
)

DEFAULT_DUPLICATE_WINDOW = 120.0  # seconds (nats-server StreamDefaultDuplicatesWindow)
MAX_REPLICAS = 5
MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
DEDICATED_HOSTING = "dedicated"  # rayjet: an actor per replica
SHARED_HOSTING = "shared"  # rayjet: replicas in shared host actors
HOSTING_KINDS = (DEDICATED_HOSTING, SHARED_HOSTING)


@dataclass(frozen=True)
class Placement(Wire):
    """Where replicas go: a cluster name and/or tags every chosen node must carry."""

    cluster: str | None = None
    tags: tuple[str, ...] = wire_field((), kind=STRS)
    preferred: str | None = None

    def is_empty(self) -> bool:
        return not self.cluster and not self.tags and not self.preferred


@dataclass(frozen=True)
class ExternalStream(Wire):
    """A source or mirror origin reached through another API prefix (account or domain)."""

    api: str = ""
    deliver: str | None = None


@dataclass(frozen=True)
class SubjectTransformConfig(Wire):
    """A subject transform as configured: messages matching ``src`` are renamed to ``dest``.

    Exported as ``rayjet.SubjectTransform`` too (the name NATS clients use); the engine's
    transformer that applies it lives in :mod:`rayjet.subjects`.
    """

    src: str = ""
    dest: str = ""


@dataclass(frozen=True)
class RePublish(Wire):
    """Republish each stored message matching ``src`` to ``dest`` (a transform destination)."""

    src: str | None = None
    dest: str = ""
    headers_only: bool = False


@dataclass(frozen=True)
class StreamSource(Wire):
    """An origin stream for a mirror or a source."""

    name: str = ""
    opt_start_seq: int | None = None
    opt_start_time: datetime | None = wire_field(None, kind=TIME)
    filter_subject: str | None = None
    subject_transforms: tuple[SubjectTransformConfig, ...] = wire_field(
        (), kind=OBJS, type_=SubjectTransformConfig)
    external: ExternalStream | None = wire_field(None, kind=OBJ, type_=ExternalStream)

    def identity(self) -> str:
        """What makes two sources the same (nats-server refuses duplicates)."""
        parts = [self.name]
        if self.external is not None:
            parts.append("api=" + self.external.api)
        if self.subject_transforms:
            parts += [f"{t.src or '>'}->{t.dest or '>'}" for t in self.subject_transforms]
        else:
            parts.append(f"{self.filter_subject or '>'}->>")
        return "|".join(parts)


@dataclass(frozen=True)
class StreamConsumerLimits(Wire):
    """Defaults (and ceilings) for consumers of the stream."""

    inactive_threshold: float | None = wire_field(None, kind=DURATION)
    max_ack_pending: int | None = None


@dataclass(frozen=True)
class StreamConfig(Wire):
    """A stream's configuration; see the seed table of stream fields for each meaning."""

    name: str = ""
    description: str | None = None
    subjects: tuple[str, ...] = wire_field((), kind=STRS)
    retention: RetentionPolicy = wire_field(
        RetentionPolicy.LIMITS, kind=ENUM, type_=RetentionPolicy)
    max_consumers: int = -1
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: float = wire_field(0.0, kind=DURATION)
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: DiscardPolicy = wire_field(DiscardPolicy.OLD, kind=ENUM, type_=DiscardPolicy)
    discard_new_per_subject: bool = False
    storage: StorageType = wire_field(StorageType.FILE, kind=ENUM, type_=StorageType)
    num_replicas: int = 1
    no_ack: bool = False
    # None (or 0) means "nats-server's default": 2 min, or max_age when that is smaller
    duplicate_window: float | None = wire_field(None, kind=DURATION)
    placement: Placement | None = wire_field(None, kind=OBJ, type_=Placement)
    mirror: StreamSource | None = wire_field(None, kind=OBJ, type_=StreamSource)
    sources: tuple[StreamSource, ...] = wire_field((), kind=OBJS, type_=StreamSource)
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    allow_direct: bool = False
    mirror_direct: bool = False
    republish: RePublish | None = wire_field(None, kind=OBJ, type_=RePublish)
    subject_transform: SubjectTransformConfig | None = wire_field(
        None, kind=OBJ, type_=SubjectTransformConfig)
    compression: StoreCompression = wire_field(
        StoreCompression.NONE, kind=ENUM, type_=StoreCompression)
    first_seq: int = 0
    metadata: FrozenDict = wire_field(kind=MAP, default_factory=FrozenDict)
    consumer_limits: StreamConsumerLimits | None = wire_field(
        None, kind=OBJ, type_=StreamConsumerLimits)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: float = wire_field(0.0, kind=DURATION)
    allow_msg_counter: bool = False
    allow_atomic_publish: bool = wire_field(False, wire="allow_atomic")
    allow_msg_schedules: bool = False
    allow_batched: bool = False  # fast batch publish (nats-server 2.14+)
    persist_mode: PersistMode = wire_field(PersistMode.DEFAULT, kind=ENUM, type_=PersistMode)
    # rayjet extension (nats-server sets it per server): seconds between fsyncs of this
    # stream's log and store, or "always" to fsync before acknowledging; None = 2 minutes
    sync_interval: float | str | None = None
    # rayjet extension: "dedicated" (None too) runs each replica in an actor of its own,
    # "shared" in a replica host actor with other small assets (see actors.host)
    hosting: str | None = None

    @property
    def shared_hosting(self) -> bool:
        return self.hosting == SHARED_HOSTING

    # nats-py spells these differently
    @property
    def allow_rollup(self) -> bool:
        return self.allow_rollup_hdrs

    @property
    def allow_atomic(self) -> bool:
        return self.allow_atomic_publish

    @property
    def replicas(self) -> int:
        return self.num_replicas

    @property
    def is_mirror(self) -> bool:
        return self.mirror is not None

    def with_defaults(self) -> StreamConfig:
        """The config with the defaults nats-server fills in at create (no checks)."""
        return stream_defaults(self)

    def validate(self) -> StreamConfig:
        """Checked and normalised (see :func:`rayjet.api.validate_stream_config`)."""
        from rayjet.api.validate_stream import validate_stream_config

        return validate_stream_config(self)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        # nats-server leaves the default persist mode out of its JSON
        if self.persist_mode is PersistMode.DEFAULT:
            out.pop("persist_mode", None)
        return out


def stream_defaults(cfg: StreamConfig) -> StreamConfig:
    """Apply nats-server's create-time defaults without validating anything.

    Zero or below -1 limits become -1, replicas 0 become 1, subjects default to the name
    (plain streams only), the duplicate window to 2 min capped by ``max_age`` (plain
    streams only), an empty placement is dropped.
    """
    changes: dict[str, Any] = {}
    for name in ("max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size",
                 "max_consumers"):
        value = getattr(cfg, name)
        if value == 0 or value < -1:
            changes[name] = -1
    if cfg.num_replicas == 0:
        changes["num_replicas"] = 1
    plain = cfg.mirror is None and not cfg.sources
    if not cfg.subjects and plain and cfg.name:
        changes["subjects"] = (cfg.name,)
    if not cfg.duplicate_window:
        window = 0.0
        if plain:
            window = DEFAULT_DUPLICATE_WINDOW
            if cfg.max_age and 0 < cfg.max_age < window:
                window = cfg.max_age
        changes["duplicate_window"] = window
    if cfg.placement is not None and cfg.placement.is_empty():
        changes["placement"] = None
    if cfg.republish is not None and not cfg.republish.src:
        changes["republish"] = dataclasses.replace(cfg.republish, src=">")
    return dataclasses.replace(cfg, **changes) if changes else cfg
