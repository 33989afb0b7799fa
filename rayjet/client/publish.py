"""Publishing: sync, batched, and asynchronous with a bounded in-flight window."""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict, deque
from typing import Any

import pyarrow as pa

from rayjet.api import PubAck
from rayjet.api import headers as H
from rayjet.client import column_publish as CP
from rayjet.client.publish_future import PublishFuture
from rayjet.errors import (
    APIError,
    BadRequestError,
    NotFoundError,
    SubjectNotCapturedError,
    TimeoutError,
)
from rayjet.subjects import matches_any, validate_stored_subject, validate_subject

MAX_CALL_MSGS = 10_000  # messages per actor call
# a call of at least this many messages crosses as Arrow columns (admitted in bulk)
COLUMNS_FROM = 64
# a safe-to-retry call stops waiting on one replica after this long and tries the others
# (a killed leader otherwise holds the call until Ray notices, 1-2 s)
ATTEMPT_TIMEOUT = 0.5
_SUBJECT_CACHE = 10_000
_KNOWN_STREAMS = 4_096  # streams whose subject filters route new subjects without a lookup


def _payload(data: Any) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str):
        return data.encode()
    raise BadRequestError(f"payload must be bytes (or str), not {type(data).__name__}")


def message_item(subject: Any, data: Any, headers: Any, literal_wildcards: bool = False
                 ) -> tuple[str, bytes, dict | None]:
    """One message checked as every publish checks it: (subject, payload bytes, headers)."""
    (validate_stored_subject if literal_wildcards else validate_subject)(subject)
    return subject, _payload(data), (H.validate_headers(headers) or None)


