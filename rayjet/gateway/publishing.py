"""Publishes captured by the gateway: queued as they arrive, stored a batch at a time in
the order they came (one batch in flight), each stream's run sent from the gateway's event
loop to its leader (:class:`rayjet.client.stream_link.StreamLink`), and each PubAck written
to the publish's reply subject from the answers' columns."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pyarrow as pa

from rayjet.client.column_publish import PubAcks
from rayjet.errors import APIError, BadRequestError, NotFoundError, SubjectNotCapturedError
from rayjet.gateway import jsapi
from rayjet.gateway.batching import AtomicBatches, batch_id
from rayjet.gateway.fast_batch import FastBatches, is_fast
from rayjet.gateway.inbound import InboundPublish
from rayjet.gateway.pushing import PUSH_HOLD, push_holds
from rayjet.storage import arrow_arrays as arrays

log = logging.getLogger(__name__)

PUBLISH_BATCH = 2000  # messages stored per step at most
TABLE_FROM = 32  # publishes that leave as an Arrow table (fewer: the list form costs less)


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


class Publisher:
    """The publish queue of one gateway (``bridge``: its JetStreamBridge)."""

    def __init__(self, bridge: Any) -> None:
        self.bridge = bridge
        self._pub_queue: list[InboundPublish] = []
        self._pub_wake = asyncio.Event()
        self._queued = 0  # publishes queued so far
        self._stored = 0  # publishes answered so far
        self._stored_changed = asyncio.Event()
        self._stream_links: dict[str, Any] = {}  # stream -> its StreamLink
        self.batches = AtomicBatches(self.link, self.forget_streams)
        self.fast = FastBatches(self.link, self.forget_streams)
        self._releasing: asyncio.Task | None = None  # PubAcks held for push deliveries

    def start(self) -> None:
        """Events of the running loop (a gateway started again runs on a new one)."""
        self._pub_wake = asyncio.Event()
        self._stored_changed = asyncio.Event()

    def forget_streams(self, name: str | None = None) -> None:
        """Drop the links to ``name`` (every stream when None): deleted, re-created or moved,
        the next publish asks the catalogue again."""
        if name is None:
            self._stream_links.clear()
        else:
            self._stream_links.pop(name, None)

    async def link(self, stream: str) -> Any:
        """The StreamLink to ``stream``: kept, else asked of the client in the pool (it may
        ask the catalogue)."""
        link = self._stream_links.get(stream)
        if link is None:
            link = await self.bridge.call(self.bridge.js.stream_link, stream)
            self._stream_links[stream] = link
        return link

    def capture(self, subject: str, reply: str | None, hdr: bytes | None,
                payload: bytes) -> bool:
        """Queue a message for the stream that captures ``subject``; False when none does."""
        if subject.startswith("$JS.") or self.bridge.stream_for(subject) is None:
            return False
        self._pub_queue.append(InboundPublish(subject, reply, hdr, payload))
        self._queued += 1
        self._pub_wake.set()
        return True

    async def stored_so_far(self) -> None:
        """Wait until every publish queued before now has its answer (a request that
        follows publishes on one connection sees them, as with nats-server)."""
        mark = self._queued
        while self._stored < mark:
            self._stored_changed.clear()
            await self._stored_changed.wait()

    async def run(self) -> None:
        """Store what is queued, a batch at a time (one in flight: a client's messages
        keep their order), and answer each publish's reply subject."""
        while True:
            await self._pub_wake.wait()
            self._pub_wake.clear()
            while self._pub_queue:
                batch = self._pub_queue[:PUBLISH_BATCH]
                del self._pub_queue[:PUBLISH_BATCH]
                started = time.perf_counter()
                answers = await self._store(batch)
                log.debug("stored %d publishes in %.1f ms", len(batch),
                          (time.perf_counter() - started) * 1e3)
                holds = self._holds(batch, answers)
                if holds or (self._releasing is not None and not self._releasing.done()):
                    # after what is held before them: replies keep their order
                    self._releasing = asyncio.get_running_loop().create_task(
                        self._release(self._releasing, holds, batch, answers))
                else:
                    self._answer(batch, answers)
                self._stored += len(batch)
                self._stored_changed.set()

    def _answer(self, batch: list[tuple], answers: list[bytes]) -> None:
        route = self.bridge.gateway.route
        for (_, reply, _, _), answer in zip(batch, answers):
            if reply:
                if type(answer) is list:  # a fast batch's: none, one or several
                    for one in answer:
                        route(reply, None, None, one)
                else:
                    route(reply, None, None, answer)

    def _holds(self, batch: list[tuple], answers: list[bytes]) -> list:
        """What the PubAcks of ``batch`` wait for: the push deliveries of their messages by
        the pumps this gateway runs (nats-server's push delivery leaves before the PubAck;
        clients and their tests count on it)."""
        pumps_of = self.bridge.pumps_of
        by_stream: dict[str, list[tuple[str, int]]] = {}
        for (subject, reply, _, _), answer in zip(batch, answers):
            stream = self.bridge.stream_for(subject) if reply else None
            if (stream is None or not pumps_of(stream) or type(answer) is list
                    or b'"seq"' not in answer):
                continue
            try:
                doc = json.loads(answer)
            except ValueError:
                continue
            if "error" not in doc and not doc.get("duplicate") and doc.get("seq"):
                by_stream.setdefault(stream, []).append((subject, int(doc["seq"])))
        return [h for stream, stored in by_stream.items()
                for h in push_holds(pumps_of(stream), stored)]

    async def _release(self, before: asyncio.Task | None, holds: list, batch: list[tuple],
                       answers: list[bytes]) -> None:
        if before is not None:
            await asyncio.shield(before)
        if holds:
            _, pending = await asyncio.wait([f for _, _, f in holds], timeout=PUSH_HOLD)
            for pump, seq, fut in holds:
                if fut in pending:
                    pump.hold_timed_out(seq)  # a slow subscriber: hold no more for it
                    fut.cancel()
        self._answer(batch, answers)

    def _publish_batch(self, msgs: Any) -> Any:
        # a client's publish to 'a.*' is stored with '*' as a literal token, as nats-server
        # does (the gateway refuses wildcard PUBs from pedantic clients before this)
        return self.bridge.js.publish_batch(msgs, literal_wildcards=True)

    async def _store(self, batch: list[tuple]) -> list[bytes]:
        """Store a run of publishes; the PubAck (or error) document of each, in order.
        A message of an atomic batch (a Nats-Batch-Id header) is staged or commits its
        batch (:mod:`rayjet.gateway.batching`) between the runs around it."""
        answers: list[bytes] = []
        start = 0
        stream_for = self.bridge.stream_for
        while start < len(batch):  # runs of one stream each: one request per run
            subject, reply, hdr, payload = batch[start]
            stream = stream_for(subject)
            if stream is not None and is_fast(reply, hdr):  # before atomic, as nats-server
                end = start + 1
                while end < len(batch) and stream_for(batch[end].subject) == stream and is_fast(
                        batch[end].reply, batch[end].header):
                    end += 1
                answers.extend(await self.fast.take(
                    stream, self.bridge.config_of(stream), batch[start:end],
                    self.bridge.domain))
                start = end
                continue
            if stream is not None and hdr and batch_id(hdr):
                answers.append(await self.batches.take(
                    stream, self.bridge.config_of(stream), subject, hdr, payload))
                start += 1
                continue
            end = start + 1
            while end < len(batch) and stream_for(batch[end].subject) == stream and not (
                    batch[end].header and batch_id(batch[end].header)) and not is_fast(
                    batch[end].reply, batch[end].header):
                end += 1
            answers.extend(await self._store_run(stream, batch[start:end]))
            start = end
        return answers

    async def _store_run(self, stream: str | None, run: list[tuple]) -> list[bytes]:
        """One stream's run of publishes, sent from this loop to its leader. The client's
        own routing (in the pool) takes what the link cannot: a stream the catalogue no
        longer names, a subject the stream stopped capturing, a run refused as a whole
        before anything was stored."""
        msgs, one = _messages(run)
        if stream is None:
            return await self._store_in_pool(msgs, one, len(run))
        try:
            link = await self.link(stream)
            if isinstance(msgs, pa.Table):
                got: Any = await link.publish_table(msgs, literal_wildcards=True)
            else:
                got = await link.publish(msgs, literal_wildcards=True)
        except (NotFoundError, BadRequestError):  # nothing stored: the client's routing
            self._stream_links.pop(stream, None)
            return await self._store_in_pool(msgs, one, len(run))
        except APIError as exc:  # perhaps stored (a leader lost mid-call): never twice
            self._stream_links.pop(stream, None)
            return [pub_ack_json(exc)] * len(run)
        docs = ack_documents(got)
        stale = [i for i, a in _refused(got) if isinstance(a, SubjectNotCapturedError)]
        if stale:  # the stream's subjects changed since the catalogue was read
            await self.bridge.refresh_catalogue()
            for i in stale:
                docs[i:i + 1] = await self._store_in_pool(msgs, one, 1, at=i)
        return docs

    async def _store_in_pool(self, msgs: Any, one: Any, count: int, at: int = 0
                             ) -> list[bytes]:
        """``count`` messages from ``at`` through the blocking client in the pool. Header
        blocks are stored as the client sent them (a NATS client reads them back byte for
        byte)."""
        part = one(at, count) if (at or count != _count(msgs)) else msgs
        try:
            return ack_documents(await self.bridge.call(self._publish_batch, part))
        except Exception:  # noqa: BLE001 - refused as a whole: answer each on its own
            answers: list[bytes] = []
            for i in range(at, at + count):
                try:
                    answers.extend(ack_documents(
                        await self.bridge.call(self._publish_batch, one(i, 1))))
                except Exception as exc:  # noqa: BLE001
                    answers.append(pub_ack_json(exc))
            return answers


