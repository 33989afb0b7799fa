"""The checkpoint: the index state a FileStore had when its blocks ended at a position.

Block index files (``blockindex.py``) say which messages each block holds; the checkpoint
says what happened to them: first/last seq, last_ts, counts, lost seqs, the deleted seqs
as runs, and for each block its size, max_seq and the hash of the index file it trusted.
Reopening loads those, applies the checkpoint, and replays only the frames written after
``blocks[-1]`` ended (see ``recovery.load_checkpoint``). No subject or payload is kept
here, so it needs no encryption. Layout::

    magic | u32 n | head JSON | u64 runs | run starts (u64 each) | run lengths | hash
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

import numpy as np

from rayjet.storage import record as rec

NAME = "checkpoint.dat"
_MAGIC = b"RJCKP001"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


@dataclass(slots=True)
class Checkpoint:
    blocks: list[list]  # [no, size, max_seq, index file hash (hex, '' for none)]
    tail: str  # hex of the 8 bytes ending blocks[-1] at its size
    first: int
    last: int
    last_ts: int
    msgs: int
    bytes: int
    lost: list[int]
    dead_starts: np.ndarray  # deleted seqs first..last as runs
    dead_lens: np.ndarray


def dead_runs(size: np.ndarray, first: int) -> tuple[np.ndarray, np.ndarray]:
    """Runs of zero sizes (deleted seqs) in ``size`` whose element 0 is seq ``first``."""
    if not len(size):
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    edge = np.diff(np.concatenate(([0], (size == 0).astype(np.int8), [0])))
    starts = np.flatnonzero(edge == 1)
    ends = np.flatnonzero(edge == -1)
    return (starts + first).astype(np.uint64), (ends - starts).astype(np.uint64)


def write(path: str, ck: Checkpoint) -> None:
    head = json.dumps({"blocks": ck.blocks, "tail": ck.tail, "first": ck.first,
                       "last": ck.last, "last_ts": ck.last_ts, "msgs": ck.msgs,
                       "bytes": ck.bytes, "lost": ck.lost}).encode()
    body = b"".join((_MAGIC, _U32.pack(len(head)), head, _U64.pack(len(ck.dead_starts)),
                     ck.dead_starts.astype(np.uint64).tobytes(),
                     ck.dead_lens.astype(np.uint64).tobytes()))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body + rec.frame_hash(body))
    os.replace(tmp, path)


def read(path: str) -> Checkpoint | None:
    """The checkpoint at ``path``; None when missing or damaged."""
    buf = rec.read_checked_file(path, _MAGIC, 28)
    if buf is None:
        return None
    try:
        (n,) = _U32.unpack_from(buf, 8)
        head = json.loads(buf[12:12 + n])
        pos = 12 + n
        (runs,) = _U64.unpack_from(buf, pos)
        pos += 8
        starts = np.frombuffer(buf, np.uint64, runs, pos)
        lens = np.frombuffer(buf, np.uint64, runs, pos + 8 * runs)
        if pos + 16 * runs != len(buf) - 8:
            return None
        return Checkpoint(head["blocks"], head["tail"], head["first"], head["last"],
                          head["last_ts"], head["msgs"], head["bytes"], head["lost"],
                          starts, lens)
    except (ValueError, KeyError, TypeError, struct.error):
        return None


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = ["NAME", "Checkpoint", "dead_runs", "read", "remove", "write"]
