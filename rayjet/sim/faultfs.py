"""A fault-injecting view of the real file system, for the replica simulator.

Replicas write real files (under one base directory, one sub-directory per replica); this
layer watches and bends the calls rayjet makes, so that one seed can decide what a disk
does. Installed around one run (``with FaultFS(base, rng):``) by patching ``os.fsync``,
``os.pwrite``, ``os.write``, ``os.ftruncate``, ``os.open`` and ``builtins.open``, and removed
afterwards. Outside ``base`` every call goes straight to the real function.

**Durability.** ``os.fsync`` under ``base`` does not reach the disk (the simulation decides
what survives): it records what the call made durable. An fsync of a file keeps the file's
bytes as they are then (by inode); an fsync of a directory keeps its names (a creation,
rename or unlink is durable once its directory is fsynced). Everything present when the
layer is installed counts as durable. :meth:`lose_power` rewrites one replica's tree (or
every one) as a machine finds it after a power cut: each directory holds the names its
last fsync saw, each file the bytes of its last fsync (empty when never fsynced). With
``torn`` a file that only grew since its last fsync keeps a random prefix of the growth.
The layer holds a descriptor on each inode it remembers (so the kernel cannot hand the
number to a new file) until the inode is unlinked and no durable directory names it.

**Crashes.** :meth:`abandon` is a process dying: every descriptor open on a file of that
replica is pointed at ``/dev/null`` (``dup2``), so the objects the dead process left behind
(a buffered log file, block files) write nowhere, even when garbage collection closes them.
What they had handed to the OS stays (the page cache survives a process crash).

**Disk errors.** :meth:`set_fault` makes one replica's writes (``pwrite``, ``write``, file
objects opened for writing, ``ftruncate``, creating a file) and/or fsyncs fail with ENOSPC
or EIO until :meth:`clear_fault`; a write may first go through in part (a short write), as
a full disk does. An fsync that fails records nothing.
"""

from __future__ import annotations

import builtins
import errno
import gc
import io
import os
import random
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass

FAULT_KINDS = ("enospc", "eio-write", "eio-fsync")


@dataclass
class Fault:
    kind: str  # one of FAULT_KINDS
    partial: bool = False  # the first failing write lets a prefix through
    hits: int = 0  # calls that failed

    def on_write(self) -> int | None:
        if self.kind == "enospc":
            return errno.ENOSPC
        if self.kind == "eio-write":
            return errno.EIO
        return None

    def on_fsync(self) -> int | None:
        if self.kind == "enospc":
            return errno.ENOSPC
        if self.kind == "eio-fsync":
            return errno.EIO
        return None


