"""Finding leaders and calling actors with retries, from a client (driver or task)."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import ActorUnschedulableError, GetTimeoutError, RayActorError, RayTaskError

from rayjet.actors import data_plane, direct
from rayjet.actors.direct import NotDirect, RequestLost
from rayjet.actors.host import (
    HostedHandle,
    NotHostedError,
    find_replica,
    post_to_host,
)
from rayjet.actors.names import (
    META_MEMBERS,
    meta_actor_name,
    meta_member_id,
    stream_actor_name,
)
from rayjet.actors.replica_shell import awaited
from rayjet.actors.wire_values import META_REQUESTS, STREAM_REQUESTS
from rayjet.api.stream import SHARED_HOSTING
from rayjet.errors import APIError, NotLeaderError, ServiceUnavailableError, TimeoutError

RETRY_PAUSE = 0.05


def unwrap(exc: BaseException) -> BaseException:
    """The exception an actor raised, without Ray's task-error wrapper."""
    while isinstance(exc, RayTaskError) and exc.cause is not None:
        exc = exc.cause
    return exc


def given_up(ref: Any) -> None:
    """A call no longer waited for (it timed out): its late answer, perhaps an error such
    as "not the leader", is read and dropped, not reported by Ray as an unhandled error."""
    with contextlib.suppress(Exception):
        ref.future().add_done_callback(lambda done: done.exception())


def call(ref_fn: Callable[[], Any], timeout: float) -> Any:
    ref = ref_fn()
    try:
        return ray.get(ref, timeout=max(timeout, 0.001))
    except GetTimeoutError:
        given_up(ref)
        raise TimeoutError(f"no answer within {timeout:.1f}s") from None
    except RayTaskError as exc:
        raise unwrap(exc) from None


async def acall(ref: Any, timeout: float) -> Any:
    """Await one actor call's answer without blocking the event loop (see :func:`call`)."""
    try:
        return await asyncio.wait_for(awaited(ref), max(timeout, 0.001))
    except RayTaskError as exc:  # first: it may also be an instance of the cause's class
        raise unwrap(exc) from None
    except builtins.TimeoutError:
        given_up(ref)
        raise TimeoutError(f"no answer within {timeout:.1f}s") from None


