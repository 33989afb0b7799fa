"""Restoring a stream from a backup through its replicated log.

The restore creates the stream from the backup's config, then its leader proposes
:class:`RestoreOp` s in order: each stores a slice of the backup's messages at their own
sequences and timestamps (gaps between them become deleted sequences, as in the original),
and the last one fills the sequences deleted at the end and sets the positions in the
stream's sources. Each op names the last sequence it expects the stream at, so a write by
anyone else during the restore makes the next op fail instead of mixing the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from rayjet.api import StreamConfig
from rayjet.api import headers as H
from rayjet.engine import checks as C
from rayjet.engine.ops import MsgOp, RestoreOp
from rayjet.engine.pending import Pending
from rayjet.engine.results import ApplyResult
from rayjet.engine.sourcing import SourcePositions
from rayjet.errors import APIError, error_for
from rayjet.storage.protocol import StreamStore


class RestoredStream(Protocol):
    """What a restore uses of a stream engine (:class:`~.stream.StreamEngine`);
    named here so this module need not import the engine that calls it."""

    name: str
    config: StreamConfig
    store: StreamStore
    pending: Pending
    sources: SourcePositions

    @property
    def last_seq(self) -> int: ...

    def require_leader(self) -> None: ...

    def skip_to(self, last: int) -> None: ...

    def apply_copied_run(self, msgs: list[MsgOp]) -> int: ...

    def follow_applied(self) -> None: ...


def _ttl_and_id(hdr: bytes, ttl_ok: bool) -> tuple[int, str]:
    if not hdr:
        return 0, ""
    h = H.decode_headers(hdr)
    ttl = 0
    if ttl_ok:
        try:
            ttl = C.check_ttl(h, True)
        except APIError:
            ttl = 0
    return ttl, h.get(H.MSG_ID, "")


def prepare_restore(engine: RestoredStream, after: int, cols: dict[str, Sequence[Any]], *,
                    first: int = 0, last: int = 0,
                    sources: Sequence[Sequence[Any]] = ()) -> RestoreOp:
    """The op storing ``cols`` (backup columns seq, ts, subject, hdr, data) after ``after``.
    ``last`` > 0 marks the final op (see :class:`RestoreOp`)."""
    engine.require_leader()
    if engine.pending.next_seq != after + 1:
        raise error_for("STREAM_RESTORE", err=f"the stream is at sequence "
                        f"{engine.pending.next_seq - 1}, the restore expected {after}: "
                        f"someone else wrote to it")
    ttl_ok = engine.config.allow_msg_ttl
    msgs = []
    for seq, ts, subject, hdr, data in zip(cols["seq"], cols["ts"], cols["subject"],
                                           cols["hdr"], cols["data"], strict=True):
        if seq <= after:
            raise error_for("STREAM_RESTORE", err=f"message {seq} is not after {after}")
        ttl, msg_id = _ttl_and_id(hdr or b"", ttl_ok)
        msgs.append(MsgOp(int(seq), int(ts), subject, hdr or b"", data or b"", ttl, msg_id))
    return RestoreOp(after, tuple(msgs), first, last, tuple(tuple(p) for p in sources))


def apply_restore(engine: RestoredStream, op: RestoreOp) -> ApplyResult:
    if engine.last_seq != op.after:
        err = error_for("STREAM_RESTORE", err=f"the stream is at sequence {engine.last_seq}, "
                        f"the restore expected {op.after}: someone else wrote to it")
        return ApplyResult(op, ok=False, error=err, stream=engine.name)
    store = engine.store
    if op.after == 0 and op.first > 1:
        # the backup's stream had its first first-1 sequences purged: so does this one
        engine.skip_to(op.first - 1)
        store.compact(op.first)
    stored = engine.apply_copied_run(list(op.msgs))
    engine.skip_to(op.last)
    if op.sources:
        engine.sources = type(engine.sources).from_list(op.sources)
    engine.follow_applied()
    return ApplyResult(op, seq=engine.last_seq, stream=engine.name, value=stored)
