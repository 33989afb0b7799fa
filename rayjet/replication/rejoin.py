"""A replica whose files cannot be loaded rejoins its group empty instead of dying.

A raft log or snapshot that fails its checksum, contradicts itself (a commit index past
its last entry) or cannot be decoded is damage: the replica cannot know what it
acknowledged or whom it voted for. Failing to start would leave it dead until an operator
removes it; starting from what survived could let it vote for a candidate missing entries
it had acknowledged. So its files move aside (``<dir>.damaged``, for an operator to look
at; the previous such copy is replaced) and it starts empty with a ``REJOINING`` marker in
its raft log directory: it keeps its identity, takes entries and snapshots from whoever
leads like a new peer, and neither votes nor stands for election until its log holds a
committed entry of its leader's term (:attr:`rayjet.raft.node.Raft.rejoining`).

A wrong or missing encryption key and a failing disk (``OSError``) are not damage: they
are raised as they are, and nothing is moved.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from msgpack import UnpackException

from rayjet.errors import EncryptionKeyError, StoreCorruptionError
from rayjet.raft.errors import RaftError
from rayjet.replication.wal import REJOINING
from rayjet.storage.fsutil import fsync_dir, make_dirs

log = logging.getLogger(__name__)

T = TypeVar("T")

DAMAGED_SUFFIX = ".damaged"


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc``, raised while loading a replica's files, means they are damaged."""
    if isinstance(exc, EncryptionKeyError | OSError):
        return False
    return isinstance(exc, StoreCorruptionError | RaftError | UnpackException | ValueError
                      | TypeError | KeyError | IndexError)


def open_or_rejoin(root: str | os.PathLike[str], raft_dir: str | os.PathLike[str],
                   opener: Callable[[], T], what: str) -> tuple[T, str | None]:
    """``opener()`` (which loads every file under ``root``); when that finds damage, the
    files move to ``<root>.damaged``, ``raft_dir`` (inside ``root``) gets the REJOINING
    marker and ``opener()`` runs again on the empty directory. Returns what it opened and
    the damage found (None when there was none)."""
    try:
        return opener(), None
    except Exception as exc:
        if not is_damage(exc):
            raise
        reason = f"{type(exc).__name__}: {exc}"
    log.error("%s cannot load its files (%s): it moves them to %s%s and rejoins its group "
              "empty, catching up from the leader", what, reason, Path(root).name, DAMAGED_SUFFIX)
    quarantine(root)
    mark_rejoining(raft_dir)
    return opener(), reason


def quarantine(root: str | os.PathLike[str]) -> Path:
    """Move ``root`` aside to ``<root>.damaged`` (replacing an older one); ``root`` is
    left as a new empty directory."""
    root = Path(root)
    aside = root.with_name(root.name + DAMAGED_SUFFIX)
    if aside.exists():
        shutil.rmtree(aside)
    if root.exists():
        os.replace(root, aside)
    make_dirs(root)
    fsync_dir(root.parent)
    return aside


def mark_rejoining(raft_dir: str | os.PathLike[str]) -> None:
    """Write the marker before anything else lands in ``raft_dir``: a crash from here on
    still restarts as a rejoining replica, never as a fresh one."""
    raft_dir = Path(raft_dir)
    make_dirs(raft_dir)
    with open(raft_dir / REJOINING, "wb") as f:
        f.write(b"this replica's raft log was lost to damage; it votes again once caught up\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(raft_dir)


__all__ = ["DAMAGED_SUFFIX", "is_damage", "mark_rejoining", "open_or_rejoin", "quarantine"]
