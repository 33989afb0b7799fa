"""The catalogue: which streams and consumers exist, their configs, where replicas live.

The meta group replicates it with raft. As everywhere in rayjet, checks are made once on the
meta leader (``prepare_*``, which raises the NATS-coded error or returns a :class:`MetaOp`),
and every member applies the committed ops in log order (``apply``), deterministically.
Each stream and consumer incarnation gets a raft group name derived from the log index of
the op that created it, so a deleted and re-created stream never reuses old replica state.
Within a group, replica ids (``r0``, ``r1``...) come from a counter kept in the assignment
and never go back: a replica added after a shrink gets an id no earlier replica had, so a
message or a cached handle meant for a removed replica can never reach its successor.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import msgpack

from rayjet.api.account import NO_LIMITS, AccountLimits, within_ack_pending
from rayjet.api.account_names import account_of
from rayjet.api.consumer import ConsumerConfig
from rayjet.api.enums import StorageType
from rayjet.api.stream import (
    DEDICATED_HOSTING,
    StreamConfig,
    validate_stream_config,
    validate_stream_update,
)
from rayjet.api.validate_consumer import validate_consumer_config, validate_consumer_update
from rayjet.errors import (
    BadRequestError,
    ConsumerNotFoundError,
    MaximumConsumersError,
    StreamNameInUseError,
    StreamNotFoundError,
    SubjectsOverlapError,
    error_for,
)
from rayjet.subjects import subjects_collide

# a replica set: (replica id, Ray node id) pairs; replica ids are the raft node ids of the group
Peers = tuple[tuple[str, str], ...]


def as_peers(pairs) -> Peers:
    return tuple((str(rid), str(node)) for rid, node in pairs)


def replica_number(rid: str) -> int | None:
    """The number of a replica id ``r<n>`` (None for any other form)."""
    if len(rid) > 1 and rid[0] == "r" and rid[1:].isdigit():
        return int(rid[1:])
    return None


def next_replica_after(ids) -> int:
    """The first replica number after every ``r<n>`` in ``ids`` (0 when there is none)."""
    numbers = [n for n in (replica_number(rid) for rid in ids) if n is not None]
    return max(numbers) + 1 if numbers else 0


# op kinds: the numbers are on disk in every meta log; only add new ones at the end
(ADD_STREAM, UPDATE_STREAM, DELETE_STREAM, ADD_CONSUMER, DELETE_CONSUMER, SET_PEERS,
 RESERVE_REPLICAS, SET_LIMITS) = range(1, 9)
_OP_VERSION = 1


@dataclass(frozen=True, slots=True)
class MetaOp:
    kind: int
    stream: str
    config: dict[str, Any] | None = None  # NATS JSON of the config
    consumer: str = ""
    peers: Peers = ()
    created_ns: int = 0
    count: int = 0  # RESERVE_REPLICAS: how many fresh replica ids


def encode_meta_op(op: MetaOp) -> bytes:
    row = [_OP_VERSION, op.kind, op.stream, op.config, op.consumer,
           [list(p) for p in op.peers], op.created_ns]
    if op.count:
        row.append(op.count)  # only ops that use it carry it: older entries stay as they were
    return msgpack.packb(row, use_bin_type=True)


def decode_meta_op(raw: bytes) -> MetaOp:
    version, kind, stream, config, consumer, peers, created, *rest = msgpack.unpackb(
        raw, raw=False)
    if version != _OP_VERSION:
        raise BadRequestError(f"meta op version {version} is newer than this rayjet understands")
    return MetaOp(kind, stream, config, consumer, as_peers(peers), created,
                  int(rest[0]) if rest else 0)


@dataclass(frozen=True, slots=True)
class ConsumerAssignment:
    stream: str
    name: str
    config: ConsumerConfig
    created_ns: int
    group: str
    peers: Peers


@dataclass(frozen=True, slots=True)
class StreamAssignment:
    config: StreamConfig
    created_ns: int
    group: str  # raft group of the replicas, unique per incarnation
    peers: Peers  # (replica id, Ray node id), leader preference first
    consumers: dict[str, ConsumerAssignment] = field(default_factory=dict)
    # the replica ids the group was created with: every replica, even one added later or
    # rebuilt on an empty disk, bootstraps from this same first membership
    bootstrap: tuple[str, ...] = ()
    # the number of the next replica id to hand out (``r<next_replica>``): it only grows, so
    # ids are never reused within the group
    next_replica: int = 0

    @property
    def name(self) -> str:
        return self.config.name

    def fresh_ids(self, count: int) -> tuple[str, ...]:
        """The ``count`` ids a reservation made now would give (see RESERVE_REPLICAS)."""
        start = max(self.next_replica,
                    next_replica_after([*self.bootstrap, *(r for r, _ in self.peers)]))
        return tuple(f"r{n}" for n in range(start, start + count))


# names of deleted streams remembered for changes_since beyond one per live stream
TOMBSTONES = 1000


class Catalogue:
    def __init__(self, *, limits: AccountLimits = NO_LIMITS) -> None:
        self.streams: dict[str, StreamAssignment] = {}
        self.applied_index = 0
        self.limits = limits
        # stream name -> index of the op that last changed it (deleted ones too), oldest
        # first; complete for every op after ``tracked_from`` (see changes_since)
        self.changed: dict[str, int] = {}
        self.tracked_from = 0

    def changes_since(self, since: int) -> tuple[list[StreamAssignment], list[str]] | None:
        """The streams made or changed by ops after index ``since`` and the names of those
        deleted since; None when this catalogue cannot tell (``since`` is older than what
        it tracks: it was restored from a snapshot, or forgot old deletions), and the
        caller takes every stream instead. Costs what changed, not the catalogue's size."""
        if since < self.tracked_from:
            return None
        changed, removed = [], []
        for name, index in reversed(self.changed.items()):  # newest first
            if index <= since:
                break
            sa = self.streams.get(name)
            if sa is None:
                removed.append(name)
            else:
                changed.append(sa)
        return changed, removed

    def _note_change(self, index: int, name: str) -> None:
        self.changed.pop(name, None)
        self.changed[name] = index
        excess = len(self.changed) - len(self.streams) - TOMBSTONES
        if excess > 0:  # forget the oldest entries: asked about before them, answer None
            for old in list(self.changed)[:excess]:
                self.tracked_from = max(self.tracked_from, self.changed.pop(old))

    # -- reads ------------------------------------------------------------------------------
    def stream(self, name: str) -> StreamAssignment:
        try:
            return self.streams[name]
        except KeyError:
            raise StreamNotFoundError(f"stream {name!r} not found") from None

    def consumer(self, stream: str, name: str) -> ConsumerAssignment:
        try:
            return self.stream(stream).consumers[name]
        except KeyError:
            raise ConsumerNotFoundError(
                f"consumer {name!r} not found on stream {stream!r}") from None

    def stream_for_subject(self, subject: str) -> StreamAssignment | None:
        for sa in self.streams.values():
            if any(subjects_collide(subject, s) for s in sa.config.subjects):
                return sa
        return None

    # -- leader-side checks -----------------------------------------------------------------
    def prepare_add_stream(self, cfg: StreamConfig, *, peers: Peers, now_ns: int,
                           default_hosting: str | None = None) -> MetaOp | StreamAssignment:
        """The op creating ``cfg``, or the existing assignment when the same config exists.
        ``hosting`` unset: the existing stream's, else ``default_hosting``."""
        cfg = validate_stream_config(cfg)
        existing = self.streams.get(cfg.name)
        cfg = resolve_hosting(cfg, existing.config.hosting if existing is not None
                              else default_hosting)
        if existing is not None:
            if existing.config == cfg:
                return existing  # adding an identical stream again succeeds, as in NATS
            raise StreamNameInUseError(
                f"stream name {cfg.name!r} already in use with a different configuration")
        if 0 <= self.limits.max_streams <= len(self.streams):
            raise error_for("MAX_STREAMS")
        self._check_limits(cfg)
        self._check_overlap(cfg)
        self._check_cycles(cfg)
        if len(peers) != cfg.num_replicas:
            raise error_for("CLUSTER_NO_PEERS",
                            err=f"need {cfg.num_replicas} replicas, placement gave {len(peers)}")
        return MetaOp(ADD_STREAM, cfg.name, cfg.to_dict(), peers=as_peers(peers),
                      created_ns=now_ns)

    def prepare_update_stream(self, cfg: StreamConfig, *,
                              peers: Peers | None = None) -> MetaOp:
        old = self.stream(cfg.name)
        new = validate_stream_update(old.config, resolve_hosting(cfg, old.config.hosting))
        self._check_limits(new, ignore=new.name)
        self._check_overlap(new, ignore=new.name)
        self._check_cycles(new)
        peers = old.peers if peers is None else as_peers(peers)
        if len(peers) != new.num_replicas:
            raise error_for("CLUSTER_NO_PEERS",
                            err=f"need {new.num_replicas} replicas, placement gave {len(peers)}")
        return MetaOp(UPDATE_STREAM, new.name, new.to_dict(), peers=peers)

    def prepare_reserve_replicas(self, name: str, count: int) -> MetaOp:
        """The op handing out ``count`` fresh replica ids for a stream about to grow; its
        apply returns them. Committing it before any replica is created means a meta leader
        that dies in the middle of a change can never have its successor reuse an id."""
        self.stream(name)
        if count < 1:
            raise BadRequestError(f"reserve at least one replica id, not {count}")
        return MetaOp(RESERVE_REPLICAS, name, count=count)

    def prepare_delete_stream(self, name: str) -> MetaOp:
        self.stream(name)
        return MetaOp(DELETE_STREAM, name)

    def prepare_add_consumer(self, stream: str, cfg: ConsumerConfig, *, now_ns: int,
                             peers: Peers | None = None, elsewhere: int = 0
                             ) -> MetaOp | ConsumerAssignment:
        """``elsewhere``: the stream's consumers outside the catalogue (the ephemeral ones its
        leader runs), which count for ``max_consumers`` too."""
        sa = self.stream(stream)
        others = [c.config for n, c in sa.consumers.items() if n != _consumer_name(cfg)]
        unset_ack_pending = not cfg.max_ack_pending
        cfg = validate_consumer_config(cfg, sa.config, existing=others)
        cfg = within_ack_pending(cfg, self.limits, unset_ack_pending)
        name = _consumer_name(cfg)
        if not name:
            raise error_for("CONSUMER_DURABLE_NAME_NOT_SET")
        existing = sa.consumers.get(name)
        if existing is not None:
            if existing.config == cfg:
                return existing
            cfg = validate_consumer_update(existing.config, cfg, sa.config, existing=others)
        else:
            limit = sa.config.max_consumers
            if 0 < limit <= len(sa.consumers) + elsewhere:
                raise MaximumConsumersError(
                    f"maximum consumers limit reached: stream {stream!r} allows {limit}")
            total = sum(len(other.consumers) for other in self.streams.values()) + elsewhere
            if 0 <= self.limits.max_consumers <= total:
                raise MaximumConsumersError(
                    f"maximum consumers limit reached: the account allows "
                    f"{self.limits.max_consumers}")
        use = as_peers(peers) if peers is not None else (
            existing.peers if existing else sa.peers)
        return MetaOp(ADD_CONSUMER, stream, cfg.to_dict(), consumer=name, peers=use,
                      created_ns=existing.created_ns if existing else now_ns)

    def prepare_set_limits(self, limits: AccountLimits) -> MetaOp:
        """The op that makes ``limits`` the account's (checked on what is created or changed
        from then on; what exists stays)."""
        return MetaOp(SET_LIMITS, "", limits.to_dict())

    def _check_limits(self, cfg: StreamConfig, ignore: str | None = None) -> None:
        """nats-server's account checks of a stream's ``max_bytes``: required, within the
        per-stream cap of its storage type, and its reservation (``max_bytes`` times the
        replicas) within what the streams of that type may reserve together."""
        limits = self.limits
        if limits.max_bytes_required and cfg.max_bytes <= 0:
            raise error_for("STREAM_MAX_BYTES_REQUIRED")
        memory = cfg.storage == StorageType.MEMORY
        cap = limits.memory_max_stream_bytes if memory else limits.storage_max_stream_bytes
        if cap >= 0 and cfg.max_bytes > cap:
            raise error_for("STREAM_MAX_STREAM_BYTES_EXCEEDED")
        total = limits.max_memory if memory else limits.max_storage
        if total < 0 or cfg.max_bytes <= 0:
            return
        reserved = sum(sa.config.max_bytes * sa.config.num_replicas
                       for sa in self.streams.values()
                       if sa.name != ignore and sa.config.max_bytes > 0
                       and (sa.config.storage == StorageType.MEMORY) == memory)
        if reserved + cfg.max_bytes * cfg.num_replicas > total:
            raise error_for("MEMORY_RESOURCES_EXCEEDED" if memory
                            else "STORAGE_RESOURCES_EXCEEDED")

    def prepare_delete_consumer(self, stream: str, name: str) -> MetaOp:
        self.consumer(stream, name)
        return MetaOp(DELETE_CONSUMER, stream, consumer=name)

    def _check_cycles(self, cfg: StreamConfig) -> None:
        """A stream may not (transitively) mirror or source itself: 10052 naming the loop."""

        def origins(c: StreamConfig) -> list[str]:
            srcs = ([c.mirror] if c.mirror is not None else []) + list(c.sources or ())
            return [s.name for s in srcs if s.external is None or not s.external.api]

        configs = {name: sa.config for name, sa in self.streams.items()}
        configs[cfg.name] = cfg
        path = [cfg.name]
        seen: set[str] = set()

        def visit(name: str) -> list[str] | None:
            for nxt in origins(configs[name]):
                if nxt == cfg.name:
                    return [*path, nxt]
                if nxt in seen or nxt not in configs:
                    continue
                seen.add(nxt)
                path.append(nxt)
                found = visit(nxt)
                if found:
                    return found
                path.pop()
            return None

        loop = visit(cfg.name)
        if loop:
            raise error_for("STREAM_INVALID_CONFIG",
                            err=f"stream {cfg.name!r} would mirror or source itself: "
                                f"{' -> '.join(loop)} (remove one of these origins)")

    def _check_overlap(self, cfg: StreamConfig, ignore: str | None = None) -> None:
        account = account_of(cfg.name)  # accounts' subjects are their own
        for other in self.streams.values():
            if other.name == ignore or account_of(other.name) != account:
                continue
            for mine in cfg.subjects:
                for theirs in other.config.subjects:
                    if subjects_collide(mine, theirs):
                        raise SubjectsOverlapError(
                            f"subjects overlap with an existing stream: {mine!r} of "
                            f"{cfg.name!r} and {theirs!r} of {other.name!r}")

    # -- apply on every member --------------------------------------------------------------
    def apply(self, index: int, op: MetaOp) -> StreamAssignment | ConsumerAssignment | None:
        """Apply a committed op. Ops made stale by an earlier op in the log (e.g. two adds
        of the same name proposed concurrently) are skipped the same way everywhere."""
        self.applied_index = index
        if op.kind == SET_LIMITS:
            self.limits = AccountLimits.from_dict(op.config or {})
            return self.limits
        result = self._apply_to_stream(index, op)
        if result is not None:
            self._note_change(index, op.stream)
        return result

    def _apply_to_stream(self, index: int, op: MetaOp
                         ) -> StreamAssignment | ConsumerAssignment | tuple[str, ...] | None:
        if op.kind == ADD_STREAM:
            if op.stream in self.streams:
                return self.streams[op.stream]
            sa = StreamAssignment(StreamConfig.from_dict(op.config), op.created_ns,
                                  f"{op.stream}-{index}", op.peers,
                                  bootstrap=tuple(rid for rid, _ in op.peers),
                                  next_replica=next_replica_after(r for r, _ in op.peers))
            self.streams[op.stream] = sa
            return sa
        sa = self.streams.get(op.stream)
        if sa is None:
            return None
        if op.kind == UPDATE_STREAM:
            new = dataclasses.replace(sa, config=StreamConfig.from_dict(op.config), peers=op.peers,
                                      next_replica=_advance(sa, op.peers))
            self.streams[op.stream] = new
            return new
        if op.kind == SET_PEERS:
            new = dataclasses.replace(sa, peers=op.peers, next_replica=_advance(sa, op.peers))
            self.streams[op.stream] = new
            return new
        if op.kind == RESERVE_REPLICAS:
            ids = sa.fresh_ids(op.count)
            self.streams[op.stream] = dataclasses.replace(
                sa, next_replica=next_replica_after(ids))
            return ids
        if op.kind == DELETE_STREAM:
            return self.streams.pop(op.stream)
        if op.kind == ADD_CONSUMER:
            old = sa.consumers.get(op.consumer)
            ca = ConsumerAssignment(op.stream, op.consumer, ConsumerConfig.from_dict(op.config),
                                    op.created_ns, old.group if old else f"{op.stream}-{op.consumer}-{index}",
                                    op.peers)
            sa.consumers[op.consumer] = ca
            return ca
        if op.kind == DELETE_CONSUMER:
            return sa.consumers.pop(op.consumer, None)
        raise BadRequestError(f"unknown meta op kind {op.kind}")

    # -- snapshots --------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        rows = []
        for sa in self.streams.values():
            rows.append([sa.config.to_dict(), sa.created_ns, sa.group, [list(p) for p in sa.peers],
                         [[c.name, c.config.to_dict(), c.created_ns, c.group,
                           [list(p) for p in c.peers]]
                          for c in sa.consumers.values()], list(sa.bootstrap),
                         sa.next_replica])
        return msgpack.packb([_OP_VERSION, self.applied_index, rows, self.limits.to_dict()],
                             use_bin_type=True)

    def restore(self, raw: bytes) -> None:
        _version, applied, rows, *rest = msgpack.unpackb(raw, raw=False)
        # a snapshot written before account limits existed has none
        self.limits = AccountLimits.from_dict(rest[0]) if rest else NO_LIMITS
        streams: dict[str, StreamAssignment] = {}
        for cfg, created, group, peers, consumers, boot, *rest in rows:
            config = StreamConfig.from_dict(cfg)
            peers = as_peers(peers)
            # a snapshot written before the counter existed derives it from the ids it has
            nxt = int(rest[0]) if rest else next_replica_after([*boot, *(r for r, _ in peers)])
            sa = StreamAssignment(config, created, group, peers, bootstrap=tuple(boot),
                                  next_replica=nxt)
            for name, ccfg, ccreated, cgroup, cpeers in consumers:
                sa.consumers[name] = ConsumerAssignment(
                    config.name, name, ConsumerConfig.from_dict(ccfg), ccreated, cgroup,
                    as_peers(cpeers))
            streams[config.name] = sa
        self.streams = streams
        self.applied_index = applied
        self.changed, self.tracked_from = {}, applied  # what the snapshot hides is unknown

    def digest(self) -> str:
        """A digest of what the catalogue holds, equal on members that hold the same
        (whether they applied the ops or restored a snapshot: dict order does not count)."""
        rows = msgpack.unpackb(self.snapshot(), raw=False)[2]
        for row in rows:
            row[4].sort(key=lambda c: c[0])  # consumers by name
        rows.sort(key=lambda row: row[2])  # streams by group
        doc = json.dumps([rows, self.limits.to_dict()], sort_keys=True, default=str)
        return hashlib.sha256(doc.encode()).hexdigest()[:16]


def _advance(sa: StreamAssignment, peers: Peers) -> int:
    return max(sa.next_replica, next_replica_after(r for r, _ in peers))


def resolve_hosting(cfg: StreamConfig, default: str | None) -> StreamConfig:
    """``cfg`` with its hosting settled: unset takes ``default``; dedicated is stored unset
    (the stream's JSON then reads as nats-server's)."""
    hosting = cfg.hosting or default
    if hosting == DEDICATED_HOSTING:
        hosting = None
    return cfg if hosting == cfg.hosting else dataclasses.replace(cfg, hosting=hosting)


def _consumer_name(cfg: ConsumerConfig) -> str:
    return cfg.durable_name or cfg.name or ""
