"""The source pump: a mirror's or sourcing stream's leader copies its origins.

While a replica is the writable leader of a stream with a mirror or sources, one asyncio task
per origin runs in the replica actor: it finds the origin's replicas through the meta group
(``stream_assignment``), reads after the position the stream has replicated for that origin
with ``read_range`` on any origin replica (big batches, following ``next``), and proposes one
:class:`~rayjet.engine.ops.SourceOp` per batch through the stream's own raft group, waiting
for it to apply before reading on. The position moves only with the messages it covers, in
the same op, so a new leader (or a replica restarted from disk) continues exactly where the
copy stopped, and an origin that is down or unreachable is caught up once it is back: reads
fail over to the origin's other replicas, then retry with backoff (store and forward).

A re-created origin (another identity) restarts a source from the beginning, as nats-server
does; a mirror keeps its position (its sequence numbers are the origin's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

import ray

from rayjet.actors.host import find_replica
from rayjet.actors.names import (
    META_MEMBERS,
    NAMESPACE,
    meta_actor_name,
    meta_member_id,
    stream_actor_name,
)
from rayjet.actors.router import unwrap
from rayjet.api.info import StreamSourceInfo
from rayjet.engine import ApplyResult, StreamEngine
from rayjet.engine import sourcing as SRC
from rayjet.errors import APIError, NotLeaderError, ServiceUnavailableError
from rayjet.replication import ReplicaGroup

log = logging.getLogger(__name__)

BATCH_MSGS = 5_000
BATCH_BYTES = 8 << 20
IDLE = 0.2  # seconds between polls of an origin that has nothing new
BACKOFF_MIN, BACKOFF_MAX = 0.1, 2.0
CALL_TIMEOUT = 5.0
REFRESH_EVERY = 5.0  # seconds between looks at the origin's assignment (moves, re-creation)
_END = 1 << 62


@dataclass
class _Origin:
    """What the pump knows about one origin (memory only: the position is engine state)."""

    assignment: dict[str, Any] | None = None
    refreshed: float = 0.0
    ident: str = ""
    replicas: list[str] | None = None
    turn: int = 0
    origin_last: int = 0  # the origin's last seq at the last read
    last_contact: int = 0  # ns
    error: APIError | None = None


def _as_api_error(exc: BaseException) -> APIError:
    exc = unwrap(exc)
    if isinstance(exc, APIError):
        return exc
    return ServiceUnavailableError(f"origin unreachable: {type(exc).__name__}: {exc}")


async def _call(handle: Any, method: str, *args: Any, timeout: float = CALL_TIMEOUT,
                **kwargs: Any) -> Any:
    try:
        return await asyncio.wait_for(getattr(handle, method).remote(*args, **kwargs), timeout)
    except TimeoutError:
        raise ServiceUnavailableError(f"no answer to {method} within {timeout:.1f}s") from None
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - Ray wraps the actor's error
        raise _as_api_error(exc) from None


class SourcingReplica(Protocol):
    """What the pump uses of the stream replica it runs in
    (:class:`~rayjet.actors.stream.StreamReplica`); named here so this module need not
    import the replica that starts it."""

    group_name: str

    @property
    def engine(self) -> StreamEngine: ...

    @property
    def group(self) -> ReplicaGroup: ...

    async def propose_ops(self, ops: list, timeout: float) -> list[ApplyResult]: ...


class SourcePump:
    def __init__(self, replica: SourcingReplica) -> None:
        self.replica = replica
        self._tasks: dict[str, asyncio.Task] = {}
        self._state: dict[str, _Origin] = {}
        self._meta_leader: str | None = None
        self.leading = False  # whether the last update() saw a writable leader

    # -- lifecycle --------------------------------------------------------------------------
    def _writable(self) -> bool:
        r = self.replica
        return r.group.is_leader and r.engine.is_leader

    def update(self) -> None:
        """Start the copies a writable leader needs and stop the others (call on leadership
        and configuration changes)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self.leading = self._writable()
        wanted = {o.key: o for o in SRC.origins(self.replica.engine.config)} \
            if self.leading else {}
        for key in [k for k in self._tasks if k not in wanted or self._tasks[k].done()]:
            self._tasks.pop(key).cancel()
        for key, origin in wanted.items():
            if key not in self._tasks:
                self._state.setdefault(key, _Origin())
                self._tasks[key] = loop.create_task(self._run(origin))
        for key in [k for k in self._state if k not in wanted]:
            self._state.pop(key, None)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    # -- info -------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """``mirror`` / ``sources`` of StreamInfo: lag, seconds since the origin answered."""
        engine = self.replica.engine
        out: dict[str, Any] = {"mirror": None, "sources": []}
        now = time.time_ns()
        for origin in SRC.origins(engine.config):
            st = self._state.get(origin.key) or _Origin()
            pos = engine.sources.position(origin.key)
            err = None
            if st.error is not None:
                err = {"code": st.error.code, "err_code": st.error.err_code,
                       "description": st.error.description}
            src = origin.source
            info = StreamSourceInfo(
                name=src.name, external=src.external, lag=max(0, st.origin_last - pos),
                active=(now - st.last_contact) / 1e9 if st.last_contact else -1.0,
                error=err, filter_subject=src.filter_subject,
                subject_transforms=src.subject_transforms)
            if origin.mirror:
                out["mirror"] = info
            else:
                out["sources"].append(info)
        return out

    # -- the copy loop ----------------------------------------------------------------------
    async def _run(self, origin: SRC.Origin) -> None:
        backoff = BACKOFF_MIN
        st = self._state.setdefault(origin.key, _Origin())
        while True:
            try:
                more = await self._step(origin, st)
                st.error = None
                backoff = BACKOFF_MIN
                if not more:
                    await asyncio.sleep(IDLE)
            except asyncio.CancelledError:
                raise
            except NotLeaderError:
                if not self._writable():
                    return  # update() starts a new copy when we lead again
                await asyncio.sleep(backoff)
            except Exception as exc:  # noqa: BLE001 - keep copying whatever happened
                st.error = _as_api_error(exc)
                st.assignment = None  # look the origin up again
                log.debug("source %s of %s: %s", origin.name, self.replica.engine.name, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    async def _meta(self, method: str, *args: Any) -> Any:
        ids = [meta_member_id(i) for i in range(META_MEMBERS)]
        if self._meta_leader in ids:
            ids.remove(self._meta_leader)
            ids.insert(0, self._meta_leader)
        last: APIError | None = None
        for mid in ids:
            try:
                handle = await asyncio.to_thread(ray.get_actor, meta_actor_name(mid),
                                                 namespace=NAMESPACE)
                out = await _call(handle, method, *args)
                self._meta_leader = mid
                return out
            except NotLeaderError as err:
                last = err
                hint = err.fields.get("leader")
                if hint in ids:
                    self._meta_leader = hint
            except ValueError as err:  # no such actor (yet)
                last = ServiceUnavailableError(str(err))
            except ServiceUnavailableError as err:
                last = err
            except APIError as err:
                if err.err_code == 10059:  # stream not found: a real answer
                    raise
                last = err
        raise last or ServiceUnavailableError("the meta group has no leader")

    async def _lookup(self, origin: SRC.Origin, st: _Origin) -> None:
        now = time.monotonic()
        if st.assignment is not None and now - st.refreshed < REFRESH_EVERY:
            return
        sa = await self._meta("stream_assignment", origin.name)
        st.assignment, st.refreshed = sa, now
        st.ident = SRC.identity(sa.get("created_ns", 0), sa["group"])
        st.replicas = [rid for rid, _node in sa["peers"]]

    async def _read(self, origin: SRC.Origin, st: _Origin, start: int) -> dict[str, Any]:
        """One batch from any origin replica, trying the others when one fails."""
        assert st.assignment is not None and st.replicas
        group = st.assignment["group"]
        last: Exception | None = None
        for i in range(len(st.replicas)):
            rid = st.replicas[(st.turn + i) % len(st.replicas)]
            try:
                handle = await asyncio.to_thread(find_replica, stream_actor_name(group, rid))
                out = await _call(handle, "read_range", start, _END, filter=origin.read_filter,
                                  max_msgs=BATCH_MSGS, max_bytes=BATCH_BYTES)
                st.turn = (st.turn + i) % len(st.replicas)
                return out
            except (APIError, ValueError) as err:
                last = err
        st.turn += 1
        raise last or ServiceUnavailableError(f"stream {origin.name!r} has no replicas")

    async def _step(self, origin: SRC.Origin, st: _Origin) -> bool:
        """Copy one batch; True when there may be more right away."""
        if not self._writable():
            raise NotLeaderError(group=self.replica.group_name)
        await self._lookup(origin, st)
        engine = self.replica.engine
        pos = engine.sources.position(origin.key)
        recorded = engine.sources.ident(origin.key)
        if (not origin.mirror and origin.key in engine.sources and recorded
                and recorded != st.ident):
            log.warning("source %s of %s was re-created: copying it again from the start",
                        origin.name, engine.name)
            await self._propose(SRC.reset_op(origin, pos, st.ident))
            return True
        start = pos + 1
        if pos == 0 and origin.source.opt_start_seq:
            start = origin.source.opt_start_seq
        batch = await self._read(origin, st, start)
        st.last_contact = time.time_ns()
        last = int(batch.get("last") or 0)
        seqs = batch["seq"]
        st.origin_last = max(last, seqs[-1] if seqs else 0)
        more = bool(batch["next"])
        upto = seqs[-1] if more and seqs else max(last, seqs[-1] if seqs else 0, start - 1)
        if pos == 0 and origin.source.opt_start_time is not None and not origin.source.opt_start_seq:
            # a first copy by start time: messages older than it only move the position
            cutoff = int(origin.source.opt_start_time.timestamp() * 1e9)
            keep = [i for i, ts in enumerate(batch["ts"]) if ts >= cutoff]
            batch = {k: ([v[i] for i in keep] if isinstance(v, list) else v)
                     for k, v in batch.items()}
            seqs = batch["seq"]
        # re-read the engine: the position may have moved while we awaited the read
        engine = self.replica.engine
        if not self._writable() or engine.sources.position(origin.key) != pos:
            return True
        if not seqs and upto <= pos:
            return False
        msgs = list(zip(seqs, batch["subject"], batch["hdr"], batch["data"], batch["ts"],
                        strict=True))
        if origin.mirror:
            op, err = SRC.prepare_mirror(engine, origin, pos, upto, st.ident, msgs), None
        else:
            op, err = SRC.prepare_sources(engine, origin, pos, upto, st.ident, msgs)
        if op is not None:
            await self._propose(op)
        if err is not None:
            raise err
        return more

    async def _propose(self, op) -> None:
        (res,) = await self.replica.propose_ops([op], CALL_TIMEOUT * 2)
        if not res.ok:
            raise res.error or ServiceUnavailableError("source op rejected")


__all__ = ["SourcePump"]