class FaultFS:
    def __init__(self, base: str | os.PathLike[str], rng: random.Random) -> None:
        self.base = os.path.realpath(base)
        self.rng = rng  # short writes: how much of the failing write goes through
        self.fsyncs = 0  # fsyncs recorded (files and directories)
        self.faults: dict[str, Fault] = {}  # root -> its active fault
        self._content: dict[int, bytes] = {}  # inode -> bytes at its last fsync
        self._listing: dict[int, dict[str, tuple[int, bool]]] = {}  # dir inode -> names
        self._held: dict[int, int] = {}  # inode -> descriptor we keep open on it
        self._held_fds: set[int] = set()
        self._gc_at = 256
        self._devnull = -1
        self._real: dict[str, object] = {}

    # -- install / remove -------------------------------------------------------------------
    def __enter__(self) -> FaultFS:
        self._devnull = os.open(os.devnull, os.O_RDWR)
        self._real = {"fsync": os.fsync, "pwrite": os.pwrite, "write": os.write,
                      "ftruncate": os.ftruncate, "os_open": os.open, "open": builtins.open}
        self.mark_durable(self.base)
        os.fsync = self._fsync
        os.pwrite = self._pwrite
        os.write = self._write
        os.ftruncate = self._ftruncate
        os.open = self._os_open
        builtins.open = self._open
        return self

    def __exit__(self, *exc) -> None:
        if len(_ZOMBIES) > 256:
            reap()
        r = self._real
        os.fsync, os.pwrite, os.write = r["fsync"], r["pwrite"], r["write"]
        os.ftruncate, os.open, builtins.open = r["ftruncate"], r["os_open"], r["open"]
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()
        self._held_fds.clear()
        self._content.clear()
        self._listing.clear()
        if self._devnull >= 0:
            os.close(self._devnull)
            self._devnull = -1

    # -- paths ------------------------------------------------------------------------------
    def _inside(self, path: str) -> bool:
        return path.startswith(self.base + os.sep)

    def root_of(self, path: str) -> str | None:
        """The replica root (``base/<name>``) holding ``path``, or None."""
        if not self._inside(path):
            return None
        rest = path[len(self.base) + 1:]
        return os.path.join(self.base, rest.split(os.sep, 1)[0])

    def _fd_path(self, fd: int) -> str:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return ""

    def _fault_for_fd(self, fd: int) -> Fault | None:
        if not self.faults:
            return None
        root = self.root_of(self._fd_path(fd))
        return self.faults.get(root) if root else None

    # -- disk errors ------------------------------------------------------------------------
    def set_fault(self, root: str, kind: str, partial: bool = False) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown disk fault {kind!r}")
        self.faults[os.path.realpath(root)] = Fault(kind, partial)

    def clear_fault(self, root: str) -> Fault | None:
        return self.faults.pop(os.path.realpath(root), None)

    @staticmethod
    def _raise(code: int, what: str) -> None:
        raise OSError(code, os.strerror(code), what)

    def _short(self, fault: Fault, n: int) -> int:
        """How many of ``n`` bytes a failing write lets through first (0: none)."""
        if fault.partial and n > 1:
            fault.partial = False  # one short write, then the errors
            return self.rng.randrange(1, n)
        return 0

    def _pwrite(self, fd: int, data, offset: int) -> int:
        fault = self._fault_for_fd(fd)
        if fault is not None and (code := fault.on_write()) is not None:
            fault.hits += 1
            n = self._short(fault, len(data))
            if n:
                return self._real["pwrite"](fd, memoryview(data)[:n], offset)
            self._raise(code, "pwrite")
        return self._real["pwrite"](fd, data, offset)

    def _write(self, fd: int, data) -> int:
        fault = self._fault_for_fd(fd)
        if fault is not None and (code := fault.on_write()) is not None:
            fault.hits += 1
            n = self._short(fault, len(data))
            if n:
                return self._real["write"](fd, memoryview(data)[:n])
            self._raise(code, "write")
        return self._real["write"](fd, data)

    def _ftruncate(self, fd: int, length: int) -> None:
        fault = self._fault_for_fd(fd)
        if fault is not None and fault.kind == "eio-write":
            fault.hits += 1
            self._raise(errno.EIO, "ftruncate")
        return self._real["ftruncate"](fd, length)

    def _os_open(self, path, flags, mode=0o777, *, dir_fd=None):
        if self.faults and flags & os.O_CREAT and dir_fd is None:
            root = self.root_of(os.path.abspath(os.fspath(path)))
            fault = self.faults.get(root) if root else None
            if fault is not None and fault.kind == "enospc" and not os.path.exists(path):
                fault.hits += 1
                self._raise(errno.ENOSPC, "open")
        return self._real["os_open"](path, flags, mode, dir_fd=dir_fd)

    def _open(self, file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,
              closefd=True, opener=None):
        real = self._real["open"]
        if isinstance(file, int) or opener is not None or not any(c in mode for c in "wax+"):
            return real(file, mode, buffering, encoding, errors, newline, closefd, opener)
        path = os.path.abspath(os.fspath(file))
        root = self.root_of(path)
        if root is None:
            return real(file, mode, buffering, encoding, errors, newline, closefd, opener)
        if self.faults.get(root) is not None and self.faults[root].kind == "enospc" \
                and "a" not in mode and "+" not in mode:
            self.faults[root].hits += 1
            self._raise(errno.ENOSPC, "open")
        raw = _FaultIO(self, root, path, mode.replace("b", "").replace("t", ""))
        try:
            size = buffering if buffering > 1 else io.DEFAULT_BUFFER_SIZE
            buffered = io.BufferedRandom(raw, size) if "+" in mode else \
                io.BufferedWriter(raw, size)
            if "b" in mode:
                return buffered
            return io.TextIOWrapper(buffered, encoding=encoding or "utf-8", errors=errors,
                                    newline=newline)
        except BaseException:
            raw.close()
            raise

    # -- durability -------------------------------------------------------------------------
    def _fsync(self, fd: int) -> None:
        path = self._fd_path(fd)
        if not self._inside(path) and path != self.base:
            return self._real["fsync"](fd)
        if path.endswith(" (deleted)"):
            return None
        root = self.root_of(path)
        fault = self.faults.get(root) if root else None
        if fault is not None and (code := fault.on_fsync()) is not None:
            fault.hits += 1
            self._raise(code, "fsync")
        self.fsyncs += 1
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            self._record_dir(path, st.st_ino)
            if len(self._held) > self._gc_at:
                self._gc()
        else:
            self._record_file(path, st.st_ino)
        return None

    def _hold(self, path: str, ino: int) -> int:
        fd = self._held.get(ino)
        if fd is None:
            fd = self._real["os_open"](path, os.O_RDONLY)
            self._held[ino] = fd
            self._held_fds.add(fd)
        return fd

    def _record_file(self, path: str, ino: int) -> None:
        fd = self._hold(path, ino)
        size = os.fstat(fd).st_size
        self._content[ino] = os.pread(fd, size, 0) if size else b""

    def _record_dir(self, path: str, ino: int) -> None:
        names = {}
        with os.scandir(path) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                names[entry.name] = (st.st_ino, stat.S_ISDIR(st.st_mode))
                self._hold(entry.path, st.st_ino)
        self._listing[ino] = names

    def mark_durable(self, top: str) -> None:
        """Everything under ``top`` is durable now (what ``sync(2)`` gives)."""
        top = os.path.realpath(top)
        for dirpath, dirs, files in os.walk(top):
            dirs.sort()
            self._record_dir(dirpath, os.stat(dirpath).st_ino)
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                self._record_file(path, os.stat(path).st_ino)

    def _gc(self) -> None:
        """Forget inodes that are unlinked and named by no durable directory."""
        named = {ino for names in self._listing.values() for ino, _ in names.values()}
        for ino, fd in list(self._held.items()):
            if ino in named:
                continue
            if os.fstat(fd).st_nlink == 0:
                os.close(fd)
                self._held_fds.discard(fd)
                del self._held[ino]
                self._content.pop(ino, None)
                self._listing.pop(ino, None)
        self._gc_at = max(256, 2 * len(self._held))

    # -- crashes and power loss -------------------------------------------------------------
    def abandon(self, root: str) -> int:
        """The process owning ``root``'s files died: its descriptors on them write nowhere
        from now on. Returns how many descriptors it had open there."""
        root = os.path.realpath(root)
        n = 0
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd in self._held_fds or fd == self._devnull:
                continue
            path = self._fd_path(fd)
            if path == root or path.startswith(root + os.sep):
                os.dup2(self._devnull, fd, inheritable=True)
                _ZOMBIES.add(fd)
                n += 1
        return n

    @staticmethod
    def release(fds) -> None:
        """Close abandoned raw descriptors whose owners never close them (a dead store's
        block files): they point at /dev/null since :meth:`abandon`."""
        for fd in fds:
            if fd in _ZOMBIES:
                _ZOMBIES.discard(fd)
                os.close(fd)

    def lose_power(self, root: str, torn: random.Random | None = None) -> dict[str, int]:
        """Rewrite ``root``'s tree to what was durable (see the module doc); the bytes lost
        per file (negative: a file came back longer, e.g. an unlink undone). Files and
        directories still at their durable place keep their inode (rewritten in place), as
        on a real disk. Abandon the processes using the tree first."""
        root = os.path.realpath(root)
        tree = self._durable_tree(os.stat(root).st_ino, root, torn)
        lost = _lost_bytes(root, tree)
        self._restore(root, tree)
        self.mark_durable(root)
        self._gc()
        return lost

    def _durable_tree(self, dir_ino: int, path: str, torn: random.Random | None) -> dict:
        """name -> (inode, bytes or a sub-tree): what ``dir_ino`` durably holds (computed
        before anything changes: a torn write keeps part of the live bytes)."""
        tree: dict = {}
        for name, (ino, is_dir) in sorted(self._listing.get(dir_ino, {}).items()):
            child = os.path.join(path, name)
            if is_dir:
                tree[name] = (ino, self._durable_tree(ino, child, torn))
            else:
                tree[name] = (ino, self._durable_bytes(ino, child, torn))
        return tree

    def _durable_bytes(self, ino: int, path: str, torn: random.Random | None) -> bytes:
        kept = self._content.get(ino, b"")
        if torn is None:
            return kept
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return kept
        if st.st_ino != ino or not stat.S_ISREG(st.st_mode) or st.st_size <= len(kept):
            return kept
        with self._real["open"](path, "rb") as f:
            live = f.read()
        if not live.startswith(kept):
            return kept
        return live[:len(kept) + torn.randrange(len(live) - len(kept) + 1)]

    def _restore(self, path: str, tree: dict) -> None:
        with os.scandir(path) as it:
            live = {e.name: e.stat(follow_symlinks=False) for e in it}
        for name in sorted(live):
            st = live[name]
            want = tree.get(name)
            is_dir = stat.S_ISDIR(st.st_mode)
            if want is None or want[0] != st.st_ino or isinstance(want[1], dict) != is_dir:
                child = os.path.join(path, name)
                if is_dir:
                    shutil.rmtree(child)
                else:
                    os.unlink(child)
                del live[name]
        for name, (_ino, node) in tree.items():
            child = os.path.join(path, name)
            if isinstance(node, dict):
                if name not in live:
                    os.mkdir(child)
                self._restore(child, node)
                continue
            with self._real["open"](child, "r+b" if name in live else "wb") as f:
                f.write(node)
                f.truncate(len(node))

    # -- damage (on a replica that is down) -------------------------------------------------
    def damage(self, path: str, rng: random.Random, how: str,
               spare: Callable[[bytes], set[tuple[int, int]]] | None = None,
               at: tuple[int, int] | None = None) -> str:
        """Flip bits in (``how="flip"``) or cut (``"truncate"``) the file at ``path`` on
        disk, durably; says what it did. ``spare(content)`` names (byte, bit) positions
        a flip must leave alone; ``at`` flips that one bit only."""
        with self._real["open"](path, "rb") as f:
            buf = bytearray(f.read())
        if how == "truncate":
            keep = rng.randrange(len(buf)) if buf else 0
            out = bytes(buf[:keep])
            what = f"truncated from {len(buf)} to {keep} bytes"
        else:
            if not buf:
                return "empty: nothing to flip"
            flips = []
            spared = spare(bytes(buf)) if spare is not None else set()
            for _ in range(1 if at is not None else rng.choice((1, 1, 1, 2, 3))):
                byte, bit = at if at is not None else (rng.randrange(len(buf)),
                                                       rng.randrange(8))
                while (byte, bit) in spared:
                    byte, bit = rng.randrange(len(buf)), rng.randrange(8)
                buf[byte] ^= 1 << bit
                flips.append(f"{byte}.{bit}")
            out = bytes(buf)
            what = f"bits flipped at {', '.join(flips)} of {len(buf)} bytes"
        with self._real["open"](path, "r+b") as f:
            f.write(out)
            f.truncate(len(out))
        st = os.stat(path)
        self._record_file(path, st.st_ino)
        return what


