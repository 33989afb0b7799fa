"""The key-value store: buckets as streams ``KV_<bucket>`` on ``$KV.<bucket>.>``.

Get a bucket with ``js.create_key_value(KeyValueConfig(bucket=...))`` or
``js.key_value(name)``; see :class:`KeyValue`.
"""

from rayjet.kv.bucket import (
    STREAM_PREFIX,
    bucket_of_stream,
    bucket_stream_config,
    is_valid_key,
    stream_name,
    subject_prefix,
    validate_bucket,
    validate_key,
)
from rayjet.kv.store import (
    BucketStatus,
    Entry,
    KeyValue,
    bucket_of_info,
    delete_bucket,
    open_bucket,
)
from rayjet.kv.watch import KeyWatcher

__all__ = [
    "STREAM_PREFIX",
    "BucketStatus",
    "Entry",
    "KeyValue",
    "KeyWatcher",
    "bucket_of_info",
    "bucket_of_stream",
    "bucket_stream_config",
    "delete_bucket",
    "is_valid_key",
    "open_bucket",
    "stream_name",
    "subject_prefix",
    "validate_bucket",
    "validate_key",
]
