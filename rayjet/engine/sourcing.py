"""Mirrors and sources: turning messages read from an origin stream into replicated ops.

A stream's origins come from its config (:func:`origins`): the mirror, or each source, with
its filters and subject transforms. The leader's source pump reads an origin after the
position the stream has replicated for it and asks :func:`prepare_mirror` /
:func:`prepare_sources` for one :class:`~rayjet.engine.ops.SourceOp`; every replica applies it
with :func:`apply_source`, which stores the messages and moves the origin's position, both
or neither. The positions (:class:`SourcePositions`) are engine state carried in snapshots,
so a new leader, or a replica restarted from disk, continues exactly where the copy stopped.

- A mirror stores each origin message at its origin sequence with its origin timestamp;
  the sequences in between (filtered out, deleted or purged on the origin) are skipped.
- A source gives each message the next sequence of the sourcing stream, after the stream's
  own checks (ingest transform, dedup, limits), with the ``Nats-Stream-Source`` header as
  nats-server 2.10+ writes it: ``<origin> <origin seq> <filter> <transform dest> <original
  subject> <origin identity>``. Headers of an origin that sources itself lose their own
  ``Nats-Stream-Source``, and ``Nats-Expected-*`` / ``Nats-Batch-*`` headers are dropped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rayjet.api import PubAck, StreamConfig, StreamSource
from rayjet.api import headers as H
from rayjet.engine import checks as C
from rayjet.engine.admission import Admitted
from rayjet.engine.batch import Staged
from rayjet.engine.ops import BatchOp, MsgOp, SourceOp
from rayjet.engine.results import ApplyResult
from rayjet.errors import APIError, DuplicateInProcessError, error_for
from rayjet.subjects import SubjectTransform

FWC = ">"
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_DROP_PREFIXES = ("Nats-Expected-", "Nats-Batch-")

# an origin message as the pump reads it: (seq, subject, hdr, data, ts)
OriginMsg = tuple[int, str, bytes, bytes, int]


def identity(created_ns: int, group: str = "") -> str:
    """An origin incarnation's identity: 8 characters derived from its creation (a deleted
    and re-created stream has another), as nats-server hashes the creation time."""
    digest = hashlib.sha256(f"{created_ns}/{group}".encode()).digest()
    return "".join(_DIGITS[b % len(_DIGITS)] for b in digest[:8])


def index_name(src: StreamSource) -> str:
    """nats-server's source index name: ``<name> <filters> <destinations>`` (``>`` when
    unset, several joined by form feeds). It keys the origin's replicated position."""
    name = src.name
    if src.external is not None and src.external.api:
        name += ":" + hashlib.sha256(src.external.api.encode()).hexdigest()[:8]
    if not src.subject_transforms:
        return f"{name} {src.filter_subject or FWC} {FWC}"
    sources = "\f".join(t.src or FWC for t in src.subject_transforms)
    dests = "\f".join(t.dest or FWC for t in src.subject_transforms)
    return f"{name} {sources} {dests}"


@dataclass(frozen=True)
class Origin:
    """One origin of a stream, as its config describes it."""

    key: str
    source: StreamSource
    mirror: bool
    selectors: tuple[tuple[str, SubjectTransform | None], ...]  # (filter, transform or None)

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def read_filter(self) -> str:
        """The filter to read the origin with (``>`` when there are several)."""
        return self.selectors[0][0] if len(self.selectors) == 1 else FWC

    def select(self, subject: str) -> str | None:
        """The subject to store ``subject`` under, or None when the origin's filters leave
        the message out (the first matching transform wins, as in nats-server)."""
        from rayjet.subjects import subject_matches

        for flt, tr in self.selectors:
            if flt != FWC and not subject_matches(subject, flt):
                continue
            if tr is None:
                return subject
            try:
                out = tr.match(subject)
            except APIError:
                return None
            return out or subject
        return None


