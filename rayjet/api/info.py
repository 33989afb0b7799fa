"""What the system reports back: stream and consumer infos, publish acks, stored messages."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rayjet.api.base import (
    BYTES,
    DURATION,
    INTS,
    MAP,
    OBJ,
    OBJS,
    TIME,
    FrozenDict,
    Wire,
    wire_field,
)
from rayjet.api.consumer import ConsumerConfig
from rayjet.api.stream import ExternalStream, StreamConfig, SubjectTransformConfig


@dataclass(frozen=True)
class PeerInfo(Wire):
    """One replica of a stream or consumer group as the leader sees it."""

    name: str = ""
    current: bool = False
    offline: bool = False
    active: float = wire_field(0.0, kind=DURATION)  # seconds since last heard from
    lag: int = 0
    peer: str = ""
    pending: bool = False


@dataclass(frozen=True)
class ClusterInfo(Wire):
    name: str | None = None
    raft_group: str | None = None
    leader: str | None = None
    leader_since: datetime | None = wire_field(None, kind=TIME)
    system_account: bool = False
    traffic_account: str | None = None
    replicas: tuple[PeerInfo, ...] = wire_field((), kind=OBJS, type_=PeerInfo)


@dataclass(frozen=True)
class LostStreamData(Wire):
    msgs: tuple[int, ...] = wire_field((), kind=INTS)
    bytes: int = 0


@dataclass(frozen=True)
class StreamState(Wire):
    messages: int = 0
    bytes: int = 0
    first_seq: int = 0
    first_ts: datetime | None = wire_field(None, kind=TIME)
    last_seq: int = 0
    last_ts: datetime | None = wire_field(None, kind=TIME)
    consumer_count: int = 0
    num_subjects: int = 0
    subjects: FrozenDict = wire_field(kind=MAP, default_factory=FrozenDict)
    num_deleted: int = 0
    deleted: tuple[int, ...] = wire_field((), kind=INTS)
    lost: LostStreamData | None = wire_field(None, kind=OBJ, type_=LostStreamData)


@dataclass(frozen=True)
class StreamSourceInfo(Wire):
    """How far a mirror or source is behind its origin."""

    name: str = ""
    external: ExternalStream | None = wire_field(None, kind=OBJ, type_=ExternalStream)
    lag: int = 0
    active: float = wire_field(0.0, kind=DURATION)  # seconds since last contact, -1 never
    error: FrozenDict | None = wire_field(None, kind=MAP)  # {"code", "err_code", "description"}
    filter_subject: str | None = None
    subject_transforms: tuple[SubjectTransformConfig, ...] = wire_field(
        (), kind=OBJS, type_=SubjectTransformConfig)


@dataclass(frozen=True)
class StreamInfo(Wire):
    config: StreamConfig = wire_field(kind=OBJ, type_=StreamConfig, default_factory=StreamConfig)
    state: StreamState = wire_field(kind=OBJ, type_=StreamState, default_factory=StreamState)
    created: datetime | None = wire_field(None, kind=TIME)
    cluster: ClusterInfo | None = wire_field(None, kind=OBJ, type_=ClusterInfo)
    mirror: StreamSourceInfo | None = wire_field(None, kind=OBJ, type_=StreamSourceInfo)
    sources: tuple[StreamSourceInfo, ...] = wire_field((), kind=OBJS, type_=StreamSourceInfo)
    domain: str | None = None
    timestamp: datetime | None = wire_field(None, kind=TIME, wire="ts")


@dataclass(frozen=True)
class SequenceInfo(Wire):
    """A consumer position: its own sequence and the matching stream sequence."""

    consumer_seq: int = 0
    stream_seq: int = 0
    last_active: datetime | None = wire_field(None, kind=TIME)


@dataclass(frozen=True)
class PriorityGroupState(Wire):
    """A priority group of a consumer: who holds its pin (pinned_client), and since when."""

    group: str = ""
    pinned_client_id: str | None = None
    pinned_ts: datetime | None = wire_field(None, kind=TIME)


@dataclass(frozen=True)
class ConsumerInfo(Wire):
    stream_name: str = ""
    name: str = ""
    config: ConsumerConfig = wire_field(
        kind=OBJ, type_=ConsumerConfig, default_factory=ConsumerConfig)
    created: datetime | None = wire_field(None, kind=TIME)
    delivered: SequenceInfo = wire_field(
        kind=OBJ, type_=SequenceInfo, default_factory=SequenceInfo)
    ack_floor: SequenceInfo = wire_field(
        kind=OBJ, type_=SequenceInfo, default_factory=SequenceInfo)
    num_ack_pending: int = 0
    num_redelivered: int = 0
    num_waiting: int = 0
    num_pending: int = 0
    cluster: ClusterInfo | None = wire_field(None, kind=OBJ, type_=ClusterInfo)
    push_bound: bool = False
    paused: bool = False
    pause_remaining: float | None = wire_field(None, kind=DURATION)
    timestamp: datetime | None = wire_field(None, kind=TIME, wire="ts")
    # consumers with priority groups: one entry, for the first group (as nats-server)
    priority_groups: tuple[PriorityGroupState, ...] = wire_field(
        (), kind=OBJS, type_=PriorityGroupState)


@dataclass(frozen=True)
class PubAck(Wire):
    """The answer to a publish: where the message was stored."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    domain: str | None = None
    val: str | None = None  # counter streams: the counter's new value
    batch: str | None = None  # atomic batches: the batch id
    count: int | None = None  # atomic batches: how many messages were committed

    def to_dict(self):
        out = super().to_dict()
        if not self.duplicate:
            out.pop("duplicate", None)
        return out

    @classmethod
    def stored(cls, stream: str, seq: int) -> PubAck:
        """The plain ack of a stored message, built without field normalisation (acks of
        large batches are made by the thousand; both fields are already well typed)."""
        ack = object.__new__(cls)
        ack.__dict__.update(stream=stream, seq=seq, duplicate=False, domain=None, val=None,
                            batch=None, count=None)
        return ack


@dataclass(frozen=True)
class RawStreamMsg(Wire):
    """A stored message as returned by a get (``data``/``hdrs`` are base64 on the wire)."""

    subject: str = ""
    seq: int = 0
    data: bytes = wire_field(b"", kind=BYTES)
    hdrs: bytes | None = wire_field(None, kind=BYTES)
    time: datetime | None = wire_field(None, kind=TIME)
    stream: str | None = None

    @property
    def sequence(self) -> int:
        return self.seq

    @property
    def headers(self) -> dict[str, str]:
        from rayjet.api.headers import decode_headers

        return decode_headers(self.hdrs)
