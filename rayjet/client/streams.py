"""The stream half of the client API: manage streams, read and delete messages."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import ray

from rayjet.actors.host import stream_infos_by_host
from rayjet.actors.router import GroupRouter, stream_router
from rayjet.api import RawStreamMsg, StorageType, StreamConfig, StreamInfo
from rayjet.api.account import AccountLimits
from rayjet.api.stream import SHARED_HOSTING
from rayjet.client.stream_link import StreamLink
from rayjet.client.stream_list import StreamListCopy, capturing, listed_names
from rayjet.errors import (
    APIError,
    BadRequestError,
    NotFoundError,
    NotLeaderError,
    ServiceUnavailableError,
    StreamNotFoundError,
    TimeoutError,
)

LISTED_KEPT = 10_000  # StreamInfos kept for listings to reuse (see _listed_info; ~10 KB each)
INFO_THREADS = 16  # stream infos asked at once (each mostly waits on its replica)
PARSED_CONFIGS = 4096  # stream configs kept parsed, by their JSON (a listing's are many)
_parsed: dict[str, StreamConfig] = {}


def _parsed_config(raw: dict[str, Any]) -> StreamConfig:
    """``StreamConfig.from_dict(raw)``, parsed once per distinct config: a listing of
    hundreds of streams would otherwise spend most of its time rebuilding the same ones
    (StreamConfig is immutable, so one object serves every info that has that config)."""
    key = json.dumps(raw, sort_keys=True, default=str)
    config = _parsed.get(key)
    if config is None:
        if len(_parsed) >= PARSED_CONFIGS:
            _parsed.clear()
        config = _parsed[key] = StreamConfig.from_dict(raw)
    return config


def _config(config: StreamConfig | dict | None, params: dict[str, Any]) -> StreamConfig:
    if config is None:
        return StreamConfig(**params)
    if isinstance(config, dict):
        config = StreamConfig.from_dict(config)
    if not isinstance(config, StreamConfig):
        raise BadRequestError(f"pass a StreamConfig (or its fields), not {type(config).__name__}")
    return dataclasses.replace(config, **params) if params else config


def _stream_info(raw: dict[str, Any], assignment: dict[str, Any]) -> StreamInfo:
    state = dict(raw["state"])
    # the catalogue's consumers, and the ephemeral ones the leader runs (its own count)
    state["consumer_count"] = len(assignment.get("consumers", ())) + state.get(
        "consumer_count", 0)
    created = assignment.get("created_ns") or raw.get("created_ns") or 0
    cluster = dict(raw.get("cluster") or {})
    return StreamInfo(
        config=_parsed_config(raw["config"]), state=state,
        created=datetime.fromtimestamp(created / 1e9, tz=UTC) if created else None,
        cluster=cluster or None, timestamp=datetime.now(tz=UTC),
        mirror=raw.get("mirror"), sources=tuple(raw.get("sources") or ()))


class StreamHandle:
    """One stream's replicas as this client routes to them (``js.stream_handle(name)``),
    for the client's own helpers that work beside a stream's leader: Spark and Ray Data
    read tasks placed on its node, object-ref tasks, republish pollers. The catalogue's
    entry is looked up once and kept until :meth:`forget`."""

    def __init__(self, js: StreamsAPI, name: str) -> None:
        self._js = js
        self.name = name

    @property
    def _routing(self) -> tuple[dict[str, Any], GroupRouter]:
        return self._js._stream(self.name)

    @property
    def group(self) -> str:
        """The replica group's name (the stream's name and the index of its creation):
        the prefix of its replicas' actor names."""
        return self._routing[0]["group"]

    @property
    def replicas(self) -> list[tuple[str, str]]:
        """``(replica id, Ray node id)`` of each replica, as the catalogue places them."""
        return [(rid, node) for rid, node in self._routing[0]["peers"]]

    @property
    def leader(self) -> str | None:
        """The replica id this client last saw leading (None: not known yet)."""
        return self._routing[1].leader

    def leader_node(self) -> str | None:
        """The Ray node of the leader as last seen, else of the first replica."""
        nodes = dict(self.replicas)
        rid = self.leader if self.leader in nodes else next(iter(sorted(nodes)), None)
        return nodes.get(rid) if rid is not None else None

    def leader_actor(self) -> Any:
        """The actor handle of the leader as last seen (else of the first replica), for
        calls the caller awaits itself (``.remote()``)."""
        router = self._routing[1]
        return router.handle(router.leader or sorted(router.names)[0])

    def call(self, method: str, *args: Any, timeout: float | None = None,
             **kwargs: Any) -> Any:
        """Call ``method`` on the leader, following leader changes (blocking)."""
        return self._js._stream_call(self.name, method, *args, timeout=timeout, **kwargs)

    def seq_for_time(self, ts_ns: int) -> int:
        """The first sequence stored at or after ``ts_ns`` (ns since the epoch)."""
        return int(self.call("reader_call", "seq_for_time", ts_ns))

    def leader_moved(self, hint: str | None) -> None:
        """A replica said it does not lead and named ``hint``: route there next."""
        router = self._routing[1]
        router.leader = hint if hint in router.names else None

    def forget(self) -> None:
        """The replica set may have changed: look the stream up again next time."""
        self._js._routers.pop(self.name, None)