class GroupRouter:
    """Calls the leader of a replica group, following leader hints and skipping dead actors."""

    def __init__(self, names: dict[str, str], what: str, *, hosted: bool = False,
                 direct_methods: frozenset[str] = frozenset(),
                 name_for: Callable[[str], str] | None = None) -> None:
        self.names = names  # replica id -> actor name
        # the actor name of a replica id a leader hint names that ``names`` lacks (one the
        # group gained after this router was made); None: such hints are not followed
        self.name_for = name_for
        self.what = what
        self.hosted = hosted  # the replicas run in shared hosts (see find_replica)
        self.leader: str | None = None
        self._handles: dict[str, Any] = {}
        # the methods tried over the data plane first (rayjet.actors.direct)
        self.direct_methods = direct_methods if direct.enabled() else frozenset()

    def _call_once(self, rid: str, method: str, args: tuple, kwargs: dict[str, Any],
                   wait: float) -> Any:
        if method in self.direct_methods:
            try:
                return direct.call(self.names[rid], method, args, kwargs, wait)
            except NotDirect:
                pass  # nothing ran: the actor call
        h = self.handle(rid)
        return call(lambda: getattr(h, method).remote(*args, **kwargs), wait)

    async def _acall_once(self, rid: str, method: str, args: tuple, kwargs: dict[str, Any],
                          wait: float) -> Any:
        if method in self.direct_methods:
            try:
                return await direct.acall(self.names[rid], method, args, kwargs, wait)
            except NotDirect:
                pass
        h = await self.ahandle(rid)
        return await acall(getattr(h, method).remote(*args, **kwargs), wait)

    def handle(self, rid: str) -> Any:
        h = self._handles.get(rid)
        if h is None:
            h = find_replica(self.names[rid], self.hosted)
            self._handles[rid] = h
        return h

    def host_of(self, rid: str) -> str | None:
        """The host actor that runs replica ``rid``, when a hosted handle to it is known."""
        handle = self._handles.get(rid)
        return handle.host_name if isinstance(handle, HostedHandle) else None

    def _order(self) -> list[str]:
        rids = sorted(self.names)
        if self.leader in self.names:
            rids.remove(self.leader)
            rids.insert(0, self.leader)
        return rids

    async def ahandle(self, rid: str) -> Any:
        """:meth:`handle` for async actors: the name lookup runs in a thread."""
        h = self._handles.get(rid)
        if h is None:
            h = await asyncio.to_thread(find_replica, self.names[rid], self.hosted)
            self._handles[rid] = h
        return h

    def _failed(self, rid: str, err: BaseException, retry_unknown: bool,
                attempt_timeout: float | None) -> bool:
        """One attempt on ``rid`` failed: raise when retrying is wrong; True to start the
        next round over the replicas (a leader hint), False to try the next replica."""
        if isinstance(err, TimeoutError):
            if attempt_timeout is None:
                raise err
            return False  # slow or dead: try the others, then this one again
        if isinstance(err, NotLeaderError):
            if err.fields.get("outcome_unknown") and not retry_unknown:
                raise err
            hint = err.fields.get("leader")
            if hint and hint not in self.names and self.name_for is not None:
                self.names[hint] = self.name_for(hint)  # a replica the group gained since
            if hint in self.names and hint != rid:
                self.leader = hint
                return True
            return hint == rid  # the leader is still catching up: ask it again shortly
        # a dead or restarting replica (or one whose host's node is gone, so the call never
        # ran): its handle may be stale
        self._handles.pop(rid, None)
        if isinstance(err, RayActorError | RequestLost) and not retry_unknown:
            raise ServiceUnavailableError(
                f"{self.what}: replica {rid} died during the call; the outcome "
                "is unknown (retry with a Nats-Msg-Id to make retries safe)") from None
        return False

    def _no_leader(self, timeout: float, last: BaseException | None) -> ServiceUnavailableError:
        detail = f" (last error: {last})" if last else ""
        return ServiceUnavailableError(
            f"{self.what} has no reachable leader within {timeout:.1f}s{detail}")

    def call(self, method: str, *args: Any, timeout: float = 10.0,
             retry_unknown: bool = True, any_replica: bool = False,
             attempt_timeout: float | None = None, **kwargs: Any) -> Any:
        """Call ``method`` on the leader (or, with ``any_replica``, on the first replica that
        answers). ``retry_unknown=False`` gives up, instead of retrying, when a write may or
        may not have happened (the leader died or stepped down after taking it).
        ``attempt_timeout`` (only for calls safe to repeat) bounds the wait on one replica
        before the others are tried. Blocks: from an async actor use :meth:`acall`."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while True:
            for rid in self._order():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                wait = remaining if attempt_timeout is None else min(remaining, attempt_timeout)
                try:
                    result = self._call_once(rid, method, args, kwargs, wait)
                    if not any_replica:
                        self.leader = rid
                    return result
                except (TimeoutError, NotLeaderError, RayActorError, ActorUnschedulableError,
                        ValueError, RequestLost) as err:
                    last = err
                    if self._failed(rid, err, retry_unknown, attempt_timeout):
                        break
            if time.monotonic() >= deadline:
                raise self._no_leader(timeout, last)
            time.sleep(RETRY_PAUSE)

    async def acall(self, method: str, *args: Any, timeout: float = 10.0,
                    retry_unknown: bool = True, any_replica: bool = False,
                    attempt_timeout: float | None = None, **kwargs: Any) -> Any:
        """:meth:`call` for async actors: awaits the answers, never blocks the event loop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: BaseException | None = None
        while True:
            for rid in self._order():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                wait = remaining if attempt_timeout is None else min(remaining, attempt_timeout)
                try:
                    result = await self._acall_once(rid, method, args, kwargs, wait)
                    if not any_replica:
                        self.leader = rid
                    return result
                except (TimeoutError, NotLeaderError, RayActorError, ActorUnschedulableError,
                        ValueError, RequestLost) as err:
                    last = err
                    if self._failed(rid, err, retry_unknown, attempt_timeout):
                        break
            if loop.time() >= deadline:
                raise self._no_leader(timeout, last)
            await asyncio.sleep(RETRY_PAUSE)


def meta_router() -> GroupRouter:
    return GroupRouter({meta_member_id(i): meta_actor_name(meta_member_id(i))
                        for i in range(META_MEMBERS)}, "the meta group",
                       direct_methods=META_REQUESTS)


def stream_router(assignment: dict[str, Any]) -> GroupRouter:
    group = assignment["group"]
    names = {rid: stream_actor_name(group, rid) for rid, _node in assignment["peers"]}
    return GroupRouter(names, f"stream {assignment['config']['name']!r}",
                       hosted=assignment["config"].get("hosting") == SHARED_HOSTING,
                       direct_methods=STREAM_REQUESTS,
                       name_for=functools.partial(stream_actor_name, group))


def is_api_error(exc: BaseException) -> bool:
    return isinstance(exc, APIError)


