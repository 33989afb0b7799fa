"""The JetStream API over a NATS connection (:class:`GatewayJetStream`): the part of
:class:`rayjet.client.JetStream` the CLI's commands and ``rayjet.connect("nats://...",
user=...)`` use, over ``$JS.API``, answering with the same ``rayjet.api`` types and typed
errors. A bucket is :class:`rayjet.kv.KeyValue` or :class:`rayjet.objectstore.ObjectStore`
over this connection, as over the Ray one: both implement
:class:`rayjet.api.stream_access.StreamAccess`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from rayjet.api import ConsumerConfig, KeyValueConfig, ObjectStoreConfig, StreamConfig
from rayjet.api.headers import decode_headers, encode_headers
from rayjet.api.info import ConsumerInfo, PubAck, RawStreamMsg, StreamInfo
from rayjet.api.metadata import MsgMetadata
from rayjet.api.objectstore import DEFAULT_CHUNK_SIZE, ObjectInfo
from rayjet.api.stream_access import StoredMessage
from rayjet.errors import (
    APIError,
    BadRequestError,
    ConsumerNotFoundError,
    NoMessagesError,
    NotFoundError,
    ServiceUnavailableError,
)
from rayjet.errors import TimeoutError as AnswerTimeout
from rayjet.errors.exceptions import from_wire
from rayjet.kv import KeyValue, bucket_of_info, delete_bucket, open_bucket
from rayjet.kv import bucket_stream_config as kv_stream_config
from rayjet.objectstore import ObjectStore, delete_object_store, open_object_store
from rayjet.objectstore import bucket_stream_config as obj_stream_config
from rayjet.remote.connection import NoGateway, Reply, Requester

API = "$JS.API."
PIPELINE = 1000  # publishes in flight at once in publish_batch
SCAN_PAGE = 1000  # messages a scan asks for at a time
SCAN_IDLE_NS = 60 * 10**9  # a scan's consumer goes if the scan is abandoned this long
TAIL_PAGE = 256  # messages an ordered consumer asks for at a time


def connect_user(url: str, *, user: str | None = None, password: str | None = None,
                 token: str | None = None, nkey_seed: str | None = None,
                 timeout: float = 10.0) -> GatewayJetStream:
    """A JetStream API acting as one user of the gateway at ``url`` (``rayjet.connect`` with
    credentials): the gateway decides what this user's account holds and what it may do."""
    creds: dict[str, Any] = {}
    if user is not None or password is not None:
        creds.update(user=user or "", **{"pass": password or ""})
    if token is not None:
        creds["auth_token"] = token
    if nkey_seed is not None:
        from rayjet.auth.nkeys import KeyPair

        try:
            KeyPair(nkey_seed)
        except ValueError:
            raise BadRequestError("nkey_seed is not an nkey seed (SU...)") from None
    try:
        requester = Requester(url, timeout, name="rayjet-python", credentials=creds,
                              nkey_seed=nkey_seed, any_server=True)
    except NoGateway as exc:
        raise ServiceUnavailableError(f"no NATS server answers at {url}: {exc}") from None
    return GatewayJetStream(requester)


def _answer(reply: Reply, what: str, *, publish: bool = False) -> dict[str, Any]:
    if reply.status == 503 and publish:  # nothing captured it: as the Ray path says
        raise NotFoundError(f"no stream captures subject {what!r}: add a stream whose "
                            "subjects match it", spec="STREAM_NOT_FOUND")
    if reply.status == 503:
        raise ServiceUnavailableError(f"no responders for {what}")
    if reply.status:
        raise APIError(reply.description or f"status {reply.status}", code=reply.status)
    doc = json.loads(reply.data)
    if isinstance(doc, dict) and doc.get("error"):
        raise from_wire(doc["error"])
    return doc


