"""Atomic batch publish through the gateway, answered on the wire as nats-server 2.15.1
answers it (streams with ``allow_atomic_publish``).

A message whose header block names a non-empty ``Nats-Batch-Id`` belongs to a batch:
batches are kept per stream and batch id (not per connection: any client may continue
one), each message staged here until the one with ``Nats-Batch-Commit``. Each staged
message is answered with an empty message; the commit sends the whole batch to the
stream's leader in one call (all stored or none) and is answered with the PubAck of its
last message plus ``batch`` and ``count``. ``Nats-Batch-Commit: eob`` ends the batch
without being stored; the batch's last message is then stored with ``Nats-Batch-Commit:
1`` added, as nats-server stores it. The ``Nats-Batch-*`` headers stay in the stored
header blocks byte for byte.

Refusals answer ``{"error":...,"stream":<name>,"seq":0}`` and, from the first message
on, drop the batch (the following messages of that id get "incomplete"): a gap in
``Nats-Batch-Sequence`` (10176), no sequence (10175), an id longer than 64 bytes
(10179), a commit value other than ``1``/``eob`` (10200), more than 1000 messages
(10199), more than 50 batches open on one stream (10210), a stream without atomic
publish (10174). A batch without a message for 10 s is abandoned.

Batches live in the gateway that received them: a batch must be sent through one gateway.
"""

from __future__ import annotations

import json
import time
from typing import Any

from rayjet.api import headers as H
from rayjet.engine.batch import MAX_BATCH_ID_LEN, MAX_BATCH_SIZE
from rayjet.errors import (
    APIError,
    BadRequestError,
    ServiceUnavailableError,
    StreamNotFoundError,
    TimeoutError,
    error_for,
)
from rayjet.gateway import jsapi

BATCH_TIMEOUT = 10.0  # s without a message after which an open batch is abandoned
MAX_OPEN_PER_STREAM = 50  # nats-server's default of atomic batches in flight per stream
_ID_BYTES = H.BATCH_ID.encode()
_UNREACHABLE = (ServiceUnavailableError, StreamNotFoundError, TimeoutError)


class _Open:
    """One batch being collected: its messages (subject, payload, header block) so far."""

    __slots__ = ("msgs", "seen")

    def __init__(self, now: float) -> None:
        self.msgs: list[tuple[str, bytes, bytes]] = []
        self.seen = now


def batch_id(hdr: bytes | None) -> str:
    """The ``Nats-Batch-Id`` of a header block; "" when it has none (or an empty one, or
    the block cannot be read: an ordinary publish then)."""
    if not hdr or _ID_BYTES not in hdr:
        return ""
    try:
        return H.decode_headers(hdr).get(H.BATCH_ID, "")
    except (BadRequestError, UnicodeDecodeError):
        return ""


def error_document(stream: str, err: BaseException) -> bytes:
    """A refused publish's answer: the error, then the stream and seq 0, as nats-server
    writes it."""
    doc = jsapi.error_response(err)
    doc.update(stream=stream, seq=0)
    return json.dumps(doc, separators=(",", ":")).encode()


def _seq(value: str | None) -> int | None:
    value = (value or "").strip()
    return int(value) if value.isdigit() else None


