"""``$JS.API.STREAM.SNAPSHOT`` and ``RESTORE`` on the wire, as ``nats stream backup`` and
``restore`` speak them with nats-server.

Snapshot: the answer carries the stream's config and state, then the archive
(:mod:`rayjet.storage.backup_archive`) goes to the request's ``deliver_subject`` in chunks
of ``chunk_size`` bytes (1 KiB to 1 MiB, 128 KiB by default). Every full chunk has a reply
subject ``$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<index>``; at most ``window_size`` bytes
(8 MiB by default) wait for those acks. An empty message ends it: with the status header
``NATS/1.0 204`` after full chunks, ``408 No Interest`` when the receiver left, ``408 No
Flow Response`` when acks stop for 5 s, ``500 <error>`` when reading the stream failed.

Restore: the answer names ``$JS.SNAPSHOT.RESTORE.<stream>.<id>``; the client sends the
archive there in requests (each answered empty once kept), then an empty request, answered
with the stream's create response once the restore is done (or its 10062 error). Chunks
wait in a spool file; nothing is created before the whole archive is in and verified. A
restore with no chunk for 5 s is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import tempfile
import time
from typing import Any, NamedTuple

from rayjet.api import StreamConfig
from rayjet.errors import APIError, StreamNotFoundError, error_for
from rayjet.gateway import jsapi
from rayjet.gateway.protocol import status_header
from rayjet.subjects import is_valid_subject

log = logging.getLogger(__name__)

ACK_PREFIX = "$JS.SNAPSHOT.ACK."
RESTORE_PREFIX = "$JS.SNAPSHOT.RESTORE."
DEFAULT_CHUNK = 128 * 1024
DEFAULT_WINDOW = 8 << 20
ACK_TIMEOUT = 5.0  # s without an ack: the receiver stalled
INTEREST_WAIT = 2.0  # s a snapshot waits for someone to listen on its deliver subject
RESTORE_IDLE = 5.0  # s without a chunk: the restore is dropped
MAX_RESTORES = 8  # restores spooling at once through one gateway (each holds a spool file)
SPOOL_SLACK = 64 << 20  # bytes an archive may exceed its stream's max_bytes by (headers, index)


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _id() -> str:
    return secrets.token_hex(11).upper()


class _Request(NamedTuple):
    """An API request being answered (for its audit advisory)."""

    tokens: list[str]
    payload: bytes
    client: dict[str, Any] | None


class _Handler:
    """An internal subscription's owner calling ``fn(subject, reply, hdr, payload)``."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def deliver(self, sub: Any, subject: str, reply: str | None, hdr: bytes | None,
                payload: bytes) -> None:
        self.fn(subject, reply, hdr, payload)


