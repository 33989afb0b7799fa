"""``ObjectStore``: objects as chunk messages plus one metadata message (nats-py's ObjectStore).

An object's bytes go, in chunks, to ``$O.<bucket>.C.<nuid>`` (a fresh nuid per version);
its description (:class:`ObjectInfo` as JSON: size, chunk count, SHA-256 digest, headers,
metadata, link) goes to ``$O.<bucket>.M.<base64url(name)>`` with a subject roll-up, so the
stream keeps only the latest one. Replacing an object writes the new chunks first, then the
new metadata (the switch), then purges the old chunks: a failure at any point leaves the old
version readable (and purges the new chunks when the client is still there to do it).

Chunks are published and read in bounded groups, so an object of any size moves through a
few MiB of memory. ``js`` is any :class:`rayjet.api.stream_access.StreamAccess` (the
cluster's client or a connection through a gateway); nothing here talks to Ray directly.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, BinaryIO

from rayjet.api import (
    ObjectInfo,
    ObjectLink,
    ObjectMeta,
    ObjectMetaOptions,
    StreamInfo,
)
from rayjet.api import headers as H
from rayjet.api.objectstore import DEFAULT_CHUNK_SIZE
from rayjet.api.stream_access import StoredMessage, StreamAccess
from rayjet.errors import (
    APIError,
    BadObjectMetaError,
    BucketNotFoundError,
    DigestMismatchError,
    LinkIsABucketError,
    NotFoundError,
    ObjectAlreadySealedError,
    ObjectDeletedError,
    ObjectNotFoundError,
    StreamNotFoundError,
    StreamSealedError,
    TimeoutError,
)
from rayjet.objectstore.bucket import stream_name

DIGEST_PREFIX = "SHA-256="
GROUP_BYTES = 2 << 20  # chunks published per call: about this many bytes
# chunks read per call: about this many bytes (a page is held about three times over
# while it crosses: the socket's buffer, the frame, the decoded chunks)
READ_PAGE_BYTES = 2 << 20
_NUID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def new_nuid() -> str:
    """A 22-character random base62 id, like a NATS nuid."""
    return "".join(secrets.choice(_NUID_ALPHABET) for _ in range(22))


def encode_name(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()


def digest_of(sha: Any) -> str:
    return DIGEST_PREFIX + base64.urlsafe_b64encode(sha.digest()).decode()


def _now() -> datetime:
    return datetime.now(tz=UTC)


@dataclass
class ObjectResult:
    """What :meth:`ObjectStore.get` returns: the object's info and (unless written into a
    file) its bytes."""

    info: ObjectInfo
    data: bytes | None = b""


@dataclass(frozen=True)
class ObjectStoreStatus:
    stream_info: StreamInfo
    bucket: str

    @property
    def description(self) -> str | None:
        return self.stream_info.config.description

    @property
    def ttl(self) -> float | None:
        return self.stream_info.config.max_age or None

    @property
    def storage_type(self):
        return self.stream_info.config.storage

    @property
    def replicas(self) -> int:
        return self.stream_info.config.num_replicas

    @property
    def sealed(self) -> bool:
        return self.stream_info.config.sealed

    @property
    def size(self) -> int:
        """Bytes of every chunk and metadata message in the bucket."""
        return self.stream_info.state.bytes

    @property
    def is_compressed(self) -> bool:
        return self.stream_info.config.compression != "none"

    @property
    def backing_store(self) -> str:
        return "JetStream"

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.stream_info.config.metadata)


class _Chunks:
    """Reads fixed-size chunks from bytes, str or a (binary or text) file object."""

    def __init__(self, data: Any, size: int) -> None:
        self.size = size
        self._view: memoryview | None = None
        self._file: Any = None
        self._pos = 0
        if isinstance(data, str):
            data = data.encode()
        if isinstance(data, bytes | bytearray | memoryview):
            self._view = memoryview(data).cast("B")
        elif hasattr(data, "read"):
            self._file = getattr(data, "buffer", data)  # a text file: read its bytes
        else:
            raise BadObjectMetaError(err=f"put takes bytes, str or a file object, not "
                                         f"{type(data).__name__}")

    def next(self) -> bytes:
        """The next chunk; ``b""`` at the end."""
        if self._view is not None:
            chunk = bytes(self._view[self._pos:self._pos + self.size])
            self._pos += len(chunk)
            return chunk
        parts: list[bytes] = []
        want = self.size
        while want > 0:  # a short read is not the end (pipes, sockets)
            part = self._file.read(want)
            if not part:
                break
            if isinstance(part, str):
                part = part.encode()
            parts.append(part)
            want -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)


class ObjectStore:
    """An object store bucket. Get one with ``js.create_object_store(...)`` or
    ``js.object_store(name)``."""

    def __init__(self, js: StreamAccess, bucket: str, stream: str) -> None:
        self._js = js
        self._bucket = bucket
        self._stream = stream

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def stream(self) -> str:
        return self._stream

    def __repr__(self) -> str:
        return f"ObjectStore(bucket={self._bucket!r}, stream={self._stream!r})"

    # -- subjects and plumbing --------------------------------------------------------------
    def _chunk_subject(self, nuid: str) -> str:
        return f"$O.{self._bucket}.C.{nuid}"

    def _meta_subject(self, name: str) -> str:
        return f"$O.{self._bucket}.M.{encode_name(name)}"

    def _not_found(self) -> BucketNotFoundError:
        return BucketNotFoundError(name=self._bucket)

    def _sealed(self) -> ObjectAlreadySealedError:
        return ObjectAlreadySealedError(name=self._bucket)

    @contextmanager
    def _bucket_errors(self) -> Iterator[None]:
        """The bucket's stream is gone: BucketNotFoundError; it is sealed:
        ObjectAlreadySealedError."""
        try:
            yield
        except StreamSealedError:
            raise self._sealed() from None
        except NotFoundError as err:
            if err.spec == "STREAM_NOT_FOUND":
                raise self._not_found() from None
            raise

    def _publish_meta(self, info: ObjectInfo) -> int:
        body = json.dumps(info.to_dict(), separators=(",", ":")).encode()
        with self._bucket_errors():
            (ack,) = self._js.publish_to_stream(
                self._stream, [(self._meta_subject(info.name), body,
                                {H.ROLLUP: H.ROLLUP_SUBJECT})])
            if isinstance(ack, BaseException):
                raise ack
        return ack.seq

    def _purge_subject(self, subject: str) -> int:
        with self._bucket_errors():
            return self._js.purge_stream(self._stream, subject=subject)

    def _discard(self, subject: str) -> None:
        """Best effort clean-up after a failed put (the error that stopped it is raised)."""
        try:
            self._js.purge_stream(self._stream, subject=subject)
        except Exception:  # noqa: BLE001 - keep the original error
            pass

    def _scan(self, filter_: str) -> Iterator[StoredMessage]:
        with self._bucket_errors():
            yield from self._js.scan_stream(self._stream, filter_, page_bytes=READ_PAGE_BYTES)

    @staticmethod
    def _decode_info(data: bytes, ts: datetime | None) -> ObjectInfo:
        try:
            info = ObjectInfo.from_dict(json.loads(data))
        except (ValueError, TypeError, APIError) as err:
            raise BadObjectMetaError(err=f"unreadable object metadata ({err})") from None
        return dataclasses.replace(info, mtime=ts) if ts and not info.deleted else info

    # -- reads ------------------------------------------------------------------------------
    def info(self, name: str, show_deleted: bool = False) -> ObjectInfo:
        """The object's description; a deleted one raises ObjectDeletedError (an
        ObjectNotFoundError) unless ``show_deleted``."""
        if not isinstance(name, str) or not name:
            raise BadObjectMetaError(err="an object name is required")
        try:
            with self._bucket_errors():
                msg = self._js.get_msg(self._stream, last_by_subject=self._meta_subject(name),
                                       direct=True)
        except NotFoundError as err:
            if isinstance(err, BucketNotFoundError):
                raise
            raise ObjectNotFoundError(name=name) from None
        info = self._decode_info(msg.data, msg.time)
        if info.deleted and not show_deleted:
            raise ObjectDeletedError(name=name)
        return info

    get_info = info  # nats-py's name

    def get(self, name: str, writeinto: BinaryIO | None = None,
            show_deleted: bool = False) -> ObjectResult:
        """The object's bytes (``result.data``), or written into ``writeinto`` (then
        ``result.data`` is None). The SHA-256 digest, size and chunk count are checked: a
        mismatch raises DigestMismatchError (already written bytes are then not to be
        trusted). A link is followed to its object."""
        info = self.info(name, show_deleted=show_deleted)
        if info.is_link():
            link = info.options.link  # type: ignore[union-attr]
            if not link.name:
                raise LinkIsABucketError(name=name)
            return self._js.object_store(link.bucket).get(link.name, writeinto=writeinto)
        if not info.nuid:
            raise BadObjectMetaError(err=f"object {name!r} has no nuid")
        sink = getattr(writeinto, "buffer", writeinto)
        data = self._read_chunks(info, sink)
        return ObjectResult(info=info, data=data)

    def _read_chunks(self, info: ObjectInfo, sink: Any = None) -> bytes | None:
        """The bytes of the version ``info`` describes (or None once written into
        ``sink``), its chunk count, size and SHA-256 checked: DigestMismatchError when
        they differ."""
        parts: list[bytes] = []
        sha = hashlib.sha256()
        size = chunks = 0
        if info.chunks or info.size:
            for _seq, _subject, _hdr, data, _ts in self._scan(self._chunk_subject(info.nuid)):
                sha.update(data)
                size += len(data)
                chunks += 1
                if sink is not None:
                    sink.write(data)
                else:
                    parts.append(data)
        problem = None
        if chunks != info.chunks or size != info.size:
            problem = (f"found {chunks} chunks of {size} bytes, expected {info.chunks} "
                       f"chunks of {info.size} bytes")
        elif info.digest and digest_of(sha) != info.digest:
            problem = f"SHA-256 {digest_of(sha)} differs from {info.digest}"
        if problem:
            raise DigestMismatchError(name=info.name, err=problem)
        if sink is not None:
            return None
        data = b"".join(parts)
        del parts
        return data

    def get_ref(self, name: str, show_deleted: bool = False,
                ray_remote_args: dict[str, Any] | None = None) -> Any:
        """A Ray object ref to the object's bytes, returned at once: a Ray task on the
        cluster (placed, softly, beside the bucket's stream leader) reads the chunks from
        the stream replicas and checks the size and SHA-256, so a Spark or Ray job reads a
        large object without another copy through this client. Pass the ref to tasks or
        ``ray.get`` it. A missing or deleted object raises ObjectNotFoundError (or
        ObjectDeletedError) here; errors found while reading (DigestMismatchError, the
        object deleted or replaced meanwhile) are raised by ``ray.get``. A link is
        followed to its object. ``ray_remote_args`` overrides the task's options
        (default ``num_cpus=0``)."""
        info = self.info(name, show_deleted=show_deleted)
        if info.is_link():
            link = info.options.link  # type: ignore[union-attr]
            if not link.name:
                raise LinkIsABucketError(name=name)
            return self._js.object_store(link.bucket).get_ref(
                link.name, ray_remote_args=ray_remote_args)
        if not info.nuid:
            raise BadObjectMetaError(err=f"object {name!r} has no nuid")
        return self._js.object_ref(self._bucket, self._stream, info,
                                    ray_remote_args=ray_remote_args)

    def _read_version(self, info: ObjectInfo) -> bytes:
        """The bytes of the version ``info`` describes (what a ref from :meth:`get_ref`
        holds). When its chunks are gone because the object was deleted or replaced since,
        ObjectDeletedError or ObjectNotFoundError says so instead of a digest mismatch."""
        try:
            data = self._read_chunks(info)
        except DigestMismatchError:
            try:
                current = self.info(info.name, show_deleted=True)
            except ObjectNotFoundError:
                raise ObjectNotFoundError(name=info.name) from None
            if current.deleted and not info.deleted:
                raise ObjectDeletedError(name=info.name) from None
            if current.nuid != info.nuid:
                raise ObjectNotFoundError(
                    f"object {info.name!r} was replaced while its ref was being read",
                    name=info.name) from None
            raise
        assert data is not None
        return data

    def list(self, ignore_deletes: bool = False) -> list[ObjectInfo]:
        """Every object's info, deleted ones too unless ``ignore_deletes``."""
        latest: dict[str, ObjectInfo] = {}
        for _seq, subject, _hdr, data, ts in self._scan(f"$O.{self._bucket}.M.>"):
            info = self._decode_info(data, datetime.fromtimestamp(ts / 1e9, tz=UTC))
            latest.pop(subject, None)
            latest[subject] = info
        return [i for i in latest.values() if not (ignore_deletes and i.deleted)]

    def status(self) -> ObjectStoreStatus:
        with self._bucket_errors():
            info = self._js.stream_info(self._stream)
        return ObjectStoreStatus(stream_info=info, bucket=self._bucket)

    # -- writes -----------------------------------------------------------------------------
    def put(self, name: str | None, data: bytes | str | BinaryIO,
            meta: ObjectMeta | None = None) -> ObjectInfo:
        """Store an object from bytes, str or a file object, streaming it in chunks of
        ``meta.options.max_chunk_size`` (default 128 KiB). Replaces an object of the same
        name only once the new one is complete."""
        meta = meta if meta is not None else ObjectMeta(name=name or "")
        if not isinstance(meta, ObjectMeta):
            raise BadObjectMetaError(err=f"meta must be an ObjectMeta, not {type(meta).__name__}")
        if name:
            meta = dataclasses.replace(meta, name=name)
        if not isinstance(meta.name, str) or not meta.name:
            raise BadObjectMetaError(err="an object name is required")
        if meta.options is not None and meta.options.link is not None:
            raise BadObjectMetaError(err="put stores data: use add_link to make a link")
        chunk_size = (meta.options.max_chunk_size if meta.options else None) or DEFAULT_CHUNK_SIZE
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise BadObjectMetaError(err=f"max_chunk_size must be a positive int, not "
                                         f"{chunk_size!r}")
        reader = _Chunks(data, chunk_size)
        try:
            old: ObjectInfo | None = self.info(meta.name)
        except ObjectNotFoundError:
            old = None

        nuid = new_nuid()
        subject = self._chunk_subject(nuid)
        sha = hashlib.sha256()
        size = chunks = 0
        per_group = max(1, GROUP_BYTES // chunk_size)
        try:
            while True:
                group = []
                while len(group) < per_group:
                    chunk = reader.next()
                    if not chunk:
                        break
                    sha.update(chunk)
                    size += len(chunk)
                    group.append((subject, chunk, None))
                if not group:
                    break
                chunks += len(group)
                answers = self._js.publish_to_stream(self._stream, group)
                del group
                for answer in answers:
                    if isinstance(answer, BaseException):
                        raise answer
                if len(answers) < per_group:
                    break
            info = ObjectInfo(
                name=meta.name, bucket=self._bucket, nuid=nuid, size=size, mtime=_now(),
                chunks=chunks, digest=digest_of(sha), description=meta.description,
                headers=meta.headers, metadata=meta.metadata,
                options=ObjectMetaOptions(max_chunk_size=chunk_size))
            self._publish_meta(info)
        except BaseException:
            self._discard(subject)
            with self._bucket_errors():
                raise
        if old is not None and not old.is_link() and old.nuid:
            self._purge_subject(self._chunk_subject(old.nuid))
        return info

    def update_meta(self, name: str, meta: ObjectMeta) -> ObjectInfo:
        """Change an object's name, description, headers or metadata (not its data)."""
        info = self.info(name)
        if not isinstance(meta, ObjectMeta) or not meta.name:
            raise BadObjectMetaError(err="update_meta needs an ObjectMeta with a name")
        if meta.name != name:
            try:
                other = self.info(meta.name, show_deleted=True)
            except ObjectNotFoundError:
                other = None
            if other is not None and not other.deleted:
                raise BadObjectMetaError(err=f"an object named {meta.name!r} already exists")
        new = dataclasses.replace(info, name=meta.name, description=meta.description,
                                  headers=meta.headers, metadata=meta.metadata, mtime=_now())
        self._publish_meta(new)
        if meta.name != name:
            self._purge_subject(self._meta_subject(name))
        return new

    def delete(self, name: str) -> ObjectInfo:
        """Mark the object deleted (its metadata stays, as a tombstone) and purge its chunks."""
        info = self.info(name)
        gone = dataclasses.replace(info, deleted=True, size=0, chunks=0, digest=None,
                                   mtime=_now())
        try:
            self._publish_meta(gone)
        finally:
            if not info.is_link() and info.nuid:
                self._purge_subject(self._chunk_subject(info.nuid))
        return gone

    def _link(self, name: str, link: ObjectLink) -> ObjectInfo:
        if not isinstance(name, str) or not name:
            raise BadObjectMetaError(err="a link needs a name")
        try:
            existing = self.info(name)
        except ObjectNotFoundError:
            existing = None
        if existing is not None and not existing.is_link():
            raise BadObjectMetaError(
                err=f"object {name!r} exists and is not a link: delete it first")
        info = ObjectInfo(name=name, bucket=self._bucket, nuid=new_nuid(), mtime=_now(),
                          options=ObjectMetaOptions(link=link))
        self._publish_meta(info)
        return info

    def add_link(self, name: str, target: ObjectInfo) -> ObjectInfo:
        """A link named ``name`` to the object ``target`` (in this or another bucket).
        Links to links and to deleted objects are refused."""
        if not isinstance(target, ObjectInfo) or not target.name or not target.bucket:
            raise BadObjectMetaError(err="add_link needs the ObjectInfo of an object")
        store = self if target.bucket == self._bucket else self._js.object_store(target.bucket)
        try:
            current = store.info(target.name, show_deleted=True)
        except ObjectNotFoundError:
            raise ObjectNotFoundError(name=target.name) from None
        if current.deleted or target.deleted:
            raise BadObjectMetaError(err=f"object {target.name!r} is deleted: a link must "
                                         "point to a live object")
        if current.is_link() or target.is_link():
            raise BadObjectMetaError(err=f"object {target.name!r} is a link: link to the "
                                         "object it points to instead")
        return self._link(name, ObjectLink(bucket=target.bucket, name=target.name))

    def add_bucket_link(self, name: str, store: ObjectStore) -> ObjectInfo:
        """A link named ``name`` to the whole bucket of ``store``."""
        bucket = getattr(store, "bucket", None)
        if not isinstance(bucket, str) or not bucket:
            raise BadObjectMetaError(err="add_bucket_link needs an ObjectStore")
        return self._link(name, ObjectLink(bucket=bucket, name=None))

    def seal(self) -> None:
        """Make the bucket read-only for good (its stream is sealed)."""
        with self._bucket_errors():
            si = self._js.stream_info(self._stream)
        if not si.config.sealed:
            self._js.update_stream(dataclasses.replace(si.config, sealed=True))

    # -- watch ------------------------------------------------------------------------------
    def watch(self, *, ignore_deletes: bool = False, include_history: bool = False,
              updates_only: bool = False) -> ObjectWatcher:
        """Follow the bucket's objects: current infos (or all versions), one None, then every
        change (put, delete, meta update, link)."""
        sub, initial = _start_meta_watch(self._js, self._stream, f"$O.{self._bucket}.M.>",
                                         include_history=include_history,
                                         updates_only=updates_only)
        return ObjectWatcher(sub, initial, ignore_deletes=ignore_deletes,
                             info_of=self._watch_info)

    def _watch_info(self, msg: Any) -> ObjectInfo:
        ts = msg.metadata.timestamp
        return self._decode_info(msg.data, ts)


class ObjectWatcher:
    def __init__(self, sub: Any, initial: int, *, ignore_deletes: bool, info_of) -> None:
        self._sub = sub
        self._left = initial
        self._marked = False
        self._ignore_deletes = ignore_deletes
        self._info_of = info_of

    def updates(self, timeout: float | None = 5.0) -> ObjectInfo | None:
        """The next object info (None once, after the initial ones); raises TimeoutError
        when nothing arrives within ``timeout`` seconds."""
        while True:
            if self._left <= 0 and not self._marked:
                self._marked = True
                return None
            msg = self._sub.next_msg(timeout)
            if self._left > 0:
                self._left = msg.metadata.num_pending
            info = self._info_of(msg)
            if self._ignore_deletes and info.deleted:
                continue
            return info

    def __iter__(self) -> Iterator[ObjectInfo | None]:
        while True:
            try:
                yield self.updates(None)
            except TimeoutError:
                return

    def stop(self) -> None:
        self._sub.unsubscribe()


def _start_meta_watch(js: StreamAccess, stream: str, subject: str, *, include_history: bool,
                      updates_only: bool) -> tuple[Any, int]:
    from rayjet.api import ConsumerConfig, DeliverPolicy

    if updates_only:
        policy = DeliverPolicy.NEW
    elif include_history:
        policy = DeliverPolicy.ALL
    else:
        policy = DeliverPolicy.LAST_PER_SUBJECT
    sub = js.subscribe(stream=stream, ordered_consumer=True, deliver_policy=policy,
                       config=ConsumerConfig(filter_subject=subject))
    info = sub.created_info or sub.consumer_info()
    return sub, 0 if updates_only else info.num_pending


def open_object_store(js: StreamAccess, bucket: str) -> ObjectStore:
    """An existing object store over ``js`` (either client); BucketNotFoundError when there
    is none."""
    stream = stream_name(bucket)
    try:
        js.stream_info(stream)
    except StreamNotFoundError:
        raise BucketNotFoundError(name=bucket) from None
    return ObjectStore(js, bucket, stream)


def delete_object_store(js: StreamAccess, bucket: str) -> bool:
    try:
        return js.delete_stream(stream_name(bucket))
    except StreamNotFoundError:
        raise BucketNotFoundError(name=bucket) from None
