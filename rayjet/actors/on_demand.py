"""Stream replicas that start on demand.

A new R1 stream in a shared host is placed (its host records what starting it takes) but
not started until something needs more of it than its info: a stream made and left alone
costs a small file in its host, not a store, a raft log and a task. Kept free of the
engine's imports, so a host restores its records without loading them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rayjet.api import StreamConfig


def replica_dir(data_dir: Any, group: str, replica_id: str) -> Path:
    """Where a stream replica keeps its store and raft log."""
    return Path(data_dir) / "streams" / group / replica_id


def starts_on_demand(config: StreamConfig) -> bool:
    """Whether a new hosted replica of this stream may rest, placed but not started, until
    something needs more of it than :func:`resting_answer` gives: a group of one (it leads
    as soon as it starts, so nobody waits for an election) with nothing to copy in (a
    mirror or sources keep their replica at work from the start). A stream made and left
    alone then costs a small file, not a store, a raft log and a task."""
    return config.num_replicas == 1 and config.mirror is None and not config.sources


def never_started(spec: tuple[str, tuple, dict]) -> bool:
    """Whether the stream replica a host's ``spec`` (kind, args, kwargs) describes may rest
    after a restart: one that starts on demand and has no files yet (it never ran)."""
    kind, args, _ = spec
    if kind != "stream":
        return False
    config, group, replica_id, _voters, data_dir = args[:5]
    return (starts_on_demand(StreamConfig.from_dict(config))
            and not replica_dir(data_dir, group, replica_id).exists())


RESTING_ANSWERS = frozenset({"ping", "ready", "info", "leader_id"})
RESTING_INFOS = 10_000  # resting streams' infos kept built in this process (a listing asks)
_resting_infos: dict[tuple, tuple[dict[str, Any], dict[str, Any]]] = {}


def resting_answer(spec: tuple[str, tuple, dict], method: str, args: tuple,
                   kwargs: dict) -> tuple[bool, Any]:
    """A resting replica's answer to ``method`` as the started replica would give it (an
    empty stream it leads), when one is known without starting it: (True, answer), else
    (False, None) and the replica has to start."""
    if method not in RESTING_ANSWERS:
        return False, None
    _, (config, group, replica_id, *_), spec_kwargs = spec
    if method in ("ping", "leader_id"):
        return True, replica_id
    # the engine's defaults: heavy imports, loaded only once a resting replica is asked
    from rayjet.actors.stream_info import new_stream_info

    if method == "info" and (any(args) or any(kwargs.values())):
        return False, None  # subject totals or deleted details: ask the store
    created_ns = spec_kwargs.get("created_ns", 0)
    key = (group, replica_id, created_ns)
    kept = _resting_infos.get(key)
    # the same config (most often the very dict of the host's record): the info built
    if kept is not None and (kept[0] is config or kept[0] == config):
        known = kept[1]
    else:  # an engine over an empty store says it: worth building once
        if len(_resting_infos) >= RESTING_INFOS:
            _resting_infos.clear()
        known = new_stream_info(StreamConfig.from_dict(config), created_ns, group, replica_id)
        _resting_infos[key] = (config, known)
    info = {**known, "cluster": dict(known["cluster"])}
    since = datetime.fromtimestamp(created_ns / 1e9, tz=UTC) if created_ns else None
    info["cluster"].update(leader_since=since, replicas=[])
    info.update(replica=replica_id, mirror=None, sources=[])
    if method == "info":
        return True, info
    with_info = bool(args[0] if args else kwargs.get("with_info", False))
    return True, {"leader": True, "info": info if with_info else None}
