"""Finding leaders and calling actors with retries, from a client (driver or task)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from rayjet.actors.names import (
    META_MEMBERS,
    NAMESPACE,
    meta_actor_name,
    meta_member_id,
    stream_actor_name,
)
from rayjet.errors import APIError, NotLeaderError, ServiceUnavailableError, TimeoutError

RETRY_PAUSE = 0.05


def unwrap(exc: BaseException) -> BaseException:
    """The exception an actor raised, without Ray's task-error wrapper."""
    while isinstance(exc, RayTaskError) and exc.cause is not None:
        exc = exc.cause
    return exc


def call(ref_fn: Callable[[], Any], timeout: float) -> Any:
    try:
        return ray.get(ref_fn(), timeout=max(timeout, 0.001))
    except GetTimeoutError:
        raise TimeoutError(f"no answer within {timeout:.1f}s") from None
    except RayTaskError as exc:
        raise unwrap(exc) from None


class GroupRouter:
    """Calls the leader of a replica group, following leader hints and skipping dead actors."""

    def __init__(self, names: dict[str, str], what: str) -> None:
        self.names = names  # replica id -> actor name
        self.what = what
        self.leader: str | None = None
        self._handles: dict[str, Any] = {}

    def handle(self, rid: str) -> Any:
        h = self._handles.get(rid)
        if h is None:
            h = ray.get_actor(self.names[rid], namespace=NAMESPACE)
            self._handles[rid] = h
        return h

    def _order(self) -> list[str]:
        rids = sorted(self.names)
        if self.leader in self.names:
            rids.remove(self.leader)
            rids.insert(0, self.leader)
        return rids

    def call(self, method: str, *args: Any, timeout: float = 10.0,
             retry_unknown: bool = True, any_replica: bool = False,
             attempt_timeout: float | None = None, **kwargs: Any) -> Any:
        """Call ``method`` on the leader (or, with ``any_replica``, on the first replica that
        answers). ``retry_unknown=False`` gives up, instead of retrying, when a write may or
        may not have happened (the leader died or stepped down after taking it).
        ``attempt_timeout`` (only for calls safe to repeat) bounds the wait on one replica
        before the others are tried."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while True:
            for rid in self._order():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                wait = remaining if attempt_timeout is None else min(remaining, attempt_timeout)
                try:
                    h = self.handle(rid)
                    result = call(lambda h=h: getattr(h, method).remote(*args, **kwargs), wait)
                    if not any_replica:
                        self.leader = rid
                    return result
                except TimeoutError as err:
                    if attempt_timeout is None:
                        raise
                    last = err  # slow or dead: try the others, then this one again
                except NotLeaderError as err:
                    last = err
                    if err.fields.get("outcome_unknown") and not retry_unknown:
                        raise
                    hint = err.fields.get("leader")
                    if hint in self.names and hint != rid:
                        self.leader = hint
                        break
                    if hint == rid:
                        break  # the leader is still catching up: ask it again shortly
                except (RayActorError, ValueError) as err:
                    # a dead or restarting replica: its handle may be stale
                    self._handles.pop(rid, None)
                    last = err
                    if isinstance(err, RayActorError) and not retry_unknown:
                        raise ServiceUnavailableError(
                            f"{self.what}: replica {rid} died during the call; the outcome "
                            "is unknown (retry with a Nats-Msg-Id to make retries safe)"
                        ) from None
            if time.monotonic() >= deadline:
                detail = f" (last error: {last})" if last else ""
                raise ServiceUnavailableError(
                    f"{self.what} has no reachable leader within {timeout:.1f}s{detail}")
            time.sleep(RETRY_PAUSE)


def meta_router() -> GroupRouter:
    return GroupRouter({meta_member_id(i): meta_actor_name(meta_member_id(i))
                        for i in range(META_MEMBERS)}, "the meta group")


def stream_router(assignment: dict[str, Any]) -> GroupRouter:
    group = assignment["group"]
    names = {rid: stream_actor_name(group, rid) for rid, _node in assignment["peers"]}
    return GroupRouter(names, f"stream {assignment['config']['name']!r}")


def is_api_error(exc: BaseException) -> bool:
    return isinstance(exc, APIError)


LOOKUP_BACKOFF = 1.0  # seconds before a peer whose name was not found is looked up again


class PeerSender:
    """Sends raft messages to the peers of a group: ``name_of(peer)`` is a peer's actor
    name. Fire and forget (raft tolerates losses), but not blind: a handle is kept until a
    send through it fails because its actor died, then dropped, so the next send looks the
    name up again (a successor under that name, or nothing when the peer is gone). A peer
    removed from the group is forgotten (:meth:`forget`).

    ``stats`` counts what happened: ``sent`` calls, ``failed`` calls whose actor had died,
    ``dropped`` handles, ``to_removed`` messages addressed to a peer this replica saw removed
    from the group (always 0 while replica ids are never reused) and ``lookups``."""

    def __init__(self, name_of: Callable[[str], str]) -> None:
        self.name_of = name_of
        self._handles: dict[str, Any] = {}
        self._removed: set[str] = set()
        self._not_found: dict[str, float] = {}  # peer -> when to look it up again
        self.stats = {"sent": 0, "failed": 0, "dropped": 0, "to_removed": 0, "lookups": 0}

    def __call__(self, peer: str, messages: list) -> None:
        if peer in self._removed:
            self.stats["to_removed"] += 1
        handle = self._handles.get(peer)
        if handle is None:
            handle = self._lookup(peer)
        ref = handle.receive.remote(messages)
        self.stats["sent"] += 1
        self._watch(peer, handle, ref)

    def _lookup(self, peer: str) -> Any:
        retry_at = self._not_found.get(peer)
        if retry_at is not None and time.monotonic() < retry_at:
            raise LookupError(f"peer {peer} was not found recently")  # no GCS call per tick
        self.stats["lookups"] += 1
        try:
            handle = ray.get_actor(self.name_of(peer), namespace=NAMESPACE)
        except ValueError:
            self._not_found[peer] = time.monotonic() + LOOKUP_BACKOFF
            raise
        self._not_found.pop(peer, None)
        self._handles[peer] = handle
        return handle

    def _watch(self, peer: str, handle: Any, ref: Any) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None

        def done(fut: Any) -> None:
            if fut.cancelled() or not isinstance(fut.exception(), RayActorError):
                return
            if loop is None:
                self._failed(peer, handle)
            else:  # Ray completes futures on its own thread: hand over to the event loop
                with contextlib.suppress(RuntimeError):  # the loop is closed: we are stopping
                    loop.call_soon_threadsafe(self._failed, peer, handle)

        ref.future().add_done_callback(done)

    def _failed(self, peer: str, handle: Any) -> None:
        self.stats["failed"] += 1
        if self._handles.get(peer) is handle:
            del self._handles[peer]
            self.stats["dropped"] += 1

    def forget(self, peer: str) -> None:
        """``peer`` left the group: drop its handle (raft sends it nothing more)."""
        self._removed.add(peer)
        self._not_found.pop(peer, None)
        if self._handles.pop(peer, None) is not None:
            self.stats["dropped"] += 1
