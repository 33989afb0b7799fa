"""The consumers a stream leader runs in its own actor (see
:mod:`rayjet.placement.consumers` for which ones).

Each is a :class:`ConsumerReplica` with a single-voter raft group over a memory log, so it
decides, records and hands out deliveries exactly as a dedicated consumer does. Its stream
reads are method calls on the leader's store. Created in milliseconds; stopped when this
replica stops leading (their clients learn it from the 409 that ends their pulls, then
find no such consumer on the new leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any, Protocol

from rayjet.actors import events
from rayjet.actors.consumer import ConsumerReplica, InLeader
from rayjet.api import ConsumerConfig, StreamConfig
from rayjet.api.account import NO_LIMITS, AccountLimits, within_ack_pending
from rayjet.api.validate_consumer import validate_consumer_config, validate_consumer_update
from rayjet.errors import (
    BadRequestError,
    ConsumerNameExistsError,
    ConsumerNotFoundError,
    MaximumConsumersError,
)
from rayjet.placement.consumers import ephemeral_name, runs_in_stream_leader

# what a client may call on one of them (the consumer API of a dedicated consumer actor)
CLIENT_METHODS = frozenset({"fetch", "ack", "advance", "reset", "unpin", "info", "advisories",
                            "status", "state_doc", "restore_state"})
START_TIMEOUT = 5.0


class StreamLeader(Protocol):
    """What the consumers it runs use of a stream leader's replica
    (:class:`~rayjet.actors.stream.StreamReplica`); named here so this module need not
    import the replica that holds them."""

    group_name: str
    id: str
    dir: Path

    def read_local(self, method: str, *args: Any) -> Any: ...

    async def wait_for_messages(self, after: int, timeout: float) -> int: ...


class LeaderStream:
    """The stream as a consumer inside its leader sees it: in-process calls with the
    signature of a GroupRouter's."""

    def __init__(self, replica: StreamLeader) -> None:
        self._replica = replica

    def call(self, method: str, *args: Any, **_: Any) -> Any:
        if method != "reader_call":
            raise BadRequestError(f"a consumer in the stream leader cannot call {method!r}")
        return self._replica.read_local(*args)

    async def acall(self, method: str, *args: Any, **_: Any) -> Any:
        if method == "wait_for_messages":  # a consumer's wait for new messages
            return await self._replica.wait_for_messages(*args)
        return self.call(method, *args)


class LeaderConsumers:
    def __init__(self, replica: StreamLeader) -> None:
        self._replica = replica
        self._stream = LeaderStream(replica)
        self._consumers: dict[str, ConsumerReplica] = {}

    def __len__(self) -> int:
        return len(self._consumers)

    def names(self) -> list[str]:
        return sorted(self._consumers)

    def __contains__(self, name: str) -> bool:
        return name in self._consumers

    async def add(self, stream_cfg: StreamConfig, config: dict[str, Any], *,
                  others: int, limits: AccountLimits = NO_LIMITS,
                  account_consumers: int = 0) -> dict[str, Any]:
        """Create (or, same name and a compatible config, update) one and return its info.
        ``others``: the stream's consumers elsewhere, for ``max_consumers``; ``limits`` and
        ``account_consumers`` (the catalogue's consumers): the account's, checked as the
        meta leader checks a durable's."""
        cfg = ConsumerConfig.from_dict(config)
        unset_ack_pending = not cfg.max_ack_pending
        if not runs_in_stream_leader(cfg, stream_cfg):
            raise BadRequestError(f"consumer {cfg.name or cfg.durable_name!r} does not run "
                                  "in the stream leader (a durable, replicated, or on an "
                                  "interest or work-queue stream)")
        if not cfg.name:
            cfg = dataclasses.replace(cfg, name=ephemeral_name())
        cfg = within_ack_pending(validate_consumer_config(cfg, stream_cfg), limits,
                                 unset_ack_pending)
        existing = self._consumers.get(cfg.name)
        if existing is not None:
            if existing.engine.config != cfg:
                cfg = validate_consumer_update(existing.engine.config, cfg, stream_cfg)
                await existing.update_config(cfg.to_dict())
            return await existing.info()
        limit = stream_cfg.max_consumers
        if 0 < limit <= others + len(self._consumers):
            raise MaximumConsumersError(
                f"maximum consumers limit reached: stream {stream_cfg.name!r} allows {limit}")
        if 0 <= limits.max_consumers <= account_consumers + len(self._consumers):
            raise MaximumConsumersError(
                f"maximum consumers limit reached: the account allows {limits.max_consumers}")
        replica = self._replica
        consumer = ConsumerReplica(
            {"config": stream_cfg.to_dict()}, cfg.name, cfg.to_dict(),
            f"{replica.group_name}.{cfg.name}", replica.id, [replica.id], str(replica.dir),
            created_ns=time.time_ns(), in_leader=InLeader(self._stream, self.delete))
        self._consumers[cfg.name] = consumer
        try:
            await consumer.until_leading(START_TIMEOUT)
            events.post([events.consumer_action(stream_cfg.name, cfg.name, "create")])
            return await consumer.info()
        except BaseException:
            await self.delete(cfg.name)
            raise

    def check_free(self, name: str) -> None:
        """A durable may not take the name of a consumer running here (10013)."""
        if name in self._consumers:
            raise ConsumerNameExistsError(f"consumer name {name!r} is already in use")

    async def call(self, name: str, method: str, args: tuple, kwargs: dict) -> Any:
        if method not in CLIENT_METHODS:
            raise BadRequestError(f"unknown consumer method {method!r}")
        consumer = self._consumers.get(name)
        if consumer is None:
            raise ConsumerNotFoundError(f"consumer {name!r} not found")
        return await getattr(consumer, method)(*args, **kwargs)

    async def delete(self, name: str, why: str = "Consumer Deleted") -> bool:
        consumer = self._consumers.pop(name, None)
        if consumer is None:
            return False
        await consumer.close(why)
        events.post([events.consumer_action(consumer.engine.stream, name, "delete")])
        return True

    async def stop_all(self, why: str) -> None:
        """This replica stops leading (or stops): every consumer here ends, and none
        answers a call any more."""
        gone = list(self._consumers.values())
        self._consumers.clear()
        await self._close(gone, why)

    def stop_all_soon(self, why: str) -> None:
        """:meth:`stop_all` from a synchronous hook: they leave the table at once."""
        if self._consumers:
            gone = list(self._consumers.values())
            self._consumers.clear()
            asyncio.get_running_loop().create_task(self._close(gone, why))

    @staticmethod
    async def _close(consumers: list[ConsumerReplica], why: str) -> None:
        for consumer in consumers:
            with contextlib.suppress(Exception):
                await consumer.close(why)
