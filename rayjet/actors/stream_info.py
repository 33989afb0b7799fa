"""A stream replica's info document as :meth:`StreamReplica.info
<rayjet.actors.stream.StreamReplica.info>` answers it: its state part, and the whole of it
for a stream nothing was written to yet, which the meta and a resting replica (see
:mod:`rayjet.actors.on_demand`) answer without a replica. Below the replica, so that both
reach it without importing each other.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from rayjet.api import StorageType, StreamConfig
from rayjet.engine import store_config
from rayjet.replication.stream_machine import StreamMachine
from rayjet.storage import MemStore


def timestamp(ns: int) -> datetime | None:
    """Nanoseconds since the epoch as an aware datetime (None for 0: never)."""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC) if ns else None


def state_dict(st: Any, consumer_count: int) -> dict[str, Any]:
    """The ``state`` of a stream info from a store's state."""
    return {
        "messages": st.msgs, "bytes": st.bytes, "first_seq": st.first_seq,
        "first_ts": timestamp(st.first_ts), "last_seq": st.last_seq,
        "last_ts": timestamp(st.last_ts), "consumer_count": consumer_count,
        "num_subjects": st.num_subjects, "num_deleted": st.num_deleted,
    }


def new_stream_info(config: StreamConfig, created_ns: int, group: str,
                    leader: str | None) -> dict[str, Any]:
    """What :meth:`StreamReplica.info` answers for a stream nothing was written to yet, known
    without asking a replica: the config and state of an engine over an empty store (the
    defaults it fills in and a ``first_seq`` setting included). ``leader``: the group's
    leader when it is certain (R1)."""
    in_memory = dataclasses.replace(config, storage=StorageType.MEMORY)
    machine = StreamMachine(config, MemStore(store_config(in_memory)))
    state = state_dict(machine.store.state(), consumer_count=0)
    return {"config": machine.engine.config.to_dict(), "state": state,
            "created_ns": created_ns, "cluster": {"raft_group": group, "leader": leader},
            "leader": leader}