class PublishAPI:
    """Mixed into :class:`rayjet.client.JetStream`."""

    def _init_publish(self) -> None:
        self._subject_streams: OrderedDict[str, str] = OrderedDict()
        # the subject filters of the streams looked up so far: a new subject (a KV key, an
        # order id) that one of them captures needs no catalogue call (streams never
        # overlap, so the first match is the only one)
        self._stream_filters: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._async: AsyncPublisher | None = None
        self._async_lock = threading.Lock()

    def _stream_for(self, subject: str) -> str:
        name = self._subject_streams.get(subject)
        if name is None:
            name = self._known_capture(subject)
            if name is None:
                found = self._meta_call("lookup_subject", subject, self.account)
                if found is None:
                    raise NotFoundError(f"no stream captures subject {subject!r}: add a "
                                        "stream whose subjects match it",
                                        spec="STREAM_NOT_FOUND")
                name = found["config"]["name"]
                self._stream_filters[name] = tuple(found["config"].get("subjects") or ())
                if len(self._stream_filters) > _KNOWN_STREAMS:
                    self._stream_filters.popitem(last=False)
            self._subject_streams[subject] = name
            if len(self._subject_streams) > _SUBJECT_CACHE:
                self._subject_streams.popitem(last=False)
        return name

    def _known_capture(self, subject: str) -> str | None:
        for name, filters in self._stream_filters.items():
            if matches_any(subject, filters):
                return name
        return None

    def _forget_subjects(self, stream: str) -> None:
        """Drop the cached subject routes to ``stream`` (deleted, or its subjects changed)."""
        for subject in [k for k, v in self._subject_streams.items() if v == stream]:
            del self._subject_streams[subject]
        self._stream_filters.pop(stream, None)

    def _send(self, stream: str, msgs: list[tuple], timeout: float,
              rerouted: bool = False, columns: bool = False) -> list[Any] | CP.PubAcks:
        """Store ``msgs`` on ``stream``: one answer per message. ``columns``: answers that
        came as columns stay a PubAcks when none needs sending elsewhere (no PubAck per
        row is made until one is read)."""
        # a retry after an unknown outcome is safe only when every message has a msg id
        safe = all(h and H.MSG_ID in h for _, _, h in msgs)
        try:
            if len(msgs) >= COLUMNS_FROM:
                table = CP.messages_table(msgs)
                acks = CP.PubAcks(len(msgs))
                acks.take(stream, 0, self._send_columns(stream, table, timeout, safe))
                if columns and not any(isinstance(e, SubjectNotCapturedError)
                                       for e in acks.errors.values()):
                    return acks
                answers = acks.to_list()
            else:
                answers = self._stream_call(stream, "publish", msgs, timeout, timeout=timeout,
                                            retry_unknown=safe,
                                            attempt_timeout=ATTEMPT_TIMEOUT if safe else None)
        except NotFoundError:
            # the stream went away (deleted, perhaps by another client): its subjects may
            # belong to a new stream now, and the stream that is gone stored nothing
            self._subject_streams.clear()
            self._stream_filters.clear()
            now = {self._stream_for(subject) for subject, _, _ in msgs}
            if len(now) != 1 or stream in now:
                raise
            return self._send(now.pop(), msgs, timeout, columns=columns)
        stored = PubAck.stored
        answers = [stored(stream, a) if type(a) is int else a for a in answers]
        stale = [i for i, a in enumerate(answers) if isinstance(a, SubjectNotCapturedError)]
        if stale and not rerouted:
            self._reroute(stream, msgs, answers, stale, timeout)
        return answers

    def _reroute(self, stream: str, msgs: list[tuple], answers: list[Any], stale: list[int],
                 timeout: float) -> None:
        """``stream`` no longer captures the subjects of ``stale`` (its subjects changed
        since this client learnt them): forget its routes, look those subjects up again and
        send them where they belong now, once. A subject nobody captures keeps its error."""
        self._forget_subjects(stream)
        for i in stale:
            try:
                other = self._stream_for(msgs[i][0])
            except APIError:
                continue
            if other != stream:
                (answers[i],) = self._send(other, [msgs[i]], timeout, rerouted=True)

    def publish(self, subject: str, payload: bytes = b"", timeout: float | None = None,
                stream: str | None = None, headers: dict[str, str] | None = None) -> PubAck:
        """Store one message; returns its PubAck once a majority of replicas has it."""
        subject, data, hdrs = message_item(subject, payload, headers)
        if stream is not None:
            hdrs = {**(hdrs or {}), H.EXPECTED_STREAM: stream}
        name = self._stream_for(subject)
        (answer,) = self._send(name, [(subject, data, hdrs)], timeout or self.timeout)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def publish_batch(self, msgs, *, atomic: bool = False, timeout: float | None = None,
                      literal_wildcards: bool = False) -> list[PubAck | APIError]:
        """Publish ``(subject, data[, headers])`` items, in order, with few actor calls.

        Non-atomic: one answer per message, a PubAck or the APIError that refused it
        (nothing is dropped silently). ``atomic=True``: all messages (one stream) are stored
        together or none are; returns the PubAck of each message.

        ``msgs`` may also be a ``pyarrow.Table`` or ``RecordBatch`` with the columns
        ``subject``, ``data`` and optionally ``headers`` (map of string to string) and
        ``msg_id``: its rows cross to the stream leader as Arrow columns and are admitted in
        bulk; the answers come as a :class:`~rayjet.client.column_publish.PubAcks`."""
        if isinstance(msgs, pa.Table | pa.RecordBatch):
            if atomic:
                msgs = CP.table_messages(msgs)
            else:
                return self._publish_table(msgs, timeout or self.timeout, literal_wildcards)
        items = [message_item(*(m if len(m) == 3 else (*m, None)), literal_wildcards)
                 for m in msgs]
        if not items:
            return []
        timeout = timeout or self.timeout
        if atomic:
            streams = {self._stream_for(s) for s, _, _ in items}
            if len(streams) != 1:
                raise BadRequestError("an atomic batch must go to one stream; these subjects "
                                      f"belong to {sorted(streams)}")
            (stream,) = streams
            ack = self._stream_call(stream, "publish_atomic", items, uuid.uuid4().hex[:32],
                                    timeout, timeout=timeout, retry_unknown=False)
            first = ack.seq - len(items) + 1
            return [PubAck(stream=ack.stream, seq=first + i, batch=ack.batch,
                           count=ack.count) for i in range(len(items))]
        answers: list[Any] = []
        run: list[tuple] = []
        run_stream = None
        for item in items:
            try:
                stream = self._stream_for(item[0])
            except APIError as err:
                answers.extend(self._flush_run(run_stream, run, timeout))
                run, run_stream = [], None
                answers.append(err)
                continue
            if stream != run_stream or len(run) >= MAX_CALL_MSGS:
                answers.extend(self._flush_run(run_stream, run, timeout))
                run, run_stream = [], stream
            run.append(item)
        answers.extend(self._flush_run(run_stream, run, timeout))
        return answers

    def _publish_table(self, batch: Any, timeout: float, literal_wildcards: bool = False
                       ) -> CP.PubAcks:
        if isinstance(batch, pa.Table):
            batch = batch.combine_chunks()
        cols = CP.message_columns(batch)
        CP.check_client_side(cols, literal_wildcards)
        acks = CP.PubAcks(cols.count)
        if not cols.count:
            return acks
        streams, names = CP.row_streams(cols, self._stream_for, acks)
        safe = cols.msg_ids is not None and all(cols.msg_ids)
        for start, stop, stream in CP.stream_runs(streams):
            if stream < 0:
                continue  # no stream captures these subjects: answered already
            for a, b in CP.call_ranges(cols, start, stop):
                try:
                    answer = self._send_columns(names[stream], batch.slice(a, b - a), timeout,
                                                safe)
                except APIError as err:
                    acks.refuse(a, b - a, err)
                    continue
                acks.take(names[stream], a, answer)
        if any(isinstance(e, SubjectNotCapturedError) for e in acks.errors.values()):
            for name in names:  # stale routes: the next publish looks those subjects up
                self._forget_subjects(name)
        return acks

    def _send_columns(self, stream: str, part: Any, timeout: float, safe: bool
                      ) -> dict[str, Any]:
        """One call carrying ``part``'s rows to ``stream``'s leader (retried after an
        unknown outcome only when every row has a msg id). A call of many rows can take
        longer than ATTEMPT_TIMEOUT: it waits for its replica, as a retry sent while the
        first attempt is still stored would find its ids in process."""
        return self._stream_call(stream, "publish_columns", part, timeout, timeout=timeout,
                                 retry_unknown=safe)

    def _flush_run(self, stream: str | None, run: list[tuple], timeout: float) -> list[Any]:
        if not run:
            return []
        try:
            return self._send(stream, run, timeout)
        except APIError as err:
            return [err] * len(run)

    # -- async ------------------------------------------------------------------------------
    def publish_async(self, subject: str, payload: bytes = b"", wait_stall: float | None = None,
                      headers: dict[str, str] | None = None, stream: str | None = None
                      ) -> PublishFuture:
        """Queue a message; the future resolves to its PubAck (or the error)."""
        message = message_item(subject, payload, headers)
        if stream is not None:
            message = (message[0], message[1], {**(message[2] or {}), H.EXPECTED_STREAM: stream})
        with self._async_lock:
            if self._async is None:
                self._check_open()
                self._async = AsyncPublisher(self, self.max_pending_async)
        return self._async.submit(message, wait_stall)

    def publish_async_pending(self) -> int:
        return self._async.pending if self._async else 0

    def publish_async_completed(self, timeout: float | None = None) -> None:
        """Wait until every queued async publish has its answer."""
        if self._async is not None:
            self._async.drain(timeout)

    def _close_publish(self) -> None:
        if self._async is not None:
            self._async.stop()
            self._async = None


