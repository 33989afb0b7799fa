"""The object store: large objects as chunked messages on a stream ``OBJ_<bucket>``.

Get a bucket with ``js.create_object_store(ObjectStoreConfig(bucket=...))`` or
``js.object_store(name)``; see :class:`ObjectStore`.
"""

from rayjet.objectstore.bucket import STREAM_PREFIX, bucket_stream_config, stream_name
from rayjet.objectstore.store import (
    DIGEST_PREFIX,
    ObjectResult,
    ObjectStore,
    ObjectStoreStatus,
    delete_object_store,
    encode_name,
    open_object_store,
)

__all__ = [
    "DIGEST_PREFIX",
    "STREAM_PREFIX",
    "ObjectResult",
    "ObjectStore",
    "ObjectStoreStatus",
    "bucket_stream_config",
    "delete_object_store",
    "encode_name",
    "open_object_store",
    "stream_name",
]
