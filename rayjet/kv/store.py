"""``KeyValue``: a bucket's operations as conventions over its stream (nats-py's KeyValue).

A key is the subject ``$KV.<bucket>.<key>``; its revisions are that subject's messages (the
stream keeps ``history`` of them); a delete or purge is a message with a ``KV-Operation``
header (a purge also rolls the subject up). Compare-and-set uses the stream's
``Nats-Expected-Last-Subject-Sequence`` check, so it is decided once, on the stream leader.

``js`` is any :class:`rayjet.api.stream_access.StreamAccess` (the cluster's client or a
connection through a gateway); nothing here talks to Ray directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rayjet.api import KeyValueOp, StreamInfo
from rayjet.api import headers as H
from rayjet.api.stream_access import StoredMessage, StreamAccess
from rayjet.errors import (
    APIError,
    BadRequestError,
    BucketNotFoundError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
    StreamNotFoundError,
)
from rayjet.kv.bucket import bucket_of_stream, stream_name, validate_key, validate_key_filter
from rayjet.kv.watch import KeyWatcher, msg_time, start_watch
from rayjet.subjects import subject_matches

WRONG_LAST_SEQUENCE_CODES = (10071, 10164)
DEFAULT_PURGE_DELETES_AGE = 30 * 60.0  # seconds, as nats-py


@dataclass(frozen=True)
class Entry:
    """One revision of a key. ``delta`` is how many later revisions followed it in the
    answer it came from (0 for :meth:`KeyValue.get`); ``operation`` is PUT, DEL or PURGE."""

    bucket: str
    key: str
    value: bytes | None
    revision: int
    delta: int | None
    created: datetime | None
    operation: KeyValueOp = KeyValueOp.PUT


@dataclass(frozen=True)
class BucketStatus:
    """A bucket's configuration and state, read from its stream."""

    stream_info: StreamInfo
    bucket: str

    @property
    def values(self) -> int:
        return self.stream_info.state.messages

    @property
    def history(self) -> int:
        return self.stream_info.config.max_msgs_per_subject

    @property
    def ttl(self) -> float | None:
        return self.stream_info.config.max_age or None

    @property
    def limit_marker_ttl(self) -> float | None:
        return self.stream_info.config.subject_delete_marker_ttl or None

    @property
    def bytes(self) -> int:
        return self.stream_info.state.bytes

    @property
    def replicas(self) -> int:
        return self.stream_info.config.num_replicas

    @property
    def is_compressed(self) -> bool:
        return self.stream_info.config.compression != "none"

    @property
    def backing_store(self) -> str:
        return "JetStream"

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.stream_info.config.metadata)


def _operation(hdrs: dict[str, str]) -> KeyValueOp:
    op = hdrs.get(H.KV_OPERATION)
    if op:
        try:
            return KeyValueOp(op)
        except ValueError:
            return KeyValueOp.PUT
    reason = hdrs.get(H.MARKER_REASON)
    if reason in (H.MARKER_MAX_AGE, H.MARKER_PURGE):
        return KeyValueOp.PURGE  # a marker left by TTL expiry or a purge
    if reason == H.MARKER_REMOVE:
        return KeyValueOp.DELETE
    return KeyValueOp.PUT


def _ts(ns: int | None) -> datetime | None:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC) if ns else None


def ttl_header(msg_ttl: float | str | None) -> dict[str, str]:
    """``Nats-TTL`` for a per-key TTL (whole seconds, at least 1; or ``"never"``)."""
    if msg_ttl is None:
        return {}
    if isinstance(msg_ttl, str):
        return {H.TTL: msg_ttl}
    if isinstance(msg_ttl, bool) or not isinstance(msg_ttl, int | float) or msg_ttl < 1:
        raise BadRequestError(f"msg_ttl must be at least 1 second, not {msg_ttl!r}")
    return {H.TTL: f"{int(msg_ttl)}s"}