def _messages(batch: list[InboundPublish]) -> tuple[Any, Any]:
    """Queued publishes as what a publish
    takes, and ``one(i, n)``: ``n`` of them from ``i``. Many, or any with a header block:
    an Arrow table (header blocks kept as sent); a few without: the list form, which
    costs less."""
    headers = any(m.header for m in batch)
    if headers or len(batch) >= TABLE_FROM:
        cols = {"subject": arrays.binaries([m.subject for m in batch], pa.string()),
                "data": arrays.binaries([m.payload for m in batch])}
        if headers:
            cols["headers"] = arrays.binaries([m.header or None for m in batch])
        table = pa.table(cols)
        return table, table.slice
    msgs = [(m.subject, m.payload, None) for m in batch]
    return msgs, lambda i, n: msgs[i:i + n]


def _count(msgs: Any) -> int:
    return msgs.num_rows if isinstance(msgs, pa.Table) else len(msgs)


def _refused(answers: Any) -> list[tuple[int, Any]]:
    """(row, error) of each publish refused, from either form's answers."""
    if isinstance(answers, PubAcks):
        return list(answers.errors.items())
    return [(i, a) for i, a in enumerate(answers) if isinstance(a, BaseException)]


def ack_documents(answers: Any) -> list[bytes]:
    """The answer document of each publish; a table's answers (PubAcks) are written from
    their columns, a PubAck made only for the rows that are not a plain stored ack."""
    if not isinstance(answers, PubAcks):
        return [pub_ack_json(a) for a in answers]
    names, which, seqs, other = answers.columns()
    heads = [b'{"stream":%s,"seq":' % json.dumps(n).encode() for n in names] or [b""]
    out = [b"%s%d}" % (heads[w], s) for w, s in zip(which, seqs)]
    for row, a in other.items():
        out[row] = pub_ack_json(a)
    return out


def pub_ack_json(answer: Any) -> bytes:
    """A publish's answer document; the common plain ack without a dict or json.dumps
    (a batch of publishes answers thousands at once)."""
    if isinstance(answer, BaseException):
        return _json(jsapi.error_response(answer))
    if not (answer.duplicate or answer.domain or answer.val or answer.batch
            or answer.count) and '"' not in answer.stream and "\\" not in answer.stream:
        return b'{"stream":"%s","seq":%d}' % (answer.stream.encode(), answer.seq)
    return _json(answer.to_dict())