class Backups:
    """Serves snapshot and restore requests for a :class:`JetStreamBridge`."""

    def __init__(self, bridge: Any) -> None:
        self.bridge = bridge
        self.restores = 0  # restores under way (for tests and monitoring)

    @property
    def gateway(self) -> Any:
        return self.bridge.gateway

    def _answer(self, reply: str, kind: str, doc: dict[str, Any],
                request: _Request | None = None) -> None:
        self._send(reply, _json({"type": jsapi.TYPE + kind, **doc}), request)

    def _error(self, reply: str, kind: str, exc: BaseException,
               request: _Request | None = None, **extra: Any) -> None:
        self._send(reply, _json({**jsapi.error_response(exc, kind), **extra}), request)

    def _send(self, reply: str, data: bytes, request: _Request | None) -> None:
        """An answer; the answer to the API request itself goes with its audit advisory."""
        audit = getattr(self.bridge, "audit", None)
        if request is not None and audit is not None:
            audit.answered(request.tokens, reply, request.payload, data, request.client)
        else:
            self.gateway.route(reply, None, None, data)

    # -- snapshot ---------------------------------------------------------------------------
    async def snapshot(self, tokens: list[str], reply: str, payload: bytes,
                       client: dict[str, Any] | None = None, newer_api: bool = False) -> None:
        kind = "stream_snapshot_response"
        stream = tokens[2]
        api = _Request(tokens, payload, client)
        if newer_api:  # before anything else, as nats-server checks it
            self._error(reply, kind, error_for("REQUIRED_API_LEVEL"), api)
            return
        if _empty(payload):
            self._error(reply, kind, error_for("BAD_REQUEST", "bad request"), api)
            return
        try:
            info = await self.bridge.call(self.bridge.js.stream_info, stream)
            req = jsapi.parse_body(payload)
        except APIError as exc:
            self._error(reply, kind, exc, api)
            return
        deliver = req.get("deliver_subject")
        if not isinstance(deliver, str) or not is_valid_subject(deliver):
            self._error(reply, kind, error_for("SNAPSHOT_DELIVER_SUBJECT_INVALID"), api)
            return
        chunk = min(max(1024, _int(req.get("chunk_size")) or DEFAULT_CHUNK), 1 << 20)
        window = min(max(1024, _int(req.get("window_size")) or DEFAULT_WINDOW), 32 << 20)
        window = max(window, chunk)
        chunks = self.bridge.js.backup_chunks(stream, consumers=not req.get("no_consumers"))
        try:
            head = await self.bridge.call(next, chunks)  # the stream is readable
        except APIError as exc:
            self._error(reply, kind, error_for("STREAM_SNAPSHOT", err=exc.description), api)
            return
        out = jsapi.stream_json(info)
        self._answer(reply, kind, {"config": out["config"], "state": out["state"]}, api)
        await self._send_chunks(stream, deliver, head, chunks, chunk, window // chunk)

    async def _send_chunks(self, stream: str, deliver: str, head: bytes, chunks: Any,
                           size: int, slots_max: int) -> None:
        ack_subject = f"{ACK_PREFIX}{stream}.{_id()}"
        slots = asyncio.Semaphore(slots_max)
        sub = self.gateway.subscribe_internal(ack_subject + ".>", _Handler(
            lambda *_: slots.release()))
        end: bytes | None = None
        try:
            if not await self._interest(deliver):
                end = status_header(408, "No Interest")
            else:
                end = await self._stream_out(deliver, ack_subject, head, chunks, size, slots)
        except APIError as exc:
            end = status_header(500, exc.description)
        except Exception as exc:  # noqa: BLE001 - the receiver learns why it ended
            log.warning("snapshot of %s failed: %s", stream, exc)
            end = status_header(500, str(exc) or type(exc).__name__)
        finally:
            self.gateway.unsubscribe_internal(sub)
            chunks.close()
        self.gateway.route(deliver, None, end, b"")

    async def _interest(self, deliver: str) -> bool:
        deadline = time.monotonic() + INTEREST_WAIT
        while not self.gateway.interest.has_interest(deliver):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)  # a subscriber arrives over its own connection
        return True

    async def _stream_out(self, deliver: str, ack_subject: str, head: bytes, chunks: Any,
                          size: int, slots: asyncio.Semaphore) -> bytes | None:
        """Send the archive; the end message's header (None: no full chunk was sent)."""
        buf = bytearray(head)
        index = 1
        done = False
        while True:
            while len(buf) < size and not done:
                piece = await self.bridge.call(next, chunks, None)
                if piece is None:
                    done = True
                else:
                    buf += piece
            if len(buf) < size:
                break
            try:
                await asyncio.wait_for(slots.acquire(), ACK_TIMEOUT)
            except TimeoutError:
                return status_header(408, "No Flow Response")
            if not self.gateway.interest.has_interest(deliver):
                return status_header(408, "No Interest")
            piece = bytes(buf[:size])
            del buf[:size]
            self.gateway.route(deliver, f"{ack_subject}.{size}.{index}", None, piece)
            index += 1
        if buf:
            self.gateway.route(deliver, None, None, bytes(buf))
        return status_header(204) if index > 1 else None

    # -- restore ----------------------------------------------------------------------------
    async def restore(self, tokens: list[str], reply: str, payload: bytes,
                      client: dict[str, Any] | None = None, newer_api: bool = False) -> None:
        kind = "stream_restore_response"
        stream = tokens[2]
        api = _Request(tokens, payload, client)
        if newer_api:
            self._error(reply, kind, error_for("REQUIRED_API_LEVEL"), api, deliver_subject="")
            return
        if _empty(payload):
            self._error(reply, kind, error_for("BAD_REQUEST", "bad request"), api,
                        deliver_subject="")
            return
        try:
            req = jsapi.parse_body(payload)
            raw = dict(req.get("config") or {})
            if not raw.get("name"):
                raw["name"] = stream
            if raw["name"] != stream:
                raise error_for("STREAM_MISMATCH")
            if "/" in stream or "\\" in stream:
                raise error_for("BAD_REQUEST", "stream name can not contain path separators")
            cfg = StreamConfig.from_dict(jsapi.without_reserved(raw))
            try:
                await self.bridge.call(self.bridge.js.stream_info, stream)
            except StreamNotFoundError:
                pass
            else:
                raise error_for("STREAM_NAME_EXIST_RESTORE")
        except APIError as exc:
            self._error(reply, kind, exc, api, deliver_subject="")
            return
        if self.restores >= MAX_RESTORES:
            self._error(reply, kind, error_for(
                "STREAM_RESTORE", err=f"{MAX_RESTORES} restores are under way through this "
                "gateway; try again when one ends"), api, deliver_subject="")
            return
        subject = f"{RESTORE_PREFIX}{stream}.{_id()}"
        job = _Restore(self, cfg, subject)
        self._answer(reply, kind, {"deliver_subject": subject}, api)
        self.restores += 1
        try:
            await job.run()
        finally:
            self.restores -= 1


