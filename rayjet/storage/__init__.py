"""The local append log of a stream replica: one StreamStore interface, two stores.

``MemStore`` keeps messages in RAM; ``FileStore`` in append-only block files with a
checksum per record and per sealed block (verified when it reopens: what damage took is
reported as lost, never served), crash recovery, optional compression and encryption at
rest. Both share the index and the limit logic (:mod:`rayjet.storage.base`), so they agree
on every observable result. Pure Python: no Ray here.
"""

from rayjet.storage.config import ALWAYS, StoreConfig
from rayjet.storage.filestore import FileStore
from rayjet.storage.limits import NEVER, marker_header, parse_ttl
from rayjet.storage.memstore import MemStore
from rayjet.storage.protocol import RawItem, StoredMsg, StoreState, StreamStore
from rayjet.storage.record import record_size

__all__ = [
    "ALWAYS",
    "NEVER",
    "FileStore",
    "MemStore",
    "RawItem",
    "StoreConfig",
    "StoreState",
    "StoredMsg",
    "StreamStore",
    "marker_header",
    "parse_ttl",
    "record_size",
]
