"""Stream configuration (NATS ``StreamConfig`` and its parts) and its checks.

Python names follow nats-py; wire names are the nats-server JSON tags. Durations are float
seconds, timestamps aware datetimes. Constructor defaults are the values nats-server stores
for an unset field, except those that depend on other fields (``subjects``,
``duplicate_window``): :meth:`StreamConfig.with_defaults` fills those in.

:func:`validate_stream_config` returns the normalised config (defaults filled in) or raises
``InvalidConfigError`` carrying the NATS ``err_code`` (10052 with a sentence saying what to
fix, or the specific row such as 10034 "mirror with subjects"). :func:`validate_stream_update`
adds the rules on what may change after creation (:data:`STREAM_EDITABLE`). The checks live
beside the types because :meth:`StreamConfig.validate` is one of them.

Checks that need the other streams of the account (subject overlap 10065, source cycles,
origin max_msg_size) belong to the catalogue that knows them, not here.
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
from rayjet.errors import APIError, InvalidConfigError
from rayjet.subjects import (
    is_subset,
    is_valid_filter,
    is_valid_subject,
    subjects_collide,
    validate_transforms,
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
        """Checked and normalised (see :func:`validate_stream_config`)."""
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


# What may change after creation (the seed table's "Editable" column, with nats-server's
# exact rules where the column says "partially").
YES = "yes"
NO = "no"
ONCE = "once"  # sealed: false -> true only, never on create
ENABLE_ONLY = "enable_only"  # false -> true only
REMOVE_ONLY = "remove_only"  # mirror: may be removed (promotes the mirror), never changed
PARTIAL = "partial"  # retention: limits <-> interest only

STREAM_EDITABLE: dict[str, str] = {
    "name": NO,
    "description": YES,
    "subjects": YES,
    "retention": PARTIAL,
    "max_consumers": NO,
    "max_msgs": YES,
    "max_bytes": YES,
    "max_age": YES,
    "max_msgs_per_subject": YES,
    "max_msg_size": YES,
    "discard": YES,
    "discard_new_per_subject": YES,
    "storage": NO,
    "num_replicas": YES,
    "no_ack": YES,
    "duplicate_window": YES,
    "placement": YES,
    "mirror": REMOVE_ONLY,
    "sources": YES,
    "sealed": ONCE,
    "deny_delete": NO,
    "deny_purge": NO,
    "allow_rollup_hdrs": YES,
    "allow_direct": YES,
    "mirror_direct": YES,
    "republish": YES,
    "subject_transform": YES,
    "compression": YES,
    "first_seq": NO,
    "metadata": YES,
    "consumer_limits": YES,
    "allow_msg_ttl": ENABLE_ONLY,
    "subject_delete_marker_ttl": YES,
    "allow_msg_counter": NO,
    "allow_atomic_publish": YES,
    "allow_msg_schedules": ENABLE_ONLY,
    "allow_batched": YES,
    "persist_mode": NO,
    "sync_interval": YES,
    "hosting": NO,
}

_INVALID_NAME_CHARS = frozenset(" \t\r\n\f.*>")
_PATH_SEPARATORS = frozenset("/\\")
_JS_API_PREFIX = "$JS.API"
_MIN_MAX_AGE = 0.1  # seconds
_MIN_DUPLICATE_WINDOW = 0.1
_MIN_MARKER_TTL = 1.0


def _fail(description: str | None = None, spec: str = "STREAM_INVALID_CONFIG",
          **fields: Any) -> InvalidConfigError:
    return InvalidConfigError(description, spec=spec, **fields)


def _as_config_error(err: APIError) -> InvalidConfigError:
    if isinstance(err, InvalidConfigError):
        return err
    return InvalidConfigError(err.description, spec=err.spec)


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a stream or consumer (None when it can)."""
    if not isinstance(name, str) or not name:
        return "a name is required"
    if any(ch in _INVALID_NAME_CHARS for ch in name) or any(ch in _PATH_SEPARATORS
                                                             for ch in name):
        return "a name can not contain whitespace, '.', '*', '>', '/' or '\\'"
    if not name.isprintable():
        return "a name can not contain non-printable characters"
    if len(name) > MAX_NAME_LEN:
        return f"a name is at most {MAX_NAME_LEN} characters"
    return None