class KeyValue:
    """A key-value bucket. Get one with ``js.create_key_value(...)`` or ``js.key_value(name)``."""

    def __init__(self, js: StreamAccess, bucket: str, stream: str, *, pre: str | None = None,
                 direct: bool = True) -> None:
        self._js = js
        self._bucket = bucket
        self._stream = stream
        self._pre = pre if pre is not None else f"$KV.{bucket}."
        self._direct = direct
        # a mirror bucket reads its own stream and writes to its origin's
        origin = self._pre.split(".")[1]
        self._write_stream = stream if origin == bucket else f"KV_{origin}"

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def stream(self) -> str:
        return self._stream

    def __repr__(self) -> str:
        return f"KeyValue(bucket={self._bucket!r}, stream={self._stream!r})"

    # -- helpers ----------------------------------------------------------------------------
    def _not_found(self) -> BucketNotFoundError:
        return BucketNotFoundError(name=self._bucket)

    @contextmanager
    def _bucket_errors(self) -> Iterator[None]:
        """The bucket's stream is gone: BucketNotFoundError."""
        try:
            yield
        except NotFoundError as err:
            if err.spec == "STREAM_NOT_FOUND":
                raise self._not_found() from None
            raise

    def _publish(self, key: str, value: bytes | str, headers: dict[str, str] | None) -> int:
        try:
            with self._bucket_errors():
                (ack,) = self._js.publish_to_stream(
                    self._write_stream, [(self._pre + key, value, headers or None)])
                if isinstance(ack, BaseException):
                    raise ack
        except APIError as err:
            if err.err_code in WRONG_LAST_SEQUENCE_CODES:
                raise KeyWrongLastSequenceError(err.description, **err.fields) from None
            raise
        return ack.seq

    def _entry(self, key: str, seq: int, hdrs: dict[str, str], data: bytes, created,
               delta: int | None = 0) -> Entry:
        return Entry(bucket=self._bucket, key=key, value=data, revision=seq, delta=delta,
                     created=created, operation=_operation(hdrs))

    def _scan(self, filter_: str = ">") -> Iterator[StoredMessage]:
        with self._bucket_errors():
            yield from self._js.scan_stream(self._stream, filter_)

    # -- reads ------------------------------------------------------------------------------
    def get(self, key: str, revision: int | None = None) -> Entry:
        """The latest value of ``key`` (or the given revision). A key that was deleted or
        purged raises KeyDeletedError (a KeyNotFoundError), one never written
        KeyNotFoundError."""
        validate_key(key)
        subject = self._pre + key
        try:
            with self._bucket_errors():
                if revision:
                    msg = self._js.get_msg(self._stream, seq=revision, direct=self._direct)
                else:
                    msg = self._js.get_msg(self._stream, last_by_subject=subject,
                                           direct=self._direct)
        except NotFoundError as err:
            if isinstance(err, BucketNotFoundError):
                raise
            raise KeyNotFoundError(key=key) from None
        if msg.subject != subject:
            raise KeyNotFoundError(f"revision {revision} is not a revision of key {key!r}",
                                   key=key)
        entry = self._entry(key, msg.seq, msg.headers, msg.data, msg.time)
        if entry.operation is not KeyValueOp.PUT:
            err = KeyDeletedError(key=key)
            err.entry, err.op = entry, entry.operation
            raise err
        return entry

    def history(self, key: str) -> list[Entry]:
        """Every revision the bucket still holds for ``key``, oldest first (deletes too)."""
        validate_key(key)
        rows = list(self._scan(self._pre + key))
        if not rows:
            raise KeyNotFoundError(key=key)
        n = len(rows)
        return [self._entry(key, seq, H.decode_headers(hdr), data, _ts(ts), delta=n - 1 - i)
                for i, (seq, _subject, hdr, data, ts) in enumerate(rows)]

    def _latest(self) -> dict[str, tuple[int, KeyValueOp, int]]:
        """key -> (revision, operation, timestamp ns) of each key's latest message, in
        the order of those messages."""
        latest: dict[str, tuple[int, KeyValueOp, int]] = {}
        pre = self._pre
        for seq, subject, hdr, _data, ts in self._scan(">"):
            if not subject.startswith(pre):
                continue
            key = subject[len(pre):]
            latest.pop(key, None)
            op = _operation(H.decode_headers(hdr)) if hdr else KeyValueOp.PUT
            latest[key] = (seq, op, ts)
        return latest

    def keys(self, filters: str | Iterable[str] | None = None) -> list[str]:
        """Keys whose latest revision is a value (deleted and purged keys are left out),
        optionally only those matching any of ``filters`` (key patterns with ``*``/``>``).
        An empty bucket gives an empty list."""
        if isinstance(filters, str):
            filters = [filters]
        patterns = [self._pre + validate_key_filter(f) for f in filters or ()]
        out = []
        for key, (_seq, op, _ts_ns) in self._latest().items():
            if op is not KeyValueOp.PUT:
                continue
            if patterns and not any(subject_matches(self._pre + key, p) for p in patterns):
                continue
            out.append(key)
        return out

    def status(self) -> BucketStatus:
        with self._bucket_errors():
            info = self._js.stream_info(self._stream)
        return BucketStatus(stream_info=info, bucket=self._bucket)

    # -- writes -----------------------------------------------------------------------------
    def put(self, key: str, value: bytes | str) -> int:
        """Store a new value; returns its revision."""
        return self._publish(validate_key(key), value, None)

    def update(self, key: str, value: bytes | str, last: int | None = None) -> int:
        """Store ``value`` only if ``last`` is the key's latest revision (0 or None: the key
        has none); otherwise KeyWrongLastSequenceError (err_code 10071)."""
        return self._update(validate_key(key), value, last)

    def _update(self, key: str, value: bytes | str, last: int | None,
                msg_ttl: float | str | None = None) -> int:
        if last is not None and (isinstance(last, bool) or not isinstance(last, int)
                                 or last < 0):
            raise BadRequestError(f"last must be a revision (an int >= 0), not {last!r}")
        hdrs = {H.EXPECTED_LAST_SUBJECT_SEQ: str(last or 0), **ttl_header(msg_ttl)}
        return self._publish(key, value, hdrs)

    def create(self, key: str, value: bytes | str, msg_ttl: float | str | None = None) -> int:
        """Store ``value`` only if the key has no value: never written, deleted or purged.
        ``msg_ttl`` (seconds) makes this revision expire on its own."""
        validate_key(key)
        try:
            return self._update(key, value, 0, msg_ttl)
        except KeyWrongLastSequenceError as first:
            # the latest revision may be a delete or purge marker: create over it
            try:
                self.get(key)
            except KeyDeletedError as gone:
                return self._update(key, value, gone.entry.revision, msg_ttl)
            except KeyNotFoundError:
                pass
            raise first from None

    def delete(self, key: str, last: int | None = None) -> bool:
        """Mark the key deleted (its history is kept); ``last`` makes it conditional."""
        hdrs = {H.KV_OPERATION: KeyValueOp.DELETE.value}
        if last:
            hdrs[H.EXPECTED_LAST_SUBJECT_SEQ] = str(last)
        self._publish(validate_key(key), b"", hdrs)
        return True

    def purge(self, key: str, last: int | None = None,
              msg_ttl: float | str | None = None) -> bool:
        """Remove every revision of the key, leaving one purge marker (which expires after
        ``msg_ttl`` seconds when given)."""
        hdrs = {H.KV_OPERATION: KeyValueOp.PURGE.value, H.ROLLUP: H.ROLLUP_SUBJECT,
                **ttl_header(msg_ttl)}
        if last:
            hdrs[H.EXPECTED_LAST_SUBJECT_SEQ] = str(last)
        self._publish(validate_key(key), b"", hdrs)
        return True

    def purge_deletes(self, older_than: float = DEFAULT_PURGE_DELETES_AGE) -> int:
        """Remove the delete and purge markers of deleted keys (and what is left of their
        history). Markers younger than ``older_than`` seconds stay (their older revisions
        go); ``older_than <= 0`` removes every marker. Returns how many messages went.

        Each purge stops at the marker's revision, so a key written again meanwhile keeps
        its new value."""
        now_ns = datetime.now(tz=UTC).timestamp() * 1e9
        removed = 0
        for key, (seq, op, ts) in self._latest().items():
            if op is KeyValueOp.PUT:
                continue
            keep = older_than > 0 and (now_ns - ts) < older_than * 1e9
            with self._bucket_errors():
                removed += self._js.purge_stream(self._stream, subject=self._pre + key,
                                                 seq=seq if keep else seq + 1)
        return removed

    # -- watch ------------------------------------------------------------------------------
    def watch(self, keys: str | Iterable[str] = ">", *, include_history: bool = False,
              ignore_deletes: bool = False, meta_only: bool = False,
              updates_only: bool = False) -> KeyWatcher:
        """Follow ``keys`` (patterns with ``*`` and ``>``): the current values (or the whole
        history), then one None, then every change. Iterate it, or call ``updates()``."""
        patterns = [keys] if isinstance(keys, str) else list(keys)
        if not patterns:
            raise BadRequestError("watch needs at least one key pattern")
        subjects = [self._pre + validate_key_filter(k) for k in patterns]
        with self._bucket_errors():
            sub, initial = start_watch(self._js, self._stream, subjects,
                                       include_history=include_history,
                                       updates_only=updates_only, meta_only=meta_only)
        return KeyWatcher(self, sub, initial, ignore_deletes=ignore_deletes,
                          entry_of=self._watch_entry)

    def watchall(self, **kwargs: Any) -> KeyWatcher:
        return self.watch(">", **kwargs)

    def _watch_entry(self, msg: Any) -> Entry:
        key = msg.subject[len(self._pre):]
        hdrs = msg.headers or {}  # a message without headers may carry None
        return Entry(bucket=self._bucket, key=key, value=msg.data,
                     revision=msg.metadata.sequence.stream, delta=msg.metadata.num_pending,
                     created=msg_time(msg), operation=_operation(hdrs))


# -- a connection's bucket calls (the Ray client and the CLI's NATS client share them) -------
def bucket_of_info(js: StreamAccess, info: StreamInfo) -> KeyValue:
    """The bucket a KV stream holds, over ``js``."""
    name, pre = bucket_of_stream(info.config)
    return KeyValue(js, name, info.config.name, pre=pre, direct=bool(info.config.allow_direct))


def open_bucket(js: StreamAccess, bucket: str) -> KeyValue:
    """An existing bucket; BucketNotFoundError when there is none."""
    try:
        info = js.stream_info(stream_name(bucket))
    except StreamNotFoundError:
        raise BucketNotFoundError(name=bucket) from None
    return bucket_of_info(js, info)


def delete_bucket(js: StreamAccess, bucket: str) -> bool:
    try:
        return js.delete_stream(stream_name(bucket))
    except StreamNotFoundError:
        raise BucketNotFoundError(name=bucket) from None