class _FaultIO(io.FileIO):
    """A file opened for writing under the base: its writes check the replica's fault."""

    def __init__(self, fs: FaultFS, root: str, path: str, mode: str) -> None:
        super().__init__(path, mode)
        self._fs = fs
        self._root = root

    def write(self, data) -> int:
        fault = self._fs.faults.get(self._root)
        if fault is not None and (code := fault.on_write()) is not None:
            fault.hits += 1
            n = self._fs._short(fault, len(data))
            if n:
                return super().write(memoryview(data)[:n])
            FaultFS._raise(code, "write")
        return super().write(data)

    def truncate(self, size=None) -> int:
        fault = self._fs.faults.get(self._root)
        if fault is not None and fault.kind == "eio-write":
            fault.hits += 1
            FaultFS._raise(errno.EIO, "truncate")
        return super().truncate(size)


# Descriptors abandon() pointed at /dev/null. File objects close theirs when collected; a
# raw descriptor (a store's block) stays open until someone closes it: reap() does, now and
# then, after a collection (so no file object still owns a number it closes).
_ZOMBIES: set[int] = set()


def reap() -> None:
    """Close the abandoned descriptors no object closed."""
    gc.collect()
    null = os.stat(os.devnull)
    for fd in sorted(_ZOMBIES):
        try:
            st = os.fstat(fd)
            # dup2 left it inheritable; anything Python opened since is not (PEP 446)
            ours = fd > 2 and os.get_inheritable(fd)
        except OSError:
            continue
        if ours and (st.st_dev, st.st_ino, st.st_rdev) == (null.st_dev, null.st_ino,
                                                           null.st_rdev):
            os.close(fd)
    _ZOMBIES.clear()


def _lost_bytes(root: str, tree: dict) -> dict[str, int]:
    """Bytes each file under ``root`` loses when ``tree`` replaces it."""
    lost: dict[str, int] = {}

    def walk(path: str, rel: str, node: dict | None) -> None:
        names = set(os.listdir(path)) | set(node or {})
        for name in sorted(names):
            child, crel = os.path.join(path, name), os.path.join(rel, name) if rel else name
            kept = (node or {}).get(name, (0, None))[1]
            if os.path.isdir(child):
                walk(child, crel, kept if isinstance(kept, dict) else None)
                continue
            live = os.path.getsize(child) if os.path.exists(child) else 0
            kept_len = len(kept) if isinstance(kept, bytes) else 0
            if live != kept_len or kept is None:
                lost[crel] = live - kept_len
    walk(root, "", tree)
    return lost


__all__ = ["FAULT_KINDS", "Fault", "FaultFS"]
