"""The stream replicas that run in this process, by actor name.

A consumer replica may share its process with its stream's replicas (beside them in a
stream replica actor, or in a replica host). The reads its delivery decisions make
synchronously must then not become an actor call that only this process can answer: the
event loop would wait on itself until the call timed out. When the stream's leader runs
here, those reads go to it directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_stream_replicas: dict[str, Any] = {}


def add_stream_replica(name: str, replica: Any) -> None:
    _stream_replicas[name] = replica


def drop_stream_replica(name: str, replica: Any) -> None:
    if _stream_replicas.get(name) is replica:
        del _stream_replicas[name]


def stream_leader_here(names: Iterable[str]) -> Any | None:
    """The replica among ``names`` that runs in this process and leads, else None."""
    for name in names:
        replica = _stream_replicas.get(name)
        if replica is not None and replica.engine.is_leader:
            return replica
    return None
