"""Public data types: configs, infos, enums and header names (no I/O, no Ray).

Every type is a frozen dataclass with ``from_dict``/``to_dict`` speaking NATS JSON
(nanosecond durations, RFC 3339 times); in Python durations are float seconds and
timestamps aware datetimes. ``validate_*`` apply nats-server's create/update rules.
"""

from rayjet.api.account import AccountLimits
from rayjet.api.base import FrozenDict, Wire
from rayjet.api.consumer import ConsumerConfig, consumer_defaults
from rayjet.api.duration import (
    format_duration,
    from_ns,
    parse_duration,
    parse_rfc3339,
    parse_ttl,
    to_ns,
    to_rfc3339,
)
from rayjet.api.enums import (
    AckPolicy,
    DeliverPolicy,
    DiscardPolicy,
    KeyValueOp,
    PersistMode,
    PriorityPolicy,
    ReplayPolicy,
    RetentionPolicy,
    StorageType,
    StoreCompression,
)
from rayjet.api.info import (
    ClusterInfo,
    ConsumerInfo,
    LostStreamData,
    PeerInfo,
    PriorityGroupState,
    PubAck,
    RawStreamMsg,
    SequenceInfo,
    StreamInfo,
    StreamSourceInfo,
    StreamState,
)
from rayjet.api.kv import KeyValueConfig, validate_key_value_config
from rayjet.api.objectstore import (
    ObjectInfo,
    ObjectLink,
    ObjectMeta,
    ObjectMetaOptions,
    ObjectStoreConfig,
    validate_object_store_config,
)
from rayjet.api.stream import (
    STREAM_EDITABLE,
    ExternalStream,
    Placement,
    RePublish,
    StreamConfig,
    StreamConsumerLimits,
    StreamSource,
    SubjectTransformConfig,
    stream_defaults,
    validate_stream_config,
    validate_stream_update,
)
from rayjet.api.validate_consumer import (
    CONSUMER_EDITABLE,
    validate_consumer_config,
    validate_consumer_update,
)

# The config type under the name NATS clients use (the engine's transformer is
# rayjet.subjects.SubjectTransform).
SubjectTransform = SubjectTransformConfig

__all__ = [
    "CONSUMER_EDITABLE",
    "STREAM_EDITABLE",
    "AccountLimits",
    "AckPolicy",
    "ClusterInfo",
    "ConsumerConfig",
    "ConsumerInfo",
    "DeliverPolicy",
    "DiscardPolicy",
    "ExternalStream",
    "FrozenDict",
    "KeyValueConfig",
    "KeyValueOp",
    "LostStreamData",
    "ObjectInfo",
    "ObjectLink",
    "ObjectMeta",
    "ObjectMetaOptions",
    "ObjectStoreConfig",
    "PeerInfo",
    "PersistMode",
    "Placement",
    "PriorityGroupState",
    "PriorityPolicy",
    "PubAck",
    "RawStreamMsg",
    "RePublish",
    "ReplayPolicy",
    "RetentionPolicy",
    "SequenceInfo",
    "StorageType",
    "StoreCompression",
    "StreamConfig",
    "StreamConsumerLimits",
    "StreamInfo",
    "StreamSource",
    "StreamSourceInfo",
    "StreamState",
    "SubjectTransform",
    "SubjectTransformConfig",
    "Wire",
    "consumer_defaults",
    "format_duration",
    "from_ns",
    "parse_duration",
    "parse_rfc3339",
    "parse_ttl",
    "stream_defaults",
    "to_ns",
    "to_rfc3339",
    "validate_consumer_config",
    "validate_consumer_update",
    "validate_key_value_config",
    "validate_object_store_config",
    "validate_stream_config",
    "validate_stream_update",
]
