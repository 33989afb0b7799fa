"""A power-loss double for the files under one directory.

It watches ``os.fsync`` (monkeypatched) and records what each call made durable: fsync of
a file keeps the file's content as it is then (by inode), fsync of a directory keeps its
names (a creation, rename or unlink is durable once its directory is fsynced). Everything
under the root when the double starts counts as durable.

``lose_power()`` then rewrites the tree as a machine would find it after a power cut: each
directory holds the names its last fsync saw, each file the content of its last fsync
(empty when it was never fsynced), so unsynced appends, in-place writes, truncations,
creations, renames and unlinks are all undone. With ``torn`` a file that only grew since
its last fsync keeps a random prefix of the growth (part of a write reached the disk).

The double keeps a descriptor open on every inode it remembers, so the kernel cannot reuse
an inode number for a new file while the record of the old one is live. Objects opened
before the loss must be abandoned, not closed: their descriptors point at the old inodes,
which the rewrite unlinked, so anything they still write goes nowhere.
"""

from __future__ import annotations

import os
import random
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class _Durable:
    content: dict[int, bytes] = field(default_factory=dict)  # inode -> bytes at its fsync
    listing: dict[int, dict[str, tuple[int, bool]]] = field(default_factory=dict)
    held: dict[int, int] = field(default_factory=dict)  # inode -> descriptor kept open


class PowerLossDisk:
    def __init__(self, root: str | os.PathLike[str], monkeypatch) -> None:
        self.root = os.path.realpath(root)
        self.fsyncs = 0  # fsyncs under the root (tests may read it)
        self._d = _Durable()
        self._real_fsync = os.fsync
        self._mark_all_durable()
        monkeypatch.setattr(os, "fsync", self._fsync)

    # -- recording --------------------------------------------------------------------------
    def _fsync(self, fd: int) -> None:
        self._real_fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(" (deleted)") or not self._inside(path):
            return
        self.fsyncs += 1
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            self._record_dir(path, st.st_ino)
        else:
            self._record_file(path, st.st_ino)

    def _inside(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + os.sep)

    def _hold(self, path: str, ino: int) -> None:
        if ino not in self._d.held:
            self._d.held[ino] = os.open(path, os.O_RDONLY)

    def _record_file(self, path: str, ino: int) -> None:
        with open(path, "rb") as f:
            self._d.content[ino] = f.read()
        self._hold(path, ino)

    def _record_dir(self, path: str, ino: int) -> None:
        names = {}
        for entry in os.scandir(path):
            st = entry.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(st.st_mode)
            names[entry.name] = (st.st_ino, is_dir)
            self._hold(entry.path, st.st_ino)
        self._d.listing[ino] = names

    def _mark_all_durable(self) -> None:
        for d in self._d.held.values():
            os.close(d)
        self._d = _Durable()
        for dirpath, _dirs, files in os.walk(self.root):
            self._record_dir(dirpath, os.stat(dirpath).st_ino)
            for name in files:
                path = os.path.join(dirpath, name)
                self._record_file(path, os.stat(path).st_ino)

    # -- the power cut ----------------------------------------------------------------------
    def lose_power(self, torn: random.Random | None = None) -> dict[str, int]:
        """Rewrite the tree to its durable state; returns the bytes lost per file path."""
        tree = self._durable_tree(os.stat(self.root).st_ino, self.root, torn)
        lost = self._lost_bytes(self.root, tree)
        for entry in os.scandir(self.root):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        self._write_tree(self.root, tree)
        self._mark_all_durable()
        return lost

    def _durable_tree(self, dir_ino: int, path: str | None, torn: random.Random | None) -> dict:
        tree: dict = {}
        for name, (ino, is_dir) in self._d.listing.get(dir_ino, {}).items():
            child = os.path.join(path, name) if path else None
            if is_dir:
                tree[name] = self._durable_tree(ino, child, torn)
            else:
                tree[name] = self._durable_bytes(ino, child, torn)
        return tree

    def _durable_bytes(self, ino: int, path: str | None, torn: random.Random | None) -> bytes:
        kept = self._d.content.get(ino, b"")
        if torn is None or path is None or not os.path.isfile(path) or \
                os.stat(path).st_ino != ino:
            return kept
        live = Path(path).read_bytes()
        if len(live) > len(kept) and live.startswith(kept):
            return live[:len(kept) + torn.randrange(len(live) - len(kept) + 1)]
        return kept

    def _lost_bytes(self, path: str, tree: dict) -> dict[str, int]:
        lost = {}
        for dirpath, _dirs, files in os.walk(path):
            rel = os.path.relpath(dirpath, path)
            node = tree
            for part in ([] if rel == "." else rel.split(os.sep)):
                node = node.get(part) if isinstance(node, dict) else None
            for name in files:
                live = os.path.getsize(os.path.join(dirpath, name))
                kept = node.get(name) if isinstance(node, dict) else None
                kept_len = len(kept) if isinstance(kept, bytes) else 0
                if live != kept_len or kept is None:
                    lost[os.path.normpath(os.path.join(rel, name))] = live - kept_len
        return lost

    def _write_tree(self, path: str, tree: dict) -> None:
        for name, node in tree.items():
            child = os.path.join(path, name)
            if isinstance(node, dict):
                os.mkdir(child)
                self._write_tree(child, node)
            else:
                with open(child, "wb") as f:
                    f.write(node)

    def close(self) -> None:
        for d in self._d.held.values():
            os.close(d)
        self._d.held.clear()
