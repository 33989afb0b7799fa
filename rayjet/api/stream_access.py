"""What a KV bucket or an object store needs of a JetStream.

KV and object store are conventions over streams (``KV_<bucket>``, ``OBJ_<bucket>``), as in
NATS: :class:`rayjet.kv.KeyValue` and :class:`rayjet.objectstore.ObjectStore` are written
against :class:`StreamAccess`, and two JetStreams implement it:
:class:`rayjet.client.JetStream` (the cluster over Ray and the data plane) and
:class:`rayjet.remote.jetstream.GatewayJetStream` (a NATS connection to a gateway). A contract test
(tests/client/test_stream_access_contract.py) runs the same checks on both.

:class:`StoredMessage` is one message as a stream stores it, the shape a scan yields.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from rayjet.api.info import PubAck, RawStreamMsg, StreamInfo
from rayjet.api.objectstore import ObjectInfo
from rayjet.api.stream import StreamConfig
from rayjet.errors import APIError

# (subject, data, headers or None): one message to publish
OutgoingMessage = tuple[str, bytes | str, dict[str, str] | None]


class StoredMessage(NamedTuple):
    """One stored message: its sequence, subject, NATS header block (``b""`` when it has
    no headers), payload and the time it was stored (ns since the epoch)."""

    seq: int
    subject: str
    header: bytes
    data: bytes
    ts_ns: int


@runtime_checkable
class StreamAccess(Protocol):
    """The operations buckets use. Errors are :mod:`rayjet.errors` types (a missing
    stream raises ``NotFoundError`` with ``spec == "STREAM_NOT_FOUND"``)."""

    timeout: float

    def publish_to_stream(self, stream: str, msgs: Sequence[OutgoingMessage],
                          timeout: float | None = None) -> list[PubAck | APIError]:
        """Store ``msgs`` in ``stream`` (whose subjects capture them), in order: one answer
        per message, a PubAck or the APIError that refused it."""
        ...

    def scan_stream(self, stream: str, filter_subject: str = ">", start_seq: int = 1,
                    end_seq: int | None = None, *, page_bytes: int = 0
                    ) -> Iterator[StoredMessage]:
        """The messages of ``stream`` matching ``filter_subject`` from ``start_seq`` (to
        ``end_seq``, when given), in order, read a page (about ``page_bytes``; 0: the
        implementation's default) at a time so memory stays bounded."""
        ...

    def object_ref(self, bucket: str, stream: str, info: ObjectInfo, *,
                   ray_remote_args: dict[str, Any] | None = None) -> Any:
        """A Ray object ref to the bytes of object version ``info`` (a Ray task reads and
        checks them), returned at once. Only a JetStream inside a Ray cluster has one."""
        ...

    def add_stream(self, config: StreamConfig | dict | None = None, **params: Any
                   ) -> StreamInfo: ...

    def update_stream(self, config: StreamConfig | dict | None = None, **params: Any
                      ) -> StreamInfo: ...

    def stream_info(self, name: str, subjects_filter: str | None = None,
                    deleted_details: bool = False) -> StreamInfo: ...

    def delete_stream(self, name: str) -> bool: ...

    def purge_stream(self, name: str, subject: str | None = None, seq: int | None = None,
                     keep: int | None = None) -> int: ...

    def get_msg(self, name: str, seq: int | None = None, *,
                last_by_subject: str | None = None, next_by_subject: str | None = None,
                direct: bool = False) -> RawStreamMsg: ...

    def subscribe(self, subject: str | None = None, *args: Any, **kwargs: Any) -> Any:
        """A subscription buckets open with keywords only: ``stream``,
        ``ordered_consumer``, ``deliver_policy``, ``config``, ``headers_only``."""
        ...

    def key_value(self, bucket: str) -> Any: ...

    def object_store(self, bucket: str) -> Any: ...