class GatewayJetStream:
    """The CLI's part of :class:`rayjet.client.JetStream`, over a gateway's ``$JS.API``."""

    via_gateway = True

    def __init__(self, requester: Requester) -> None:
        self.nc = requester
        self.timeout = requester.timeout

    def _api(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = json.dumps(body).encode() if body else b""
        return _answer(self.nc.request(API + path, payload), API + path)

    def _paged(self, path: str, key: str, body: dict[str, Any]) -> list[Any]:
        out: list[Any] = []
        while True:
            doc = self._api(path, {**body, "offset": len(out)})
            page = doc.get(key) or []
            out.extend(page)
            if not page or len(out) >= int(doc.get("total") or 0):
                return out

    # -- streams ---------------------------------------------------------------------------
    def stream_names(self, subject: str | None = None) -> list[str]:
        return self._paged("STREAM.NAMES", "streams", {"subject": subject} if subject else {})

    def streams_info(self, subject: str | None = None) -> list[StreamInfo]:
        docs = self._paged("STREAM.LIST", "streams", {"subject": subject} if subject else {})
        return [StreamInfo.from_dict(d) for d in docs]

    def stream_info(self, name: str, subjects_filter: str | None = None,
                    deleted_details: bool = False) -> StreamInfo:
        body: dict[str, Any] = {}
        if subjects_filter:
            body["subjects_filter"] = subjects_filter
        if deleted_details:
            body["deleted_details"] = True
        return StreamInfo.from_dict(self._api(f"STREAM.INFO.{name}", body))

    def add_stream(self, config: StreamConfig | dict | None = None, **params: Any
                   ) -> StreamInfo:
        cfg = StreamConfig.from_dict({**(_dict(config)), **params})
        self._api(f"STREAM.CREATE.{cfg.name}", cfg.to_dict())
        return self.stream_info(cfg.name)  # with its cluster, as the Ray path answers

    def update_stream(self, config: StreamConfig | dict | None = None, **params: Any
                      ) -> StreamInfo:
        cfg = StreamConfig.from_dict({**(_dict(config)), **params})
        return StreamInfo.from_dict(self._api(f"STREAM.UPDATE.{cfg.name}", cfg.to_dict()))

    def delete_stream(self, name: str) -> bool:
        return bool(self._api(f"STREAM.DELETE.{name}").get("success"))

    def stream_leader_stepdown(self, name: str) -> str | None:
        """The new leader's id (None: one replica, which keeps leading), as the Python
        API's; the answer says only success, so the stream's info names the leader."""
        self._api(f"STREAM.LEADER.STEPDOWN.{name}")
        info = self.stream_info(name)
        return info.cluster.leader if info.config.num_replicas > 1 and info.cluster else None

    def stream_peer_remove(self, name: str, peer: str) -> StreamInfo:
        self._api(f"STREAM.PEER.REMOVE.{name}", {"peer": peer})
        return self.stream_info(name)

    def purge_stream(self, name: str, subject: str | None = None, seq: int | None = None,
                     keep: int | None = None) -> int:
        body = {k: v for k, v in (("filter", subject), ("seq", seq), ("keep", keep)) if v}
        return int(self._api(f"STREAM.PURGE.{name}", body).get("purged") or 0)

    def get_msg(self, name: str, seq: int | None = None, *, last_by_subject: str | None = None,
                next_by_subject: str | None = None, direct: bool = False) -> RawStreamMsg:
        if seq is None and not last_by_subject and not next_by_subject:
            raise BadRequestError("get_msg needs seq, last_by_subject or next_by_subject")
        body: dict[str, Any] = {}
        if last_by_subject:
            body["last_by_subj"] = last_by_subject
        else:
            body["seq"] = seq or 0
            if next_by_subject:
                body["next_by_subj"] = next_by_subject
        if direct:
            return self._direct_get(name, body)
        msg = self._api(f"STREAM.MSG.GET.{name}", body)["message"]
        return RawStreamMsg.from_dict({**msg, "stream": name})

    def _direct_get(self, name: str, body: dict[str, Any]) -> RawStreamMsg:
        reply = self.nc.request(f"{API}DIRECT.GET.{name}", json.dumps(body).encode())
        if reply.status == 404:
            raise NotFoundError("no message found", spec="NO_MESSAGE_FOUND")
        if reply.status == 503:
            raise ServiceUnavailableError(
                f"stream {name!r} does not answer direct gets (allow_direct is off)")
        if reply.status:
            raise APIError(reply.description, code=reply.status)
        h = dict(reply.headers)
        return RawStreamMsg.from_dict({
            "subject": h.pop("Nats-Subject", ""), "seq": int(h.pop("Nats-Sequence", 0)),
            "time": h.pop("Nats-Time-Stamp", None), "stream": h.pop("Nats-Stream", name),
            "data": reply.data, "hdrs": encode_headers(h) if h else None})

    def delete_msg(self, name: str, seq: int, erase: bool = False) -> bool:
        doc = self._api(f"STREAM.MSG.DELETE.{name}", {"seq": seq, "no_erase": not erase})
        return bool(doc.get("success"))

    # -- consumers -------------------------------------------------------------------------
    def consumer_names(self, stream: str) -> list[str]:
        return sorted(self._paged(f"CONSUMER.NAMES.{stream}", "consumers", {}))

    def consumers_info(self, stream: str) -> list[ConsumerInfo]:
        docs = self._paged(f"CONSUMER.LIST.{stream}", "consumers", {})
        return [ConsumerInfo.from_dict(d) for d in docs]

    def consumer_info(self, stream: str, name: str) -> ConsumerInfo:
        return ConsumerInfo.from_dict(self._api(f"CONSUMER.INFO.{stream}.{name}"))

    def add_consumer(self, stream: str, config: ConsumerConfig | dict | None = None,
                     **params: Any) -> ConsumerInfo:
        cfg = ConsumerConfig.from_dict({**(_dict(config)), **params})
        name = cfg.durable_name or cfg.name
        path = f"CONSUMER.CREATE.{stream}" + (f".{name}" if name else "")
        doc = self._api(path, {"stream_name": stream, "config": cfg.to_dict()})
        return ConsumerInfo.from_dict(doc)

    def consumer_leader_stepdown(self, stream: str, name: str) -> str | None:
        self._api(f"CONSUMER.LEADER.STEPDOWN.{stream}.{name}")
        info = self.consumer_info(stream, name)
        replicas = info.cluster.replicas if info.cluster else ()
        return info.cluster.leader if replicas else None

    def delete_consumer(self, stream: str, name: str) -> bool:
        return bool(self._api(f"CONSUMER.DELETE.{stream}.{name}").get("success"))

    # -- publishing ------------------------------------------------------------------------
    def publish(self, subject: str, payload: bytes = b"", timeout: float | None = None,
                stream: str | None = None, headers: dict[str, str] | None = None) -> PubAck:
        headers = dict(headers or {})
        if stream:
            headers["Nats-Expected-Stream"] = stream
        reply = self.nc.request(subject, _bytes(payload), headers or None, timeout)
        return PubAck.from_dict(_answer(reply, subject, publish=True))

    def publish_batch(self, msgs: Iterable[tuple], **_: Any) -> list[PubAck | APIError]:
        """Publish in order, up to PIPELINE requests in flight; one answer per message."""
        items = list(msgs)
        answers: list[PubAck | APIError] = []
        for start in range(0, len(items), PIPELINE):
            chunk = items[start:start + PIPELINE]
            replies = [self.nc.send(m[0], _bytes(m[1]), m[2] if len(m) > 2 else None)
                       for m in chunk]
            got = self.nc.replies(replies, self.timeout + len(chunk) / 1000)
            for m, r in zip(chunk, replies, strict=True):
                try:
                    answers.append(PubAck.from_dict(_answer(got[r], m[0], publish=True)))
                except APIError as err:
                    answers.append(err)
        return answers

    def pull_subscribe(self, subject: str | None = None, durable: str | None = None,
                       stream: str | None = None, **_: Any) -> PullSubscription:
        """An existing pull consumer to fetch from (the CLI's `consumer next` and `sub`), as
        :meth:`rayjet.client.JetStream.pull_subscribe` binds one (its stream by ``subject``
        when not named)."""
        if not durable:
            raise BadRequestError("through a gateway, pull_subscribe binds an existing "
                                  "consumer: name it with durable=")
        if stream is None:
            if subject is None:
                raise BadRequestError("pull_subscribe needs a subject or a stream")
            stream = self.find_stream_name_by_subject(subject)
        return PullSubscription(self.nc, stream, durable)

    def find_stream_name_by_subject(self, subject: str) -> str:
        names = self.stream_names(subject)
        if not names:
            raise NotFoundError(f"no stream captures subject {subject!r}",
                                spec="STREAM_NOT_FOUND")
        return names[0]

    def subscribe(self, subject: str | None = None, stream: str | None = None, *,
                  ordered_consumer: bool = True, deliver_policy: Any = None,
                  config: ConsumerConfig | None = None, headers_only: bool | None = None,
                  **params: Any) -> OrderedTail:
        """An ordered consumer (the only kind this client follows): every message of
        ``stream`` (or of the one capturing ``subject``) matching the filter, in order, once
        (the CLI's `sub`, `kv watch` and `object watch`)."""
        if not ordered_consumer:
            raise BadRequestError("through a gateway the CLI follows ordered consumers only")
        if not stream:
            if not subject:
                raise BadRequestError("give a subject or a stream to subscribe to")
            stream = self.find_stream_name_by_subject(subject)
        cfg = _dict(config)
        cfg.update((k, v) for k, v in _dict(ConsumerConfig(**params)).items() if k in params)
        if deliver_policy is not None:
            cfg["deliver_policy"] = getattr(deliver_policy, "value", deliver_policy)
        if headers_only:
            cfg["headers_only"] = True
        if subject and not cfg.get("filter_subject") and not cfg.get("filter_subjects"):
            cfg["filter_subject"] = subject
        return OrderedTail(self, stream, cfg)

    # -- key-value (rayjet.kv.KeyValue over this connection) ---------------------------------
    def create_key_value(self, config: KeyValueConfig | dict | None = None, **params: Any
                         ) -> KeyValue:
        cfg = KeyValueConfig.from_dict({**(_dict(config)), **params})
        return bucket_of_info(self, self.add_stream(kv_stream_config(cfg)))

    def key_value(self, bucket: str) -> KeyValue:
        return open_bucket(self, bucket)

    def delete_key_value(self, bucket: str) -> bool:
        return delete_bucket(self, bucket)

    # -- object store (rayjet.objectstore.ObjectStore over this connection) ------------------
    def create_object_store(self, config: ObjectStoreConfig | dict | str | None = None,
                            **params: Any) -> ObjectStore:
        if isinstance(config, str):
            config = {"bucket": config}
        cfg = ObjectStoreConfig.from_dict({**(_dict(config)), **params})
        info = self.add_stream(obj_stream_config(cfg))
        return ObjectStore(self, cfg.bucket, info.config.name)

    def object_store(self, bucket: str) -> ObjectStore:
        return open_object_store(self, bucket)

    def delete_object_store(self, bucket: str) -> bool:
        return delete_object_store(self, bucket)

    def publish_to_stream(self, stream: str, msgs: list[tuple], timeout: float | None = None
                          ) -> list[PubAck | APIError]:
        """What a bucket writes: its subjects belong to its stream. A stream that is gone
        raises its NotFoundError for the whole call, as the cluster's client does."""
        answers = self.publish_batch(msgs)
        gone = [a for a in answers if isinstance(a, NotFoundError)
                and a.spec == "STREAM_NOT_FOUND"]
        if answers and len(gone) == len(answers):
            raise gone[0]
        return answers

    def scan_stream(self, stream: str, filter_subject: str = ">", start_seq: int = 1,
                    end_seq: int | None = None, *, page_bytes: int = 0
                    ) -> Iterator[StoredMessage]:
        """The messages matching ``filter_subject``, in order: pulled through a short-lived
        consumer, a page at a time (``page_bytes`` given: as many object chunks of the
        default size as fit in it)."""
        batch = max(1, page_bytes // DEFAULT_CHUNK_SIZE) if page_bytes else SCAN_PAGE
        page: dict[str, Any] = {"batch": min(batch, SCAN_PAGE), "no_wait": True}
        cfg: dict[str, Any] = {"ack_policy": "none", "mem_storage": True, "num_replicas": 1,
                               "inactive_threshold": SCAN_IDLE_NS}
        if filter_subject and filter_subject != ">":
            cfg["filter_subject"] = filter_subject
        if start_seq > 1:
            cfg.update(deliver_policy="by_start_sequence", opt_start_seq=start_seq)
        name = self._api(f"CONSUMER.CREATE.{stream}",
                         {"stream_name": stream, "config": cfg})["name"]
        try:
            while True:
                got = 0
                for subject, reply, block, data in self.nc.pull(
                        f"{API}CONSUMER.MSG.NEXT.{stream}.{name}", page):
                    # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
                    tokens = reply.rsplit(".", 5)
                    seq, ts, pending = int(tokens[-4]), int(tokens[-2]), int(tokens[-1])
                    if end_seq and seq > end_seq:
                        return
                    yield StoredMessage(seq, subject, block or b"", data, ts)
                    got += 1
                    if not pending:
                        return
                if not got:
                    return
        finally:
            with contextlib.suppress(APIError):
                self._api(f"CONSUMER.DELETE.{stream}.{name}")

    def object_ref(self, bucket: str, stream: str, info: ObjectInfo, *,
                   ray_remote_args: dict[str, Any] | None = None) -> Any:
        """Object refs are Ray's: a connection through a gateway has none to give."""
        raise BadRequestError("object refs need a connection inside the Ray cluster "
                              "(rayjet.connect() without a nats:// URL); read the object "
                              "with get() here")

    def close(self) -> None:
        self.nc.close()


@dataclass
class Delivered:
    """A message a pull handed out."""

    subject: str
    data: bytes
    headers: dict[str, str] | None
    reply: str
    _nc: Requester

    @property
    def metadata(self) -> MsgMetadata:
        return MsgMetadata.from_ack_subject(self.reply)

    def ack_sync(self, timeout: float | None = None) -> None:
        """Acknowledge and wait until the consumer has it."""
        self._nc.request(self.reply, b"+ACK", timeout=timeout)

    def ack(self) -> None:
        self._nc.send(self.reply, b"+ACK")


class PullSubscription:
    def __init__(self, nc: Requester, stream: str, consumer: str) -> None:
        self.nc, self.stream, self.consumer = nc, stream, consumer

    def fetch(self, batch: int = 1, timeout: float | None = 5.0, **_: Any) -> list[Delivered]:
        """Up to ``batch`` messages: what is there, else what comes within ``timeout``;
        NoMessagesError when none came."""
        expires = max(timeout or 5.0, 0.001)
        out = self._pull({"batch": batch, "no_wait": True})  # what is there now
        if not out:  # else wait for some
            out = self._pull({"batch": batch, "expires": int(expires * 1e9)})
        if not out:
            raise NoMessagesError(f"no message from {self.stream} > {self.consumer} within "
                                  f"{expires:g}s")
        return out

    def _pull(self, body: dict[str, Any]) -> list[Delivered]:
        subject = f"{API}CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}"
        return [Delivered(msg_subject, data, decode_headers(block) if block else None, reply,
                          self.nc)
                for msg_subject, reply, block, data in self.nc.pull(subject, body)]

    def unsubscribe(self) -> None:
        """Nothing to undo: each fetch is one request."""


class OrderedTail:
    """An ordered consumer over the blocking connection: an ephemeral pull consumer that
    keeps no acks and lives in memory (it goes by itself once abandoned), read a page at a
    time: what is there at once, else one long poll. When its consumer is gone (a stream
    leader or gateway restart) another is made from the next stream sequence, as nats-py's
    ordered consumer resets."""

    def __init__(self, js: GatewayJetStream, stream: str, config: dict[str, Any]) -> None:
        self.js, self.stream = js, stream
        self._config = {k: v for k, v in config.items() if v is not None}
        self._config.update(ack_policy="none", mem_storage=True, num_replicas=1,
                            inactive_threshold=SCAN_IDLE_NS)
        self._buffer: list[Delivered] = []
        self._last_seq = 0  # the stream sequence of the last message handed out
        self.created_info = self._create()

    def _create(self) -> ConsumerInfo:
        cfg = dict(self._config)
        if self._last_seq:
            cfg.update(deliver_policy="by_start_sequence", opt_start_seq=self._last_seq + 1)
            cfg.pop("opt_start_time", None)
        self.created_info = self.js.add_consumer(self.stream, cfg)
        self._sub = PullSubscription(self.js.nc, self.stream, self.created_info.name)
        return self.created_info

    def consumer_info(self) -> ConsumerInfo:
        return self.js.consumer_info(self.stream, self._sub.consumer)

    def next_msg(self, timeout: float | None = 5.0) -> Delivered:
        """The next message; TimeoutError when none comes within ``timeout`` seconds."""
        if not self._buffer:
            try:
                self._buffer = self._sub.fetch(TAIL_PAGE, timeout)[::-1]
            except NoMessagesError as err:
                raise AnswerTimeout(str(err)) from None
            except APIError as err:
                if not (isinstance(err, ConsumerNotFoundError)
                        or err.code == 409 and "Deleted" in err.description):
                    raise
                self._create()  # the consumer is gone: start over where we are
                raise AnswerTimeout(f"no message from {self.stream} within {timeout}s"
                                    ) from None
        msg = self._buffer.pop()
        self._last_seq = msg.metadata.sequence.stream
        return msg

    def unsubscribe(self) -> None:
        with contextlib.suppress(APIError, OSError):
            self.js.delete_consumer(self.stream, self._sub.consumer)


def _dict(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    return config.to_dict() if hasattr(config, "to_dict") else dict(config)


def _bytes(data: Any) -> bytes:
    if isinstance(data, str):
        return data.encode()
    return bytes(data or b"")