class _Restore:
    """One restore: chunks into a spool file, then the restore from it."""

    def __init__(self, owner: Backups, cfg: StreamConfig, subject: str) -> None:
        self.owner = owner
        self.cfg = cfg
        self.spool = tempfile.TemporaryFile(prefix="rayjet-restore-")
        self.received = 0
        self.activity = asyncio.Event()
        self.end_reply: str | None = None
        self.failed = ""
        self.sub = owner.gateway.subscribe_internal(subject, _Handler(self._chunk))

    def _chunk(self, subject: str, reply: str | None, hdr: bytes | None,
               payload: bytes) -> None:
        if self.end_reply is not None or self.failed:
            return
        self.activity.set()
        if not reply:
            self.failed = "a restore chunk without a reply subject"
            return
        if not payload:
            self.end_reply = reply
            return
        limit = self.cfg.max_bytes * 2 + SPOOL_SLACK if self.cfg.max_bytes > 0 else 0
        try:
            if limit and self.received + len(payload) > limit:
                raise OSError(f"the archive exceeds what a stream of max_bytes "
                              f"{self.cfg.max_bytes} can hold")
            self.spool.write(payload)
        except OSError as exc:
            self.failed = f"cannot keep the chunk: {exc}"
            self.owner._error(reply, "stream_create_response",
                              error_for("STREAM_RESTORE", err=self.failed))
            return
        self.received += len(payload)
        self.owner.gateway.route(reply, None, None, b"")

    async def run(self) -> None:
        gateway = self.owner.gateway
        try:
            while self.end_reply is None and not self.failed:
                self.activity.clear()
                try:
                    await asyncio.wait_for(self.activity.wait(), RESTORE_IDLE)
                except TimeoutError:
                    log.warning("restore of %s stalled after %d bytes", self.cfg.name,
                                self.received)
                    return
            if self.failed:
                log.warning("restore of %s ended: %s", self.cfg.name, self.failed)
                return
            gateway.unsubscribe_internal(self.sub)
            self.sub = None
            await self._finish()
        finally:
            if self.sub is not None:
                gateway.unsubscribe_internal(self.sub)
            self.spool.close()

    async def _finish(self) -> None:
        bridge = self.owner.bridge
        kind = "stream_create_response"
        self.spool.seek(0)
        try:
            info = await bridge.call(bridge.js.restore_stream, self.spool, self.cfg)
        except APIError as exc:
            if exc.err_code not in (10062, 10130):
                exc = error_for("STREAM_RESTORE", err=exc.description)
            self.owner._error(self.end_reply, kind, exc)
            return
        with contextlib.suppress(APIError):
            await bridge.changed_stream(info.config.name, info.config)
        self.owner._answer(self.end_reply, kind, jsapi.stream_json(info))


def _empty(payload: bytes) -> bool:
    """nats-server's empty request: no bytes, or a JSON object without fields."""
    if not payload.strip():
        return True
    try:
        return json.loads(payload) == {}
    except ValueError:
        return False


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
