"""The key-value and object store half of the client API (buckets are streams)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from rayjet.api import KeyValueConfig, ObjectStoreConfig, PubAck
from rayjet.api.stream import SHARED_HOSTING
from rayjet.api.stream_access import StoredMessage
from rayjet.client.publish import MAX_CALL_MSGS, message_item
from rayjet.errors import APIError, BadRequestError
from rayjet.kv import KeyValue, bucket_of_info, delete_bucket, open_bucket
from rayjet.kv import bucket_stream_config as kv_stream_config
from rayjet.objectstore import ObjectStore, delete_object_store, open_object_store
from rayjet.objectstore import bucket_stream_config as obj_stream_config

_LAST_SEQ = (1 << 63) - 1
SCAN_PAGE_BYTES = 1 << 20
SCAN_PAGE_MSGS = 10_000


def _config(cls: type, config: Any, params: dict[str, Any]) -> Any:
    if isinstance(config, str):  # create_object_store("files") as nats-py allows
        params = {"bucket": config, **params}
        config = None
    if config is None:
        return cls(**params)
    if isinstance(config, dict):
        config = cls.from_dict(config)
    if not isinstance(config, cls):
        raise BadRequestError(f"pass a {cls.__name__} (or its fields), not "
                              f"{type(config).__name__}")
    return dataclasses.replace(config, **params) if params else config


class KeyValueAPI:
    """Mixed into :class:`rayjet.client.JetStream`; needs the stream API."""

    # -- plumbing for the kv and object store packages --------------------------------------
    def publish_to_stream(self, stream: str, msgs: list[tuple], timeout: float | None = None
                          ) -> list[PubAck | APIError]:
        """Publish ``(subject, data, headers)`` items to a stream known by name: as
        ``publish_batch`` (one answer per message) without looking up which stream captures
        each new subject (a bucket writes a new subject per key or object)."""
        items = [message_item(*m) for m in msgs]
        timeout = timeout or self.timeout
        answers: list[PubAck | APIError] = []
        for i in range(0, len(items), MAX_CALL_MSGS):
            answers.extend(self._send(stream, items[i:i + MAX_CALL_MSGS], timeout))
        return answers

    def scan_stream(self, stream: str, filter_subject: str = ">", start_seq: int = 1,
                    end_seq: int | None = None, *, page_bytes: int = 0,
                    page_msgs: int = SCAN_PAGE_MSGS) -> Iterator[StoredMessage]:
        """The messages matching ``filter_subject`` in order, read from the stream leader
        a page (about ``page_bytes``, default SCAN_PAGE_BYTES) at a time, so memory stays
        bounded whatever the stream holds."""
        seq, end = max(1, start_seq), end_seq or _LAST_SEQ
        while seq:
            cols = self._stream_call(stream, "read_range", seq, end, filter=filter_subject,
                                     max_msgs=page_msgs, max_bytes=page_bytes or SCAN_PAGE_BYTES)
            yield from map(StoredMessage._make, zip(cols["seq"], cols["subject"], cols["hdr"],
                                                    cols["data"], cols["ts"], strict=True))
            seq = cols["next"]

    # -- key-value --------------------------------------------------------------------------
    def create_key_value(self, config: KeyValueConfig | dict | None = None,
                         **params: Any) -> KeyValue:
        """Create a bucket (its stream ``KV_<bucket>``); creating it again with the same
        config returns it, with another config raises StreamNameInUseError."""
        cfg = _config(KeyValueConfig, config, params)
        return bucket_of_info(self, self._add_stream(kv_stream_config(cfg),
                                                     self.hosting or SHARED_HOSTING))

    def key_value(self, bucket: str) -> KeyValue:
        """An existing bucket; BucketNotFoundError when there is none."""
        return open_bucket(self, bucket)

    def delete_key_value(self, bucket: str) -> bool:
        return delete_bucket(self, bucket)

    # -- object store -----------------------------------------------------------------------
    def create_object_store(self, config: ObjectStoreConfig | dict | str | None = None,
                            **params: Any) -> ObjectStore:
        """Create an object store (its stream ``OBJ_<bucket>``)."""
        cfg = _config(ObjectStoreConfig, config, params)
        info = self._add_stream(obj_stream_config(cfg), self.hosting or SHARED_HOSTING)
        return ObjectStore(self, cfg.bucket, info.config.name)

    def object_store(self, bucket: str) -> ObjectStore:
        """An existing object store; BucketNotFoundError when there is none."""
        return open_object_store(self, bucket)

    def delete_object_store(self, bucket: str) -> bool:
        return delete_object_store(self, bucket)