def is_valid_name(name: object) -> bool:
    return name_problem(name) is None


def _metadata_len(metadata: dict[str, str]) -> int:
    return sum(len(k) + len(v) for k, v in metadata.items())


def check_stream_name(name: object) -> str:
    if isinstance(name, str) and any(ch in _PATH_SEPARATORS for ch in name):
        raise _fail(spec="STREAM_NAME_PATH_SEPARATORS")
    problem = name_problem(name)
    if problem:
        raise _fail(f"invalid stream name {name!r}: {problem}; use letters, digits, '-' or '_'")
    return name  # type: ignore[return-value]


def validate_stream_config(cfg: StreamConfig, *, create: bool = True) -> StreamConfig:
    """Check a stream config as nats-server does and return it normalised.

    ``create=False`` skips the checks that apply to creation only (a new stream can not be
    sealed; ``mirror_direct`` needs a mirror); :func:`validate_stream_update` uses it.
    """
    if not isinstance(cfg, StreamConfig):
        raise _fail(f"a StreamConfig is required, not {type(cfg).__name__}")
    check_stream_name(cfg.name)
    if create and cfg.sealed:
        raise _fail("a stream can not be created sealed: create it, then seal it with an update")
    if create and cfg.mirror_direct and cfg.mirror is None:
        raise _fail("stream has no mirror but does have mirror direct",
                    hint="set mirror, or drop mirror_direct")
    if cfg.description and len(cfg.description) > MAX_DESCRIPTION_LEN:
        raise _fail(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    if _metadata_len(cfg.metadata) > MAX_METADATA_LEN:
        raise _fail(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes: "
                    "store less in metadata")
    if cfg.num_replicas < 0:
        raise _fail(spec="REPLICAS_COUNT_NEGATIVE")
    if cfg.num_replicas > MAX_REPLICAS:
        raise _fail(f"num_replicas {cfg.num_replicas} is too many: maximum replicas is "
                    f"{MAX_REPLICAS}")
    if cfg.first_seq < 0:
        raise _fail("first_seq can not be negative: use 0 (start at 1) or a positive sequence")
    cfg = stream_defaults(cfg)
    _check_limits(cfg)
    cfg = _check_features(cfg)
    if cfg.mirror is not None:
        _check_mirror(cfg)
    if cfg.sources:
        _check_sources(cfg)
    _check_external(cfg)
    _check_subjects(cfg)
    if cfg.subject_transform is not None:
        try:
            validate_transforms([cfg.subject_transform], origin="stream")
        except APIError as err:
            raise _as_config_error(err) from None
    if cfg.republish is not None:
        cfg = _check_republish(cfg)
    if cfg.placement is not None and cfg.placement.preferred:
        raise _fail("preferred server not permitted in placement: drop placement.preferred")
    return cfg


def _check_limits(cfg: StreamConfig) -> None:
    if cfg.max_age < 0:
        raise _fail("max_age can not be negative: use 0 for no age limit")
    if 0 < cfg.max_age < _MIN_MAX_AGE:
        raise _fail(f"max_age {cfg.max_age}s is too small: it needs to be >= 100ms (or 0)")
    window = cfg.duplicate_window or 0.0
    if window < 0:
        raise _fail("duplicate_window can not be negative: use 0 for the default of 2 minutes")
    if cfg.max_age and window > cfg.max_age:
        raise _fail(f"duplicate_window ({window}s) can not be larger than max_age "
                    f"({cfg.max_age}s): shorten the window or raise max_age")
    if 0 < window < _MIN_DUPLICATE_WINDOW:
        raise _fail(f"duplicate_window {window}s is too small: it needs to be >= 100ms")


def _check_sync_interval(cfg: StreamConfig) -> None:
    si = cfg.sync_interval
    if si is None or si == "always":
        return
    if isinstance(si, bool) or not isinstance(si, int | float) or si < 0:
        raise _fail(f"sync_interval must be seconds >= 0 or 'always', not {si!r}")


def _check_hosting(cfg: StreamConfig) -> None:
    if cfg.hosting is not None and cfg.hosting not in HOSTING_KINDS:
        raise _fail(f"hosting must be one of {', '.join(HOSTING_KINDS)}, not {cfg.hosting!r}")


def _check_features(cfg: StreamConfig) -> StreamConfig:
    _check_sync_interval(cfg)
    _check_hosting(cfg)
    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise _fail("roll-ups require the purge permission: drop deny_purge or allow_rollup_hdrs")
    if cfg.allow_msg_counter:
        if cfg.discard is DiscardPolicy.NEW:
            raise _fail("a counter stream (allow_msg_counter) can not use discard new")
        if cfg.allow_msg_ttl:
            raise _fail("a counter stream (allow_msg_counter) can not use message TTLs")
        if cfg.allow_msg_schedules:
            raise _fail("a counter stream (allow_msg_counter) can not use message schedules")
        if cfg.retention is not RetentionPolicy.LIMITS:
            raise _fail("a counter stream (allow_msg_counter) can only use limits retention")
    if cfg.discard_new_per_subject:
        if cfg.discard is not DiscardPolicy.NEW:
            raise _fail("discard_new_per_subject requires discard=new: set discard=new")
        if cfg.max_msgs_per_subject <= 0:
            raise _fail("discard_new_per_subject requires max_msgs_per_subject > 0")
    changes: dict[str, Any] = {}
    marker = cfg.subject_delete_marker_ttl
    if marker < 0:
        raise _fail("subject_delete_marker_ttl can not be negative: use 0 to disable markers")
    if marker > 0:
        if marker < _MIN_MARKER_TTL:
            raise _fail("subject_delete_marker_ttl must be at least 1 second")
        # markers are TTL'd rollups: nats-server switches both on
        if not cfg.allow_msg_ttl:
            changes["allow_msg_ttl"] = True
        if not cfg.allow_rollup_hdrs:
            changes.update(allow_rollup_hdrs=True, deny_purge=False)
    if cfg.allow_msg_schedules:
        if cfg.discard is DiscardPolicy.NEW:
            raise _fail("message scheduling (allow_msg_schedules) can not use discard new")
        if not cfg.allow_rollup_hdrs:
            changes.update(allow_rollup_hdrs=True, deny_purge=False)
    if cfg.persist_mode is PersistMode.ASYNC:
        if cfg.storage is not StorageType.FILE:
            raise _fail("async persist mode is only supported on file storage")
        if cfg.num_replicas > 1:
            raise _fail("async persist mode is not supported on replicated streams: use "
                        "num_replicas=1 or the default persist mode")
        if cfg.allow_atomic_publish:
            raise _fail("async persist mode is not supported with atomic batch publish")
    return dataclasses.replace(cfg, **changes) if changes else cfg


def _check_origin_filter(src: StreamSource, what: str) -> None:
    if src.filter_subject and not is_valid_filter(src.filter_subject):
        raise _fail(f"{what} {src.name!r} has an invalid filter_subject "
                    f"{src.filter_subject!r}: give a valid subject filter")


def _check_mirror(cfg: StreamConfig) -> None:
    mirror = cfg.mirror
    assert mirror is not None
    if cfg.first_seq > 0:
        raise _fail(spec="MIRROR_WITH_FIRST_SEQ")
    if cfg.subjects:
        raise _fail(spec="MIRROR_WITH_SUBJECTS")
    if cfg.sources:
        raise _fail(spec="MIRROR_WITH_SOURCES")
    if cfg.allow_msg_counter:
        raise _fail(spec="MIRROR_WITH_COUNTERS")
    if cfg.allow_atomic_publish:
        raise _fail(spec="MIRROR_WITH_ATOMIC_PUBLISH")
    if cfg.allow_batched:
        raise _fail(spec="MIRROR_WITH_BATCH_PUBLISH")
    if cfg.allow_msg_schedules:
        raise _fail(spec="MIRROR_WITH_MSG_SCHEDULES")
    if mirror.filter_subject and mirror.subject_transforms:
        raise _fail(spec="MIRROR_MULTIPLE_FILTERS")
    if cfg.subject_delete_marker_ttl > 0:
        # markers would use up sequence numbers and the mirror would diverge from its origin
        raise _fail("subject delete markers are forbidden on mirrors: drop "
                    "subject_delete_marker_ttl")
    try:
        validate_transforms(mirror.subject_transforms, origin="mirror")
    except APIError as err:
        raise _as_config_error(err) from None
    if mirror.external is None and not is_valid_name(mirror.name):
        raise _fail(spec="MIRROR_INVALID_STREAM_NAME")
    _check_origin_filter(mirror, "mirror")


def _check_sources(cfg: StreamConfig) -> None:
    if cfg.allow_msg_schedules:
        raise _fail(spec="SOURCE_WITH_MSG_SCHEDULES")
    seen: set[str] = set()
    for src in cfg.sources:
        if not is_valid_name(src.name):
            raise _fail(spec="SOURCE_INVALID_STREAM_NAME")
        ident = src.identity()
        if ident in seen:
            raise _fail(f"duplicate source configuration detected: {src.name!r} is listed "
                        "twice with the same filter; list each source once",
                        spec="SOURCE_DUPLICATE")
        seen.add(ident)
        if src.filter_subject and src.subject_transforms:
            raise _fail(spec="SOURCE_MULTIPLE_FILTERS")
        try:
            validate_transforms(src.subject_transforms, origin="source")
        except APIError as err:
            raise _as_config_error(err) from None
        _check_origin_filter(src, "source")


def _check_external(cfg: StreamConfig) -> None:
    origins = ([cfg.mirror] if cfg.mirror is not None else []) + list(cfg.sources)
    for src in origins:
        ext = src.external
        if ext is None:
            continue
        if ext.deliver and not is_valid_subject(ext.deliver):
            raise _fail(spec="STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ", prefix=ext.deliver)
        if ext.api:
            if not is_valid_subject(ext.api):
                raise _fail(f"stream external api prefix {ext.api!r} must be a valid subject "
                            "without wildcards")
            if subjects_collide(ext.api, _JS_API_PREFIX):
                raise _fail(spec="STREAM_EXTERNAL_API_OVERLAP", prefix=ext.api,
                            subject=_JS_API_PREFIX)


def _check_subjects(cfg: StreamConfig) -> None:
    subjects = cfg.subjects
    for subj in subjects:
        if subjects.count(subj) > 1:
            raise _fail(f"duplicate subjects detected: {subj!r} is listed twice")
    for i, subj in enumerate(subjects):
        if not is_valid_filter(subj):
            raise _fail(f"invalid subject {subj!r}: subjects are '.'-separated tokens without "
                        "whitespace; '*' matches one token and '>' the rest (last only)")
        if subj == ">":
            if not cfg.no_ack:
                raise _fail("capturing all subjects ('>') requires no_ack=True")
            if cfg.num_replicas != 1:
                raise _fail("capturing all subjects ('>') requires num_replicas=1")
        if not cfg.no_ack:
            for space in ("$JS.>", "$JSC.>", "$NRG.>"):
                if subjects_collide(subj, space) and not is_subset(subj, "$JS.EVENT.>"):
                    raise _fail(f"subject {subj!r} overlaps with the JetStream API "
                                f"({space}): that requires no_ack=True")
            if subjects_collide(subj, "$SYS.>") and not is_subset(subj, "$SYS.ACCOUNT.>"):
                raise _fail(f"subject {subj!r} overlaps with the system API ($SYS.>): that "
                            "requires no_ack=True")
        for other in subjects[i + 1:]:
            if subjects_collide(subj, other):
                raise _fail(f"subject {subj!r} overlaps with {other!r}: a message would be "
                            "stored twice; keep one of them")


def _check_republish(cfg: StreamConfig) -> StreamConfig:
    rp = cfg.republish
    assert rp is not None
    src, dest = rp.src or ">", rp.dest
    if not dest:
        raise _fail("republish needs a destination: set republish.dest")
    # '>' -> '>' with a transform of the only stream subject republishes the transformed subject
    tr = cfg.subject_transform
    if (src == ">" and dest == ">" and tr is not None and len(cfg.subjects) == 1
            and tr.src == cfg.subjects[0]):
        src = dest = tr.dest
        cfg = dataclasses.replace(cfg, republish=dataclasses.replace(rp, src=src, dest=dest))
    for subj in cfg.subjects:
        if subjects_collide(dest, subj):
            raise _fail(f"republish destination {dest!r} forms a cycle with stream subject "
                        f"{subj!r}: republish to subjects the stream does not capture")
    if (src != ">" and cfg.subjects and tr is None
            and not any(subjects_collide(src, s) for s in cfg.subjects)):
        raise _fail(f"republish source {src!r} matches none of the stream subjects "
                    f"{list(cfg.subjects)}: use a subset of them, or leave it out for all")
    try:
        validate_transforms([(src, dest)], origin="stream")
    except APIError:
        raise _fail(f"stream configuration for republish with transform from {src!r} to "
                    f"{dest!r} not valid: fix the destination template") from None
    return cfg


def validate_stream_update(old: StreamConfig, new: StreamConfig) -> StreamConfig:
    """Check ``new`` as an update of the stream created with ``old``; returns it normalised.

    Besides every create-time rule: the name, storage, max_consumers, first_seq, deny_delete,
    deny_purge, allow_msg_counter and persist_mode are fixed; retention moves only between
    limits and interest; a sealed stream stays sealed; allow_msg_ttl and allow_msg_schedules
    can only be switched on; a mirror may be removed (promoting the stream) but not changed.
    Sealing also fixes max_age=0, discard=new, deny_delete, deny_purge and no roll-ups.
    """
    cfg = validate_stream_config(new, create=False)
    old = stream_defaults(old)
    if cfg.name != old.name:
        raise _fail(f"stream configuration name must match original: the stream is "
                    f"{old.name!r}, the update names {cfg.name!r}")

    def fixed(field: str, what: str) -> None:
        if getattr(cfg, field) != getattr(old, field):
            raise _fail(f"stream configuration update can not change {what} (from "
                        f"{_show(getattr(old, field))} to {_show(getattr(cfg, field))}): "
                        "create a new stream and copy the data with sources instead")

    fixed("storage", "storage type")
    if (cfg.hosting or DEDICATED_HOSTING) != (old.hosting or DEDICATED_HOSTING):
        raise _fail(f"stream configuration update can not change hosting (from "
                    f"{old.hosting or DEDICATED_HOSTING} to {cfg.hosting or DEDICATED_HOSTING})")
    if cfg.retention != old.retention and RetentionPolicy.WORK_QUEUE in (
            cfg.retention, old.retention):
        raise _fail("stream configuration update can not change retention policy to/from "
                    "workqueue (limits <-> interest is allowed)")
    if old.sealed and not cfg.sealed:
        raise _fail("stream configuration update can not unseal a sealed stream")
    if not old.sealed:  # a sealed stream has them on; the sealing rules below keep them
        fixed("deny_delete", "deny_delete")
        fixed("deny_purge", "deny_purge")
    if cfg.mirror is not None and cfg.mirror != old.mirror:
        raise _fail(spec="STREAM_MIRROR_NOT_UPDATABLE")
    if old.allow_msg_ttl and not cfg.allow_msg_ttl:
        raise _fail("message TTL status can not be disabled once allow_msg_ttl is set")
    fixed("allow_msg_counter", "message counter setting (allow_msg_counter)")
    if old.allow_msg_schedules and not cfg.allow_msg_schedules:
        raise _fail("message schedules can not be disabled once allow_msg_schedules is set")
    fixed("persist_mode", "persist mode")
    fixed("max_consumers", "max_consumers")
    fixed("first_seq", "first_seq")
    if cfg.sealed:
        cfg = dataclasses.replace(cfg, max_age=0.0, discard=DiscardPolicy.NEW, deny_delete=True,
                                  deny_purge=True, allow_rollup_hdrs=False)
    return cfg


def _show(value: object) -> str:
    return repr(getattr(value, "value", value))
