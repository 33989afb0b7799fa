"""A stream replica copying its store from the leader, over Ray, while the group goes on.

After installing a state-only snapshot (or restarting without the messages its own snapshot
covers) a replica's group applies nothing until the copy is done (see
:mod:`rayjet.replication.stream_machine`). This task asks the leader for chunks, the next
one while it stores the last (two calls at most are in flight: the flow control), then
for the seal, and hands the group the leader's applied index. Raft traffic,
reads and every other call keep being served between chunks; a leader change or a failed
call just sends the next request to whoever leads then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import Any

from ray.exceptions import RayError

from rayjet.errors import APIError
from rayjet.replication.group import ReplicaFailedError
from rayjet.replication.stream_machine import StoreCopy

log = logging.getLogger(__name__)

CHUNK_BYTES_ENV = "RAYJET_COPY_CHUNK_BYTES"
DEFAULT_CHUNK_BYTES = 8 << 20
CALL_TIMEOUT = 30.0
RETRY_AFTER = 0.2


def chunk_bytes() -> int:
    raw = os.environ.get(CHUNK_BYTES_ENV, "").strip()
    try:
        value = int(raw) if raw else DEFAULT_CHUNK_BYTES
    except ValueError:
        value = DEFAULT_CHUNK_BYTES
    return max(value, 4096)


class StoreCopyTask:
    """Runs :class:`StoreCopy` for one replica (``replica`` is a StreamReplica)."""

    def __init__(self, replica: Any) -> None:
        self.replica = replica
        self._task: asyncio.Task | None = None
        # what the last copies did (status() reports it; tests and benchmarks read it)
        self.stats: dict[str, Any] = {"copies": 0, "chunks": 0, "records": 0, "bytes": 0,
                                      "restarts": 0, "retries": 0, "seconds": 0.0}

    def update(self) -> None:
        """Start copying when the group asks for it and no copy is running."""
        if self.replica.group.copying and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        replica = self.replica
        group = replica.group
        size = chunk_bytes()
        copy = StoreCopy(replica.machine, size)
        started = time.perf_counter()
        ahead: tuple[int, Any] | None = None  # (from_seq, call) asked before it was needed
        while group.copying:
            leader = group.leader
            if leader is None or leader == replica.id:
                await asyncio.sleep(RETRY_AFTER)
                continue
            try:
                handle = await replica.host.send.handle(leader)
                kind, arg = copy.next_request()
                if kind == "chunk":
                    call = ahead[1] if ahead and ahead[0] == arg else \
                        handle.copy_chunk.remote(arg, size)
                    ahead = None
                    records, next_seq, last = await asyncio.wait_for(call, CALL_TIMEOUT)
                    if next_seq <= last:
                        # the leader reads the next chunk while we store this one: two
                        # chunks at most are in flight
                        ahead = (next_seq, handle.copy_chunk.remote(next_seq, size))
                    with group.stop_on_disk_error():
                        copy.on_chunk(records, next_seq, last)
                    self.stats["chunks"] += 1
                    self.stats["bytes"] += len(records)
                    continue
                seal = await asyncio.wait_for(handle.copy_seal.remote(arg), CALL_TIMEOUT)
                if seal["applied"] < group.applied:
                    await asyncio.sleep(RETRY_AFTER)  # a new leader still applying: ask again
                    continue
                self.stats["bytes"] += len(seal["tail"])
                with group.stop_on_disk_error():
                    sealed = copy.on_seal(seal)
                if sealed and group.copying:
                    replica.host.finish_copy(seal["applied"])
            except asyncio.CancelledError:
                raise
            except ReplicaFailedError as exc:
                log.error("store copy of %s stopped: %s", replica.host.name, exc)
                return  # the replica stopped on a disk error; a restart copies again
            except (TimeoutError, RayError, APIError, LookupError, ValueError) as exc:
                ahead = None
                self.stats["retries"] += 1
                log.info("store copy of %s waits: %s", replica.host.name, exc)
                await asyncio.sleep(RETRY_AFTER)
        self.stats["copies"] += 1
        self.stats["records"] += copy.copied
        self.stats["restarts"] += copy.restarts
        self.stats["seconds"] = round(time.perf_counter() - started, 3)