class AsyncPublisher:
    """A dispatcher thread: drains the queue into per-stream batches, one call each.

    The longer a call takes, the more messages the next one carries, so throughput grows
    with load. Order is kept per stream. ``window`` bounds messages not yet answered.
    Submitting is a deque append under one lock; the dispatcher is woken only when idle.
    """

    def __init__(self, js: PublishAPI, window: int) -> None:
        self.js = js
        self.window = window
        self._items: deque = deque()
        self._pending = 0  # submitted, not yet answered
        self._cv = threading.Condition()
        self._answered = threading.Condition()  # shared by this publisher's futures
        self._waiting = False  # the dispatcher sleeps for work
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="rayjet-publish", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, message: tuple[str, bytes, dict | None], wait_stall: float | None
               ) -> PublishFuture:
        with self._cv:
            if self._stopped:
                raise BadRequestError("the connection is closed")
            if self._pending >= self.window:
                deadline = None if wait_stall is None else time.monotonic() + wait_stall
                while self._pending >= self.window:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(
                            f"publish_async stalled: {self.window} messages are waiting for "
                            "acks; wait for them or raise max_pending_async")
                    self._cv.wait(remaining)
            self._pending += 1
            fut = PublishFuture(self._answered, message)
            self._items.append(fut)
            if self._waiting:
                self._cv.notify_all()
        return fut

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._items and not self._stopped:
                    self._waiting = True
                    self._cv.wait()
                self._waiting = False
                if not self._items and self._stopped:
                    return
                n = min(len(self._items), MAX_CALL_MSGS)
                batch = [self._items.popleft() for _ in range(n)]
            self._dispatch(batch)

    def _dispatch(self, batch: list[PublishFuture]) -> None:
        by_stream: dict[str, list[PublishFuture]] = {}
        answers: list[tuple[PublishFuture, Any]] = []
        done = 0
        for fut in batch:
            try:
                stream = self.js._stream_for(fut.message[0])
            except Exception as err:  # noqa: BLE001 - every failure answers its future
                answers.append((fut, err))
                fut.message = None
                continue
            by_stream.setdefault(stream, []).append(fut)
        for stream, futs in by_stream.items():
            msgs = [f.message for f in futs]
            for f in futs:
                f.message = None  # a future the caller holds does not keep the payload
            try:
                got = self.js._send(stream, msgs, self.js.timeout, columns=True)
            except Exception as err:  # noqa: BLE001
                got = [err] * len(futs)
            if isinstance(got, CP.PubAcks):
                refused = got.errors
                for row, fut in enumerate(futs):
                    if row in refused:
                        answers.append((fut, refused[row]))
                    else:
                        fut.set_row(got, row)
                done += len(futs) - len(refused)
            else:
                answers.extend(zip(futs, got, strict=True))
        for fut, answer in answers:
            if isinstance(answer, BaseException):
                fut.set_exception(answer)
            else:
                fut.set_result(answer)
        done += len(answers)
        with self._cv:
            self._pending -= done
            self._cv.notify_all()

    def drain(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"{self._pending} async publishes still pending")
                self._cv.wait(remaining)

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        self._thread.join(timeout=30)
