"""The files of a file-backed stream replica: its store and the raft log it is rebuilt from.

Both share the stream's ``sync_interval`` and encryption key, and the store syncs the log
before itself, so the store never keeps on disk a change whose log entry a power loss took.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from rayjet.clock import Clock
from rayjet.replication.wal import FileLogStorage
from rayjet.storage import FileStore
from rayjet.storage.config import StoreConfig

log = logging.getLogger(__name__)

BLOCK_SIZE_ENV = "RAYJET_STORE_BLOCK_SIZE"


def store_block_size() -> dict[str, int]:
    """The store's block size when the Ray nodes' environment sets one (bytes), as a
    ``store_config`` override: smaller blocks seal (and are indexed) sooner; tests use
    them to reach many blocks with little data."""
    raw = os.environ.get(BLOCK_SIZE_ENV, "").strip()
    if not raw:
        return {}
    try:
        return {"block_size": int(raw.replace("_", ""))}
    except ValueError:
        log.warning("%s=%r is not a whole number of bytes: ignored", BLOCK_SIZE_ENV, raw)
        return {}


def open_stream_files(directory: str | os.PathLike[str], config: StoreConfig,
                      clock: Clock | None = None) -> tuple[FileStore, FileLogStorage]:
    """The store in ``directory/store`` and the raft log in ``directory/raft``."""
    root = Path(directory)
    store = FileStore(str(root / "store"), config, clock=clock)
    log = FileLogStorage(root / "raft", sync_interval=config.sync_interval, clock=clock,
                         cipher=store.record_cipher())
    store.before_sync = log.sync
    return store, log


__all__ = ["BLOCK_SIZE_ENV", "open_stream_files", "store_block_size"]
