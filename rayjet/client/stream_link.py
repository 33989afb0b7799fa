"""One stream without the client's subject routing around it: what a protocol server that
keeps its own stream catalogue (the NATS gateway) needs, as coroutines on its own event
loop. Each call is one request to the stream's leader over the data plane (an actor call
when none can be made), with no thread between the loop and the socket.

A link is bound to the replica set the catalogue named when it was made: whoever holds
one forgets it when the stream is deleted, re-created or moved, and on a failure.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from rayjet.actors.router import GroupRouter
from rayjet.api import PubAck, RawStreamMsg
from rayjet.api import headers as H
from rayjet.client import column_publish as CP
from rayjet.client.publish import ATTEMPT_TIMEOUT, MAX_CALL_MSGS, message_item
from rayjet.errors import APIError


class StreamLink:
    """Publishes to stream ``name`` through its leader (see the module's doc)."""

    def __init__(self, name: str, router: GroupRouter, timeout: float) -> None:
        self.name = name
        self.router = router
        self.timeout = timeout

    async def publish(self, msgs: list[tuple], *, literal_wildcards: bool = False
                      ) -> list[Any]:
        """``(subject, data, headers)`` items, in order: a PubAck or the APIError that
        refused it for each, as ``publish_batch``'s list form answers (every subject is
        this stream's, or its answer is SubjectNotCapturedError). Raises the APIError that
        refused the first call (nothing stored, or an outcome that is unknown); a later
        call's error answers that call's messages."""
        items = [message_item(*m, literal_wildcards) for m in msgs]
        answers: list[Any] = []
        for at in range(0, len(items), MAX_CALL_MSGS):
            part = items[at:at + MAX_CALL_MSGS]
            # a retry after an unknown outcome is safe only when every message has an id
            safe = all(h and H.MSG_ID in h for _, _, h in part)
            try:
                got = await self.router.acall(
                    "publish", part, self.timeout, timeout=self.timeout, retry_unknown=safe,
                    attempt_timeout=ATTEMPT_TIMEOUT if safe else None)
            except APIError as err:
                if not at:
                    raise  # the first call: nothing of this publish was stored
                got = [err] * len(part)  # earlier calls' messages stay answered as stored
            stored = PubAck.stored
            answers.extend(stored(self.name, a) if type(a) is int else a for a in got)
        return answers

    async def publish_table(self, table: pa.Table | pa.RecordBatch, *,
                            literal_wildcards: bool = False) -> CP.PubAcks:
        """``publish_batch``'s columnar form for this stream's subjects: the rows cross as
        Arrow columns in calls of bounded size. Raises what refused the first call; a later
        call refused as a whole answers its rows with that error."""
        if isinstance(table, pa.Table):
            table = table.combine_chunks()
        cols = CP.message_columns(table)
        CP.check_client_side(cols, literal_wildcards)
        acks = CP.PubAcks(cols.count)
        safe = cols.msg_ids is not None and all(cols.msg_ids)
        for a, b in CP.call_ranges(cols, 0, cols.count):
            try:
                answer = await self.router.acall(
                    "publish_columns", table.slice(a, b - a), self.timeout,
                    timeout=self.timeout, retry_unknown=safe)
            except APIError as err:
                if not a:
                    raise  # the first call: nothing of this publish was stored
                acks.refuse(a, b - a, err)  # earlier calls' rows stay answered as stored
                continue
            acks.take(self.name, a, answer)
        return acks

    async def publish_atomic(self, msgs: list[tuple[str, bytes, bytes | None]],
                             batch_id: str) -> PubAck:
        """An atomic batch of ``(subject, data, header block)`` items: all stored or none
        (one call; never retried, its outcome unknown once sent). Its last message's
        PubAck, with the batch id and count."""
        return await self.router.acall("publish_atomic", msgs, batch_id, self.timeout,
                                       timeout=self.timeout, retry_unknown=False)

    async def get_msg(self, seq: int | None = None, *, last_by_subject: str | None = None,
                      next_by_subject: str | None = None, direct: bool = False
                      ) -> RawStreamMsg:
        """``get_msg`` of this stream (``direct``: any replica may answer). A mirror's
        direct get, which the client answers from the mirrors, is not made here."""
        raw = await self.router.acall("get_msg", seq, last_by_subject, next_by_subject,
                                      direct, timeout=self.timeout, any_replica=direct)
        return RawStreamMsg(**raw)

    async def get_msgs(self, req: dict[str, Any]) -> dict[str, Any]:
        """A batched or multi_last direct get (``req`` as
        :func:`rayjet.engine.direct_get.parse_request` makes it): one call, any replica."""
        return await self.router.acall("get_msgs", req, True, timeout=self.timeout,
                                       any_replica=True)