def _origin(src: StreamSource, mirror: bool) -> Origin:
    if src.subject_transforms:
        sel = tuple((t.src or FWC, SubjectTransform(t.src or FWC, t.dest) if t.dest else None)
                    for t in src.subject_transforms)
    else:
        sel = ((src.filter_subject or FWC, None),)
    return Origin(index_name(src), src, mirror, sel)


def origins(cfg: StreamConfig) -> list[Origin]:
    """The mirror, or the sources, of ``cfg`` (empty for a plain stream)."""
    if cfg.mirror is not None:
        return [_origin(cfg.mirror, True)]
    return [_origin(s, False) for s in cfg.sources or ()]


class SourcePositions:
    """Per origin key: the last origin sequence copied (or skipped) and the origin's identity."""

    __slots__ = ("_pos",)

    def __init__(self) -> None:
        self._pos: dict[str, tuple[int, str]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._pos

    def __len__(self) -> int:
        return len(self._pos)

    def position(self, key: str) -> int:
        return self._pos.get(key, (0, ""))[0]

    def ident(self, key: str) -> str:
        return self._pos.get(key, (0, ""))[1]

    def set(self, key: str, seq: int, ident: str) -> None:
        self._pos[key] = (seq, ident)

    def to_list(self) -> list[list[Any]]:
        return [[k, s, i] for k, (s, i) in sorted(self._pos.items())]

    @classmethod
    def from_list(cls, rows: Sequence[Sequence[Any]]) -> SourcePositions:
        out = cls()
        for key, seq, ident in rows:
            out._pos[key] = (int(seq), ident)
        return out


class SourcedStream(Protocol):
    """What copying from origins uses of a stream engine (:class:`~.stream.StreamEngine`);
    named here so this module need not import the engine that calls it."""

    name: str
    config: StreamConfig
    sources: SourcePositions

    @property
    def proposer_id(self) -> int: ...

    def require_leader(self) -> None: ...

    def admit(self, subject: str, data: bytes, hdr: bytes, h: dict[str, str] | None,
              stage: Staged | None, sourced: bool = False) -> Admitted | PubAck: ...

    def assign(self, a: Admitted) -> MsgOp: ...

    def reject_stale(self, op: Any) -> ApplyResult: ...

    def apply_atomic(self, op: BatchOp) -> ApplyResult: ...

    def apply_copied(self, m: MsgOp) -> ApplyResult | None: ...

    def follow_applied(self) -> None: ...


def source_header(origin: Origin, seq: int, subject: str, ident: str) -> str:
    """The ``Nats-Stream-Source`` value of origin message ``seq`` on ``subject``."""
    _name, flt, dest = origin.key.split(" ", 2)
    out = f"{origin.name} {seq} {flt} {dest} {subject}"
    return f"{out} {ident}" if ident else out


def parse_source_header(value: str) -> tuple[str, int, str]:
    """(origin name, origin seq, origin identity) of a ``Nats-Stream-Source`` value."""
    fields = value.split(" ")
    if len(fields) < 2:
        return "", 0, ""
    try:
        seq = int(fields[1])
    except ValueError:
        seq = 0
    return fields[0], seq, fields[5] if len(fields) >= 6 else ""


def _sourced_headers(origin: Origin, seq: int, subject: str, hdr: bytes, ident: str
                     ) -> dict[str, str]:
    h = H.decode_headers(hdr) if hdr else {}
    out = {k: v for k, v in h.items()
           if k != H.STREAM_SOURCE and not k.startswith(_DROP_PREFIXES)}
    out[H.STREAM_SOURCE] = source_header(origin, seq, subject, ident)
    return out


# -- leader ----------------------------------------------------------------------------------
def prepare_mirror(engine: SourcedStream, origin: Origin, start: int, upto: int, ident: str,
                   msgs: Sequence[OriginMsg]) -> SourceOp:
    """The op copying ``msgs`` (origin messages after ``start``) into a mirror."""
    engine.require_leader()
    ttl_ok = engine.config.allow_msg_ttl
    out = []
    for seq, subject, hdr, data, ts in msgs:
        if seq <= start:
            continue
        subj = origin.select(subject)
        if subj is None:
            continue
        ttl = 0
        if ttl_ok and hdr:
            try:
                ttl = C.check_ttl(H.decode_headers(hdr), True)
            except APIError:
                ttl = 0
        out.append(MsgOp(seq, ts, subj, hdr or b"", data or b"", ttl))
    return SourceOp(origin.key, start, max(upto, start), ident, tuple(out), True)


def prepare_sources(engine: SourcedStream, origin: Origin, start: int, upto: int, ident: str,
                    msgs: Sequence[OriginMsg]) -> tuple[SourceOp | None, APIError | None]:
    """The op storing ``msgs`` (origin messages after ``start``) as new messages of a
    sourcing stream. A message the stream refuses (limits, size...) ends the op before it:
    the error comes back with the op for the messages before it (None if there are none),
    and the pump tries that message again later. Duplicates (``Nats-Msg-Id`` in the
    window) are passed over, as nats-server does."""
    engine.require_leader()
    if engine.config.sealed:
        return None, error_for("STREAM_SEALED")
    out: list[MsgOp] = []
    reached = start
    err: APIError | None = None
    for seq, subject, hdr, data, _ts in msgs:
        if seq <= start:
            continue
        subj = origin.select(subject)
        if subj is not None:
            h = _sourced_headers(origin, seq, subject, hdr, ident)
            try:
                checked = engine.admit(subj, data or b"", H.encode_headers(h), h, None,
                                       sourced=True)
            except DuplicateInProcessError:
                checked = None  # the same Nats-Msg-Id earlier in this batch: a duplicate
            except APIError as e:
                err = e
                break
            if checked is not None and not isinstance(checked, PubAck):
                out.append(engine.assign(checked))
        reached = seq
    else:
        reached = max(upto, reached)
    if not out and reached == start:
        return None, err
    return SourceOp(origin.key, start, reached, ident, tuple(out), False, engine.proposer_id), err


def reset_op(origin: Origin, start: int, ident: str) -> SourceOp:
    """The op restarting the copy of a re-created origin from its beginning."""
    return SourceOp(origin.key, start, 0, ident, (), origin.mirror)


# -- every replica ---------------------------------------------------------------------------
def apply_source(engine: SourcedStream, op: SourceOp) -> ApplyResult:
    pos = engine.sources
    if pos.position(op.key) != op.start:
        if op.msgs and not op.mirror:
            return engine.reject_stale(op)  # its seqs were projected on a state that is gone
        err = error_for("STREAM_SEQUENCE_NOT_MATCH",
                        f"source position mismatch for {op.key.split(' ')[0]!r}: op from "
                        f"{op.start}, position {pos.position(op.key)}")
        return ApplyResult(op, ok=False, error=err, stream=engine.name)
    if op.mirror:
        res = _apply_mirror(engine, op)
    elif op.msgs:
        res = engine.apply_atomic(BatchOp("", op.msgs, op.pid))
        if not res.ok:
            return res
        res.op, res.batch, res.count = op, None, None
    else:
        res = ApplyResult(op, stream=engine.name, value=[])
    pos.set(op.key, op.upto, op.ident)
    return res


def _apply_mirror(engine: SourcedStream, op: SourceOp) -> ApplyResult:
    stored: list[int] = []
    republish = []
    for m in op.msgs:
        r = engine.apply_copied(m)
        if r is None:
            continue  # already there (cannot happen with matching positions; be safe)
        republish.extend(r.republish)
        stored.append(m.seq)
    engine.follow_applied()
    res = ApplyResult(op, seq=stored[-1] if stored else 0, stream=engine.name, value=stored)
    res.republish = republish
    return res