class StreamsAPI:
    """Mixed into :class:`rayjet.client.JetStream`; needs ``_meta`` and ``timeout``."""

    _meta: GroupRouter
    timeout: float
    hosting: str | None  # connect(hosting=...): the default for new streams and buckets

    def _init_streams(self) -> None:
        self._routers: dict[str, tuple[dict[str, Any], GroupRouter]] = {}
        self._stream_list = StreamListCopy()
        # stream -> (assignment, leader's info answer, StreamInfo) of the last listing
        self._listed: dict[str, tuple[dict[str, Any], dict[str, Any], StreamInfo]] = {}

    def _assignments(self, subject: str | None = None) -> list[dict[str, Any]]:
        """Every stream's assignment (capturing ``subject``, when given), sorted by name,
        as current as the meta leader's catalogue: the copy is brought up to date by what
        changed since it was last (see :mod:`rayjet.client.stream_list`). Not to be
        changed: the copy's own dicts."""
        kept = self._stream_list
        return capturing(kept.update(self._meta_call("streams_since", kept.applied)), subject)

    def _meta_call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        self._check_open()
        return self._meta.call(method, *args, timeout=timeout or self.timeout)

    def _stream(self, name: str, refresh: bool = False) -> tuple[dict[str, Any], GroupRouter]:
        if not isinstance(name, str) or not name:
            raise BadRequestError(f"invalid stream name {name!r}")
        cached = self._routers.get(name)
        if cached is None or refresh:
            assignment = self._meta_call("stream_assignment", name)
            # a new router: a replica re-created under its name has a new actor, and the
            # old handle would fail the next write as if it had died during it
            router = stream_router(assignment)
            if cached is not None and cached[0]["group"] == assignment["group"]:
                router.leader = cached[1].leader
            cached = (assignment, router)
            self._routers[name] = cached
        return cached

    def _stream_call(self, name: str, method: str, *args: Any, timeout: float | None = None,
                     **kwargs: Any) -> Any:
        assignment, router = self._stream(name)
        try:
            return router.call(method, *args, timeout=timeout or self.timeout, **kwargs)
        except ServiceUnavailableError as err:
            self._routers.pop(name, None)
            try:  # replicas gone: was the stream deleted meanwhile (by another client)?
                self._meta_call("stream_assignment", name)
            except StreamNotFoundError as gone:
                raise gone from err
            except APIError:
                pass
            raise
        except Exception:
            # the replica set may have changed (scaled, moved, re-created): look again
            self._routers.pop(name, None)
            raise

    def stream_handle(self, name: str) -> StreamHandle:
        """The stream's replicas as this client routes to them (see :class:`StreamHandle`).
        Blocking on first use: it may ask the catalogue where they are."""
        self._check_open()
        self._stream(name)  # a missing stream raises here, not on first use
        return StreamHandle(self, name)

    def stream_link(self, name: str) -> StreamLink:
        """Raw access to one stream's leader for a protocol server that routes subjects
        itself (see :class:`~rayjet.client.stream_link.StreamLink`). Blocking: it may ask
        the catalogue where the stream's replicas are."""
        self._check_open()
        return StreamLink(name, self._stream(name, refresh=True)[1], self.timeout)

    # -- management -------------------------------------------------------------------------
    def add_stream(self, config: StreamConfig | dict | None = None, **params: Any) -> StreamInfo:
        """Create a stream (or find the same one). ``hosting`` unset: the connection's
        ``hosting``, else shared (its replicas run in each node's replica hosts, beside
        other streams', as one nats-server serves every stream)."""
        return self._add_stream(_config(config, params), self.hosting or SHARED_HOSTING)

    def _add_stream(self, cfg: StreamConfig, default_hosting: str) -> StreamInfo:
        added = self._meta_call("add_stream", cfg.to_dict(), default_hosting,
                                timeout=max(self.timeout, 60))
        assignment = added["assignment"]
        router = stream_router(assignment)
        router.leader = added["leader"]
        self._routers[cfg.name] = (assignment, router)
        if added["info"] is None:
            return self.stream_info(cfg.name)
        return _stream_info(added["info"], assignment)

    def update_stream(self, config: StreamConfig | dict | None = None, **params: Any
                      ) -> StreamInfo:
        cfg = _config(config, params)
        self._meta_call("update_stream", cfg.to_dict(), timeout=max(self.timeout, 120))
        self._routers.pop(cfg.name, None)
        self._forget_subjects(cfg.name)
        return self.stream_info(cfg.name)

    def delete_stream(self, name: str) -> bool:
        self._check_open()
        timeout = max(self.timeout, 60)
        try:
            result = self._meta.call("delete_stream", name, timeout=timeout,
                                     retry_unknown=False)
        except (ServiceUnavailableError, NotLeaderError) as err:
            if isinstance(err, NotLeaderError) and not err.fields.get("outcome_unknown"):
                raise
            # the first attempt may have deleted it before its answer was lost: a second
            # that finds the stream gone answers for it (not "stream not found")
            try:
                result = self._meta_call("delete_stream", name, timeout=timeout)
            except StreamNotFoundError:
                result = True
        self._routers.pop(name, None)
        self._forget_subjects(name)
        return bool(result)

    def subscribe_republished(self, subject: str = ">", streams: list[str] | None = None
                              ) -> Any:
        """Read what streams republish (their ``republish`` setting) on ``subject``, from
        now on, at most once, as a core NATS subscription would. ``streams`` defaults to
        every stream whose republish destination can match ``subject``. Returns a
        :class:`rayjet.client.republish.RepublishSubscription`."""
        from rayjet.client.republish import RepublishSubscription

        return RepublishSubscription(self, subject, streams)

    def stream_leader_stepdown(self, name: str) -> str | None:
        """Move the stream's leadership to another replica, as
        ``$JS.API.STREAM.LEADER.STEPDOWN`` does (before maintenance on the leader's node,
        say). Answers once the most caught-up other replica leads, with its id; None for an
        R1 stream, whose only replica keeps leading. Not retried: a second step-down would
        move the leadership again."""
        _, router = self._stream(name)
        new = self._stream_call(name, "step_down", retry_unknown=False)
        if new is not None:
            router.leader = new
        return new

    def stream_peer_remove(self, name: str, peer: str) -> StreamInfo:
        """Swap replica ``peer`` (an id such as ``"r1"``, as the stream's cluster info names
        its replicas) for a new one, as ``$JS.API.STREAM.PEER.REMOVE`` does: the new replica
        joins and catches up first, then ``peer`` leaves and its data is deleted; the stream
        keeps its replica count and every message. An APIError with err_code 10040 when
        ``peer`` is not one of its replicas."""
        if not isinstance(peer, str) or not peer:
            raise BadRequestError(f"peer must be a replica id such as 'r1', not {peer!r}")
        self._meta_call("remove_stream_peer", name, peer, timeout=max(self.timeout, 120))
        self._routers.pop(name, None)
        return self.stream_info(name)

    def meta_leader_stepdown(self) -> str | None:
        """Move the meta group's leadership to another member
        (``$JS.API.META.LEADER.STEPDOWN``); the new leader's id."""
        self._check_open()
        new = self._meta.call("step_down", timeout=self.timeout, retry_unknown=False)
        if new is not None:
            self._meta.leader = new
        return new

    def stream_replica_health(self, name: str, timeout: float = 5.0) -> dict[str, dict]:
        """Each replica of ``name`` as it sees itself (an operator's view: one call per
        replica): ``role``, ``applied``; ``damage`` (what it found damaged at its start and
        repaired or is repairing), ``rejoining`` (its log was lost: it catches up before it
        votes), ``copying`` (its store is being copied from a peer), ``failure`` (it stopped
        on a disk error); or ``error`` when it did not answer."""
        _, router = self._stream(name, refresh=True)
        refs, out = {}, {}
        for rid in sorted(router.names):
            try:
                refs[rid] = router.handle(rid).status.remote()
            except Exception as err:  # noqa: BLE001 - gone, restarting: say so
                out[rid] = {"error": f"{type(err).__name__}: {err}"}
        for rid, ref in refs.items():
            try:
                st = ray.get(ref, timeout=timeout)
            except Exception as err:  # noqa: BLE001 - does not answer: say so
                out[rid] = {"error": f"{type(err).__name__}"}
                continue
            out[rid] = {k: st.get(k) for k in ("role", "applied", "damage", "rejoining",
                                               "copying", "failure")}
        return out

    def stream_info(self, name: str, subjects_filter: str | None = None,
                    deleted_details: bool = False) -> StreamInfo:
        assignment, _ = self._stream(name, refresh=True)
        raw = self._stream_call(name, "info", subjects_filter, deleted_details)
        return _stream_info(raw, assignment)

    def streams_info(self, subject: str | None = None) -> list[StreamInfo]:
        infos = self.stream_infos(subject=subject)
        for info in infos.values():
            if isinstance(info, Exception):
                raise info
        return list(infos.values())

    def stream_infos(self, names: Iterable[str] | None = None, subject: str | None = None
                     ) -> dict[str, StreamInfo | APIError]:
        """The infos of many streams (``names``, default every stream whose subjects match
        ``subject``), their replicas asked side by side rather than one after another. A
        stream that is gone or has no leader maps to its error."""
        if names is not None:
            names = listed_names(names, "stream")
        assignments = {a["config"]["name"]: a for a in self._assignments(subject)}
        wanted = list(assignments) if names is None else names

        def one(name: str) -> StreamInfo | APIError:
            assignment = assignments.get(name)
            if assignment is None:
                return StreamNotFoundError(f"stream {name!r} not found")
            cached = self._routers.get(name)
            if cached is None or cached[0]["group"] != assignment["group"]:
                self._routers[name] = (assignment, stream_router(assignment))
            try:
                return self._listed_info(self._stream_call(name, "info", None, False),
                                         assignment)
            except APIError as err:
                return err

        if names is None and subject is None:  # every stream: forget deleted ones
            for gone in [n for n in list(self._listed) if n not in assignments]:
                self._listed.pop(gone, None)
        out = self._hosted_infos([n for n in wanted if n in assignments], assignments)
        rest = [n for n in wanted if n not in out]
        if len(rest) <= 1:
            out.update((name, one(name)) for name in rest)
        else:
            with ThreadPoolExecutor(min(INFO_THREADS, len(rest))) as pool:
                out.update(zip(rest, pool.map(one, rest), strict=True))
        return {name: out[name] for name in wanted}

    def _hosted_infos(self, names: list[str], assignments: dict[str, dict[str, Any]]
                      ) -> dict[str, StreamInfo]:
        """The infos of the streams among ``names`` whose replicas run in shared hosts, asked
        of each host at once (the replica known or first named as leader); what no host
        answered is left out."""
        leaders: dict[str, str] = {}  # replica actor name -> stream
        known: dict[str, str] = {}  # replica actor name -> its host, from the routers
        for name in names:
            assignment = assignments[name]
            if assignment["config"].get("hosting") != SHARED_HOSTING:
                continue
            cached = self._routers.get(name)
            router = cached[1] if cached and cached[0]["group"] == assignment["group"] \
                else stream_router(assignment)
            rid = router.leader or assignment["peers"][0][0]
            replica = router.names[rid]
            leaders[replica] = name
            host = router.host_of(rid)
            if host is not None:
                known[replica] = host
        if len(leaders) <= 1:
            return {}
        infos = stream_infos_by_host(list(leaders), known)
        return {leaders[replica]: self._listed_info(info, assignments[leaders[replica]])
                for replica, info in infos.items()}

    def _listed_info(self, raw: dict[str, Any], assignment: dict[str, Any]) -> StreamInfo:
        """:func:`_stream_info` for a listing: a stream whose leader answered what it
        answered last time (and whose catalogue entry is the same) gives the StreamInfo
        built then, stamped with this moment: building hundreds of them again was most of
        a listing's time. Each is an immutable copy, so a caller keeps what it got."""
        name = assignment["config"]["name"]
        kept = self._listed.get(name)
        if kept is not None and kept[0] is assignment and kept[1] == raw:
            info = copy.copy(kept[2])
            object.__setattr__(info, "timestamp", datetime.now(tz=UTC))
            return info
        info = _stream_info(raw, assignment)
        if len(self._listed) >= LISTED_KEPT:
            self._listed.clear()
        self._listed[name] = (assignment, raw, info)
        return info

    # -- the account ------------------------------------------------------------------------
    def account_limits(self) -> AccountLimits:
        """The account's JetStream limits (``AccountLimits``; -1: none)."""
        return AccountLimits.from_dict(self._meta_call("limits"))

    def set_account_limits(self, limits: AccountLimits | None = None,
                           **params: Any) -> AccountLimits:
        """Set the account's JetStream limits, as nats-server's account ``jetstream`` block
        does: ``limits``, or fields of AccountLimits (``max_streams=10``...). They apply to
        what is created or changed from then on; ``AccountLimits()`` lifts them."""
        if limits is None:
            limits = AccountLimits(**params)
        elif params:
            limits = dataclasses.replace(limits, **params)
        if not isinstance(limits, AccountLimits):
            raise BadRequestError(f"limits must be an AccountLimits, not {limits!r}")
        return AccountLimits.from_dict(self._meta_call("set_limits", limits.to_dict()))

    def account_info(self) -> dict[str, Any]:
        """What the account uses and may use: ``memory`` and ``storage`` (bytes of the
        streams of each storage type), ``reserved_memory`` and ``reserved_storage`` (their
        ``max_bytes`` times replicas, where set), ``streams``, ``consumers`` and
        ``limits``."""
        used = {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0}
        consumers = 0
        infos = self.streams_info()
        for info in infos:
            kind = "memory" if info.config.storage == StorageType.MEMORY else "storage"
            used[kind] += info.state.bytes
            if info.config.max_bytes > 0:  # what the account limits count against it
                used["reserved_" + kind] += info.config.max_bytes * info.config.num_replicas
            consumers += info.state.consumer_count
        return {**used, "streams": len(infos), "consumers": consumers,
                "limits": self.account_limits()}

    def stream_names(self, subject: str | None = None) -> list[str]:
        return [a["config"]["name"] for a in self._assignments(subject)]

    def stream_configs(self, subject: str | None = None, *, linearizable: bool = True
                       ) -> list[StreamConfig]:
        """Every stream's configuration, from the catalogue (one call, no replica asked).
        ``linearizable=False`` takes the meta leader's catalogue as it stands, which may
        miss a change of the last moment but leaves an idle meta group quiet (a poller)."""
        assignments = (self._assignments(subject) if linearizable
                       else self._meta_call("list_streams", subject, linearizable))
        return [_parsed_config(a["config"]) for a in assignments]

    async def watch_stream_configs(self, since: int, timeout: float, *,
                                   linearizable: bool = False
                                   ) -> tuple[int, list[StreamConfig] | None]:
        """``(applied, configs)``: every stream's configuration once the catalogue has moved
        past applied index ``since``, a long poll that answers ``(since, None)`` after
        ``timeout`` seconds without a change (``since=-1``: at once). For followers of the
        catalogue, which then neither poll nor wake an idle meta group. A coroutine: it
        waits in the caller's event loop, not in a thread."""
        self._check_watch(since, timeout)
        self._check_open()
        got = await self._meta.acall("watch_streams", since, timeout, linearizable,
                                     timeout=timeout + self.timeout)
        streams = got["streams"]
        return got["applied"], (None if streams is None
                                else [StreamConfig.from_dict(a["config"]) for a in streams])

    async def watch_stream_changes(self, since: int, timeout: float, *,
                                   linearizable: bool = False
                                   ) -> tuple[int, list[StreamConfig] | None, list[str]]:
        """:meth:`watch_stream_configs` answering only what changed: ``(applied, configs,
        removed)`` where ``configs`` are the streams made or changed after ``since`` and
        ``removed`` the names deleted since; when the meta leader cannot tell (``since``
        -1, older than what it remembers, or from before a snapshot), ``configs`` is every
        stream and ``removed`` is None. ``(since, None, [])`` after ``timeout`` seconds
        without a change. ``linearizable``: confirmed by the meta group's quorum first."""
        self._check_watch(since, timeout)
        self._check_open()
        got = await self._meta.acall("watch_streams", since, timeout, linearizable, True,
                                     timeout=timeout + self.timeout)
        if "changed" in got:
            return (got["applied"], [StreamConfig.from_dict(a["config"]) for a in got["changed"]],
                    list(got["removed"]))
        streams = got["streams"]
        if streams is None:
            return got["applied"], None, []
        return got["applied"], [StreamConfig.from_dict(a["config"]) for a in streams], None

    @staticmethod
    def _check_watch(since: Any, timeout: Any) -> None:
        if type(since) is not int or since < -1:
            raise BadRequestError(f"since must be an applied index (-1 or more), not {since!r}")
        if not isinstance(timeout, int | float) or not 0 <= timeout <= 3600:
            raise BadRequestError(f"timeout must be 0..3600 seconds, not {timeout!r}")

    def find_stream_name_by_subject(self, subject: str) -> str:
        found = self._meta_call("lookup_subject", subject, self.account)
        if found is None:
            raise NotFoundError(f"no stream captures subject {subject!r}",
                                spec="STREAM_NOT_FOUND")
        return found["config"]["name"]

    # -- messages ---------------------------------------------------------------------------
    def purge_stream(self, name: str, subject: str | None = None, seq: int | None = None,
                     keep: int | None = None) -> int:
        return self._stream_call(name, "purge", subject, seq, keep, retry_unknown=False)

    def delete_msg(self, name: str, seq: int, erase: bool = False) -> bool:
        return self._stream_call(name, "delete_msg", seq, erase)

    def secure_delete_msg(self, name: str, seq: int) -> bool:
        return self.delete_msg(name, seq, erase=True)

    def get_msg(self, name: str, seq: int | None = None, *, last_by_subject: str | None = None,
                next_by_subject: str | None = None, direct: bool = False) -> RawStreamMsg:
        if seq is None and not last_by_subject and not next_by_subject:
            raise BadRequestError("get_msg needs seq, last_by_subject or next_by_subject")
        try:
            raw = self._stream_call(name, "get_msg", seq, last_by_subject, next_by_subject,
                                    direct, any_replica=direct)
        except (ServiceUnavailableError, TimeoutError, StreamNotFoundError) as first:
            if not direct:
                raise
            raw = self._mirror_direct_get(name, seq, last_by_subject, next_by_subject,
                                          failure=first)
        return RawStreamMsg(**raw)

    def _mirror_direct_get(self, origin: str, *args: Any, failure: Exception | None = None
                           ) -> dict[str, Any]:
        """A direct get the origin could not answer, served by one of its ``mirror_direct``
        mirrors (their copy may lag the origin; the answer names the mirror as its stream)."""
        err: Exception | None = None
        for a in self._assignments():
            cfg = a["config"]
            if not (cfg.get("mirror_direct") and (cfg.get("mirror") or {}).get("name") == origin):
                continue
            try:
                return self._stream_call(cfg["name"], "get_msg", *args, True, any_replica=True)
            except NotFoundError:
                raise
            except Exception as e:  # noqa: BLE001 - try the next mirror
                err = e
        if err is None:  # no mirror to ask: the origin's own answer stands
            raise failure or ServiceUnavailableError(
                f"stream {origin!r} is unreachable and has no mirror_direct mirror")
        raise err

    def get_last_msg(self, name: str, subject: str, direct: bool = False) -> RawStreamMsg:
        return self.get_msg(name, last_by_subject=subject, direct=direct)