LOOKUP_BACKOFF = 1.0  # seconds before a peer whose name was not found is looked up again
ADDRESS_RECHECK = 10.0  # seconds between reads of a known peer's data-plane address
# bytes of raft messages in actor calls a peer has not answered yet, past which more are
# dropped (raft sends again): a paused or stuck peer's calls wait in Ray with their
# arguments, in this process's memory, as the data plane's per-peer budget bounds its own
CALL_BUDGET = 16 * 1024 * 1024


def _size(messages: list) -> int:
    return sum(m.size() for m in messages)


class PeerSender:
    """Sends raft messages to the peers of a group: ``name_of(peer)`` is a peer's actor
    name. Fire and forget (raft tolerates losses), but not blind: a handle is kept until a
    send through it fails because its actor died, then dropped, so the next send looks the
    name up again (a successor under that name, or nothing when the peer is gone). A peer
    removed from the group is forgotten (:meth:`forget`).

    Inside an event loop a missing handle is looked up in a thread (``ray.get_actor``
    blocks); messages for that peer wait for it (a few batches at most) and go out once
    it is known, as a slow network would deliver them. A name not found is looked up
    again only after ``LOOKUP_BACKOFF``.

    Actor calls a peer has not answered hold at most ``CALL_BUDGET`` bytes of messages;
    past it a batch is dropped (``call_dropped``), as the data plane drops over its budget.

    ``stats`` counts what happened: ``sent`` calls, ``failed`` calls whose actor had died,
    ``dropped`` handles, ``to_removed`` messages addressed to a peer this replica saw removed
    from the group (always 0 while replica ids are never reused) and ``lookups``."""

    MAX_WAITING = 16  # message batches kept per peer while its handle is looked up

    def __init__(self, name_of: Callable[[str], str]) -> None:
        self.name_of = name_of
        self._handles: dict[str, Any] = {}
        self._waiting: dict[str, list[list]] = {}
        self._removed: set[str] = set()
        self._not_found: dict[str, float] = {}  # peer -> when to look it up again
        self._addresses: dict[str, tuple[str, int]] = {}  # peer -> its data-plane address
        self._address_checked: dict[str, float] = {}  # peer -> when to read it again
        self.stats = {"sent": 0, "failed": 0, "dropped": 0, "to_removed": 0, "lookups": 0,
                      "direct": 0, "direct_dropped": 0, "refused": 0, "call_dropped": 0}
        self._in_calls: dict[str, int] = {}  # peer -> bytes in its unanswered actor calls
        self._in_calls_lock = threading.Lock()  # answers arrive on Ray's thread
        # told when a peer's process is seen gone (its data-plane address refuses
        # connections): the raft host then elects at once if that peer led
        self.on_gone: Callable[[str], None] | None = None
        self._listening = False

    def __call__(self, peer: str, messages: list) -> None:
        if peer in self._removed:
            self.stats["to_removed"] += 1
        if self._direct(peer, messages):
            return
        handle = self._handles.get(peer)
        if handle is not None:
            self._send(peer, handle, messages)
            return
        retry_at = self._not_found.get(peer)
        if retry_at is not None and time.monotonic() < retry_at:
            raise LookupError(f"peer {peer} was not found recently")  # no GCS call per tick
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a plain caller: look it up here
            self._send(peer, self._found(peer, self._get_actor(peer)), messages)
            return
        waiting = self._waiting.get(peer)
        if waiting is None:
            self._waiting[peer] = waiting = []
            loop.create_task(self._look_up(peer))
        waiting.append(messages)
        del waiting[:-self.MAX_WAITING]

    async def watch(self, peer: str) -> None:
        """Wait on the peer actor's ``hold`` call: it ends (or fails) when that actor stops
        or dies, which is how a quiet raft follower learns its leader is gone."""
        handle = await self.handle(peer)
        await handle.hold.remote()

    async def handle(self, peer: str) -> Any:
        """The peer's actor handle (looked up off the event loop when not known yet)."""
        handle = self._handles.get(peer)
        if handle is None:
            handle = self._found(peer, await asyncio.to_thread(self._get_actor, peer))
        return handle

    def _direct(self, peer: str, messages: list) -> bool:
        """Send over the data plane when the peer's address is known and its connection
        is not failing; False: use an actor call."""
        plane = data_plane.running_plane()
        if plane is None:
            return False
        if not self._listening:
            self._listening = True
            plane.refusal_listeners.add(self)
        now = time.monotonic()
        addr = self._addresses.get(peer)
        if now >= self._address_checked.get(peer, 0.0):
            # looked up again now and then: a replica restarted elsewhere publishes anew
            self._address_checked[peer] = now + (ADDRESS_RECHECK if addr else LOOKUP_BACKOFF)
            asyncio.get_running_loop().create_task(self._look_up_address(peer))
        if addr is None:
            return False
        sender = plane.sender
        if sender.send(addr, self.name_of(peer), messages):
            self.stats["direct"] += 1
            return True
        if sender.connected(addr):
            self.stats["direct_dropped"] += 1  # over its budget: a slow peer; raft resends
            return True
        # cannot connect (a stale address, a peer restarting): the actor call meanwhile
        self._address_checked[peer] = min(self._address_checked.get(peer, now),
                                          now + LOOKUP_BACKOFF)
        return False

    def address_refused(self, address: tuple[str, int]) -> None:
        """Connections to ``address`` are refused: the process that served the peers
        there died (or moved); they are looked up anew, and ``on_gone`` hears of them."""
        for peer, addr in list(self._addresses.items()):
            if tuple(addr) != tuple(address):
                continue
            self.stats["refused"] += 1
            del self._addresses[peer]
            self._address_checked.pop(peer, None)
            if self.on_gone is not None:
                self.on_gone(peer)

    async def _look_up_address(self, peer: str) -> None:
        try:
            addr = await asyncio.to_thread(data_plane.address_of, self.name_of(peer))
        except Exception:  # noqa: BLE001 - the control store is busy: the next check
            return
        old = self._addresses.get(peer)
        if addr is None:
            self._addresses.pop(peer, None)
        elif addr != old:
            self._addresses[peer] = addr

    def _get_actor(self, peer: str) -> Any:
        self.stats["lookups"] += 1
        try:
            return find_replica(self.name_of(peer))
        except ValueError:
            self._not_found[peer] = time.monotonic() + LOOKUP_BACKOFF
            raise

    def _found(self, peer: str, handle: Any) -> Any:
        self._not_found.pop(peer, None)
        self._handles[peer] = handle
        return handle

    async def _look_up(self, peer: str) -> None:
        try:
            handle = self._found(peer, await asyncio.to_thread(self._get_actor, peer))
        except Exception:  # noqa: BLE001 - not there (yet): raft sends again later
            self._waiting.pop(peer, None)
            return
        for messages in self._waiting.pop(peer, []):
            self._send(peer, handle, messages)

    def _send(self, peer: str, handle: Any, messages: list) -> None:
        size = _size(messages)
        with self._in_calls_lock:
            waiting = self._in_calls.get(peer, 0)
            if waiting and waiting + size > CALL_BUDGET:
                self.stats["call_dropped"] += 1
                return
            self._in_calls[peer] = waiting + size
        self.stats["sent"] += 1

        def answered() -> None:
            with self._in_calls_lock:
                left = self._in_calls.get(peer, 0) - size
                if left > 0:
                    self._in_calls[peer] = left
                else:
                    self._in_calls.pop(peer, None)

        if isinstance(handle, HostedHandle) and post_to_host(
                handle, messages, lambda: self._failed(peer, handle), answered):
            return  # with every other group's messages for that host, in one call
        self._watch(peer, handle, handle.receive.remote(messages), answered)

    def _watch(self, peer: str, handle: Any, ref: Any, answered: Callable[[], None]) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None

        def done(fut: Any) -> None:
            answered()
            if fut.cancelled():
                return
            exc = fut.exception()
            # the actor died, or its host no longer runs it (moved, removed): look it up again
            if not (isinstance(exc, (RayActorError, ActorUnschedulableError))
                    or isinstance(unwrap(exc), NotHostedError)):
                return
            if loop is None:
                self._failed(peer, handle)
            else:  # Ray completes futures on its own thread: hand over to the event loop
                with contextlib.suppress(RuntimeError):  # the loop is closed: we are stopping
                    loop.call_soon_threadsafe(self._failed, peer, handle)

        ref.future().add_done_callback(done)

    def _failed(self, peer: str, handle: Any) -> None:
        self.stats["failed"] += 1
        self._address_checked.pop(peer, None)  # it died or moved: where is it served now?
        if self._handles.get(peer) is handle:
            del self._handles[peer]
            self.stats["dropped"] += 1

    def forget(self, peer: str) -> None:
        """``peer`` left the group: drop its handle (raft sends it nothing more)."""
        self._removed.add(peer)
        self._not_found.pop(peer, None)
        self._addresses.pop(peer, None)
        self._waiting.pop(peer, None)
        if self._handles.pop(peer, None) is not None:
            self.stats["dropped"] += 1