class AtomicBatches:
    """The atomic batches open in one gateway. ``link(stream)`` (a coroutine) gives the
    :class:`rayjet.client.stream_link.StreamLink` a commit goes through."""

    def __init__(self, link: Any, forget: Any = None, timeout: float | None = None,
                 clock: Any = time.monotonic) -> None:
        self._link = link
        self._forget = forget or (lambda stream: None)
        self.timeout = BATCH_TIMEOUT if timeout is None else timeout
        self._clock = clock
        self._open: dict[str, dict[str, _Open]] = {}  # stream -> batch id -> batch
        self._swept = 0.0

    def open_batches(self, stream: str) -> int:
        return len(self._open.get(stream, ()))

    def expired(self, stream: str, bid: str) -> bool:
        """Whether batch ``bid`` of ``stream`` is not open (any more): never begun, ended,
        or idle for longer than the timeout."""
        batch = self._open.get(stream, {}).get(bid)
        return batch is None or self._clock() - batch.seen > self.timeout

    def keep(self, configs: dict[str, Any]) -> None:
        """Drop the open batches of streams deleted or no longer allowing atomic publish
        (``configs``: the catalogue's stream configs by name)."""
        for stream in list(self._open):
            config = configs.get(stream)
            if config is None or not config.allow_atomic_publish:
                del self._open[stream]

    def _sweep(self, now: float) -> None:
        """Drop the batches idle for longer than the timeout (at most once a second)."""
        if now - self._swept < 1.0:
            return
        self._swept = now
        for stream in list(self._open):
            batches = self._open[stream]
            for bid in [b for b, o in batches.items() if now - o.seen > self.timeout]:
                del batches[bid]
            if not batches:
                del self._open[stream]

    async def take(self, stream: str, config: Any, subject: str, hdr: bytes,
                   payload: bytes) -> bytes:
        """One message of a batch (``hdr`` names its id); the answer to its reply subject:
        empty while the batch is open, the PubAck or error document otherwise."""
        try:
            done = self._stage(stream, config, subject, hdr, payload)
        except APIError as err:
            return error_document(stream, err)
        if done is None:
            return b""
        bid, msgs = done
        try:
            link = await self._link(stream)
            ack = await link.publish_atomic(msgs, bid)
        except Exception as err:  # noqa: BLE001 - answered, as nats-server answers a refusal
            if isinstance(err, _UNREACHABLE) or not isinstance(err, APIError):
                self._forget(stream)  # look the stream's replicas up again next time
            return error_document(stream, err)
        return json.dumps(ack.to_dict(), separators=(",", ":")).encode()

    def _stage(self, stream: str, config: Any, subject: str, hdr: bytes, payload: bytes
               ) -> tuple[str, list[tuple[str, bytes, bytes]]] | None:
        """Check and stage one message; the batch (id, messages) when it commits."""
        now = self._clock()
        self._sweep(now)
        if config is not None and config.sealed:
            raise error_for("STREAM_SEALED")
        if config is not None and 0 < config.max_msg_size < len(hdr) + len(payload):
            raise error_for("STREAM_MSG_TOO_BIG")
        if config is None or not config.allow_atomic_publish:
            raise error_for("ATOMIC_PUBLISH_DISABLED")
        headers = H.decode_headers(hdr)
        bid = headers.get(H.BATCH_ID, "")
        if len(bid.encode()) > MAX_BATCH_ID_LEN:
            raise error_for("ATOMIC_PUBLISH_INVALID_BATCH_ID")
        seq = _seq(headers.get(H.BATCH_SEQ))
        if seq is None:
            raise error_for("ATOMIC_PUBLISH_MISSING_SEQ")
        commit = headers.get(H.BATCH_COMMIT)
        eob = commit == "eob"
        size = seq - 1 if eob else seq  # the end-of-batch marker is not stored
        batches = self._open.setdefault(stream, {})
        batch = batches.get(bid)
        if batch is not None and now - batch.seen > self.timeout:
            del batches[bid]  # abandoned: as if never begun
            batch = None
        if batch is None:
            if seq != 1:
                if size > MAX_BATCH_SIZE:
                    raise error_for("ATOMIC_PUBLISH_TOO_LARGE", size=MAX_BATCH_SIZE)
                raise error_for("ATOMIC_PUBLISH_INCOMPLETE")
            if len(batches) >= MAX_OPEN_PER_STREAM:
                raise error_for("ATOMIC_PUBLISH_TOO_MANY_INFLIGHT")
            batch = batches[bid] = _Open(now)
        batch.seen = now
        try:
            if commit is not None and commit not in ("1", "eob"):
                raise error_for("ATOMIC_PUBLISH_INVALID_COMMIT")
            if seq != len(batch.msgs) + 1 or (seq == 1 and eob):
                raise error_for("ATOMIC_PUBLISH_INCOMPLETE")
            if size > MAX_BATCH_SIZE:
                raise error_for("ATOMIC_PUBLISH_TOO_LARGE", size=MAX_BATCH_SIZE)
        except APIError:
            del batches[bid]
            raise
        if commit is None:
            batch.msgs.append((subject, payload, hdr))
            return None
        del batches[bid]
        msgs = batch.msgs
        if eob:  # the last message stored carries the commit nats-server gives it
            s, d, h = msgs[-1]
            msgs[-1] = (s, d, H.append_header(h, H.BATCH_COMMIT, "1"))
        else:
            msgs.append((subject, payload, hdr))
        return bid, msgs


__all__ = ["BATCH_TIMEOUT", "MAX_OPEN_PER_STREAM", "AtomicBatches", "batch_id",
           "error_document"]
