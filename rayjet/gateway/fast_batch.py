"""Fast batch publish through the gateway (streams with ``allow_batched``), answered on the
wire as nats-server 2.15.1 answers it for a stream of one replica.

A publish captured by a stream whose reply subject ends in ``.$FI`` belongs to a fast batch
(:mod:`rayjet.engine.fast_batch` reads the reply and keeps the batches' flow state). Its
messages are stored as they come, in order with the publishes around them; a run of them
(consecutive fast batch publishes to one stream, any batches) goes to the stream's leader in
one call. The answers (flow acks, gap notices, errors, the commit's PubAck) are decided
message by message as nats-server decides them when each message is stored before the next
arrives: first assuming each is stored, then, if the leader refused or deduplicated one,
again from the run's start with what it answered. So that a refusal cannot leave later
messages stored that nats-server would have dropped, a message with a header block (which
may be refused), or any message of a stream that discards new messages, ends its call.

Refused before their batch is looked at, as nats-server refuses them: a sealed stream, a
message over ``max_msg_size``, a stream without ``allow_batched`` (10205), a reply that
cannot be read (10206), a batch id over 64 bytes (10207). Then: a batch that never began
(10208), more than 1000 batches open on a stream or 50,000 in the gateway (10211). A batch
without a message for 10 s is dropped. Batches live in the gateway that received them.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

from rayjet.api import PubAck
from rayjet.api.enums import DiscardPolicy
from rayjet.client.column_publish import PubAcks
from rayjet.engine import fast_batch as F
from rayjet.errors import APIError, ServiceUnavailableError, StreamNotFoundError, error_for
from rayjet.errors import TimeoutError as RayjetTimeout
from rayjet.gateway import jsapi
from rayjet.gateway.batching import error_document
from rayjet.gateway.inbound import InboundPublish
from rayjet.storage import arrow_arrays as arrays

BATCH_TIMEOUT = 10.0  # s without a message after which an open batch is dropped
MAX_OPEN_PER_STREAM = 1000  # nats-server's default of fast batches in flight per stream
MAX_OPEN_TOTAL = 50_000  # ... and on the server (here: in one gateway)
TABLE_FROM = 32  # messages that leave as an Arrow table
_UNREACHABLE = (ServiceUnavailableError, StreamNotFoundError, RayjetTimeout)


def is_fast(reply: str | None, hdr: bytes | None) -> bool:
    """Whether a publish with this reply subject (and header block) is a fast batch's,
    well formed or not."""
    if not reply:
        return False
    if reply.endswith(F.SUFFIX):
        return len(reply) > len(F.SUFFIX)
    if reply.startswith("_R_.") and hdr:
        ref, bad = F.parse_reply(reply, hdr)
        return ref is not None or bad
    return False


def _risky(config: Any) -> bool:
    """Whether a message without headers may still be refused by the store (discard new
    with a limit): such streams store their fast batch messages one per call."""
    return config.discard is DiscardPolicy.NEW and (
        config.max_msgs > 0 or config.max_bytes > 0 or config.max_msgs_per_subject > 0)


def _precheck(config: Any, ref: F.FastRef | None, bad: bool, hdr: bytes | None,
              payload: bytes) -> str | None:
    """The refusal a message gets before its batch is looked at (an error name), if any."""
    if config.sealed:
        return "STREAM_SEALED"
    limit = config.max_msg_size
    if limit >= 0 and (len(hdr or b"") > limit or len(payload) > limit - len(hdr or b"")):
        return "STREAM_MSG_TOO_BIG"
    if not config.allow_batched:
        return "BATCH_PUBLISH_DISABLED"
    if ref is None or bad:
        return "BATCH_PUBLISH_INVALID_PATTERN"
    if len(ref.id.encode("utf-8", "surrogatepass")) > F.MAX_ID_LEN:
        return "BATCH_PUBLISH_INVALID_BATCH_ID"
    return None


class FastBatches:
    """The fast batches open in one gateway. ``link(stream)`` (a coroutine) gives the
    :class:`rayjet.client.stream_link.StreamLink` their messages are stored through."""

    def __init__(self, link: Any, forget: Any = None, clock: Any = time.monotonic) -> None:
        self._link = link
        self._forget = forget or (lambda stream: None)
        self._clock = clock
        self.tables: dict[str, F.FastTable] = {}

    def open_batches(self, stream: str) -> int:
        table = self.tables.get(stream)
        return len(table.open) if table is not None else 0

    def expired(self, stream: str, bid: str) -> bool:
        """Whether batch ``bid`` of ``stream`` is not open (any more)."""
        table = self.tables.get(stream)
        b = table.open.get(bid) if table is not None else None
        return b is None or self._clock() - b.seen > BATCH_TIMEOUT

    def keep(self, configs: dict[str, Any]) -> None:
        """Drop the batches of streams deleted or no longer allowing fast batches."""
        for stream in list(self.tables):
            config = configs.get(stream)
            if config is None or not config.allow_batched:
                del self.tables[stream]

    def _room(self) -> bool:
        return sum(len(t.open) for t in self.tables.values()) < MAX_OPEN_TOTAL

    async def take(self, stream: str, config: Any, run: list[InboundPublish], domain: str | None
                   ) -> list[list[bytes]]:
        """A run of fast batch publishes ``(subject, reply, header block, payload)`` to
        ``stream``, stored in order; the answers to each one's reply subject."""
        if config is None:  # the catalogue lost the stream: nothing to store it in
            return [[] for _ in run]
        now = self._clock()
        table = self.tables.setdefault(stream, F.FastTable())
        table.expire(now, BATCH_TIMEOUT)
        parsed = [F.parse_reply(m.reply, m.header) for m in run]
        prefix = b'{"stream":%s,' % F.quoted(stream).encode()
        if domain:
            prefix += b'"domain":%s,' % F.quoted(domain).encode()
        prefix += b'"seq":'
        answers: list[list[bytes]] = [[] for _ in run]
        known: dict[int, Any] = {}
        pos = 0
        while pos < len(run):
            saved = table.snapshot()
            outs, end, picks = self._simulate(table, config, run, parsed, pos, known, now)
            if picks:
                got = await self._store(stream, [run[i] for i in picks])
                known.update(zip(picks, got))
                if not all(type(known[i]) is int for i in picks):
                    table.restore(saved)  # decide again, knowing what the leader answered
                    continue
            seqs = {i: o for i, o in known.items() if type(o) is int}
            table.resolve(seqs)
            for i, out in enumerate(outs, pos):
                answers[i] = [self._render(item, stream, prefix, seqs) for item in out]
            pos = end
        if not table.open:
            self.tables.pop(stream, None)
        return answers

    def _simulate(self, table: F.FastTable, config: Any, run: list[InboundPublish],
                  parsed: list[tuple], pos: int, known: dict[int, Any], now: float
                  ) -> tuple[list[list], int, list[int]]:
        """Decide the answers of ``run[pos:]`` (up to the end or a message that ends a
        store call): each message's answer items, where it stopped, and the messages to
        store whose outcome is not known yet (assumed stored)."""
        outs: list[list] = []
        picks: list[int] = []
        risky = _risky(config)
        can_respond = not config.no_ack
        at = [0, False]  # the message being decided; whether it ends the store call

        def store() -> Any:
            i = at[0]
            if i in known:
                return known[i]
            picks.append(i)
            at[1] = risky or bool(run[i].header)
            return F.Pending(i)

        step = table.step
        for i in range(pos, len(run)):
            _, _, hdr, payload = run[i]
            out: list = []
            outs.append(out)
            ref, bad = parsed[i]
            refusal = _precheck(config, ref, bad, hdr, payload)
            if refusal is not None:
                if can_respond:
                    out.append(F.Refused(refusal))
                continue
            at[0] = i
            step(ref, out, store, now=now, can_respond=can_respond,
                 per_stream=MAX_OPEN_PER_STREAM, room=self._room)
            if at[1]:
                return outs, i + 1, picks
        return outs, len(run), picks

    @staticmethod
    def _render(item: Any, stream: str, prefix: bytes, seqs: dict[int, int]) -> bytes:
        if isinstance(item, bytes):
            return item
        if isinstance(item, F.BatchAck):
            return item.render(prefix, seqs)
        if isinstance(item, F.Failed):
            err = item.error if isinstance(item.error, BaseException) else error_for(
                item.error)
            return F.flow_err(item.seq, jsapi.error_response(err)["error"])
        err = item.error if isinstance(item.error, BaseException) else error_for(item.error)
        return error_document(stream, err)

    async def _store(self, stream: str, msgs: list[tuple]) -> list[Any]:
        """Store ``msgs`` in one call: each one's outcome (its stream sequence, a
        :class:`rayjet.engine.fast_batch.Duplicate`, or the error that refused it)."""
        try:
            link = await self._link(stream)
            if len(msgs) >= TABLE_FROM or any(m.header for m in msgs):
                cols = {"subject": arrays.binaries([m.subject for m in msgs], pa.string()),
                        "data": arrays.binaries([m.payload for m in msgs])}
                if any(m.header for m in msgs):
                    cols["headers"] = arrays.binaries([m.header or None for m in msgs])
                got: Any = await link.publish_table(pa.table(cols), literal_wildcards=True)
            else:
                got = await link.publish([(m.subject, m.payload, None) for m in msgs],
                                         literal_wildcards=True)
        except Exception as err:  # noqa: BLE001 - each message answered with it
            if isinstance(err, _UNREACHABLE) or not isinstance(err, APIError):
                self._forget(stream)
            return [err] * len(msgs)
        if isinstance(got, PubAcks):
            _, _, seqs, other = got.columns()
            return [_outcome(other[i]) if i in other else seqs[i] for i in range(len(msgs))]
        return [_outcome(a) for a in got]


def _outcome(answer: Any) -> Any:
    if isinstance(answer, BaseException):
        return answer
    if isinstance(answer, PubAck):
        return F.Duplicate(answer.seq) if answer.duplicate else answer.seq
    return answer


__all__ = ["BATCH_TIMEOUT", "MAX_OPEN_PER_STREAM", "MAX_OPEN_TOTAL", "FastBatches", "is_fast"]
