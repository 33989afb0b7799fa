"""Finding leaders and calling actors with retries, from a client (driver or task)."""

from __future__ import annotations

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


class PeerSender:
    """Sends raft messages to the peers of a group: ``name_of(peer)`` is a peer's actor
    name; handles are looked up once and kept. Fire and forget: raft tolerates losses."""

    def __init__(self, name_of: Callable[[str], str]) -> None:
        self.name_of = name_of
        self._handles: dict[str, Any] = {}

    def __call__(self, peer: str, messages: list) -> None:
        handle = self._handles.get(peer)
        if handle is None:
            handle = ray.get_actor(self.name_of(peer), namespace=NAMESPACE)
            self._handles[peer] = handle
        handle.receive.remote(messages)
