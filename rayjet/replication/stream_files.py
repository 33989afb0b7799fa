"""The files of a file-backed stream replica: its store and the raft log it is rebuilt from.

Both share the stream's ``sync_interval`` and encryption key, and the store syncs the log
before itself, so the store never keeps on disk a change whose log entry a power loss took.
"""

from __future__ import annotations

import os
from pathlib import Path

from rayjet.clock import Clock
from rayjet.replication.wal import FileLogStorage
from rayjet.storage import FileStore
from rayjet.storage.config import StoreConfig


def open_stream_files(directory: str | os.PathLike[str], config: StoreConfig,
                      clock: Clock | None = None) -> tuple[FileStore, FileLogStorage]:
    """The store in ``directory/store`` and the raft log in ``directory/raft``."""
    root = Path(directory)
    store = FileStore(str(root / "store"), config, clock=clock)
    log = FileLogStorage(root / "raft", sync_interval=config.sync_interval, clock=clock,
                         cipher=store.record_cipher())
    store.before_sync = log.sync
    return store, log


__all__ = ["open_stream_files"]
