"""Removing what no consumer needs once a consumer of an interest stream is gone.

Scanning the whole stream inside apply would stall the replica (and its raft group) for as
long as the stream is big. Instead, unregistering only records where a sweep starts
(``sweep_from``, replicated state, kept in snapshots); the leader reads a bounded step
outside apply (:func:`prepare_sweep`) and proposes it as a :class:`SweepOp`; every replica
applies the step (:func:`apply_sweep`), checking each message again, since acks and new
consumers may have come in between. A new leader goes on from the replicated position.
"""

from __future__ import annotations

from typing import Protocol

from rayjet.engine.ops import SweepOp
from rayjet.engine.results import ApplyResult
from rayjet.engine.retention import Interest
from rayjet.errors import NotFoundError
from rayjet.storage.protocol import StreamStore

SWEEP_SCAN = 8192  # messages one step looks at


class SweptStream(Protocol):
    """What a sweep uses of a stream engine (:class:`~.stream.StreamEngine`);
    named here so this module need not import the engine that calls it."""

    store: StreamStore
    interest: Interest
    sweep_from: int  # replicated: where the pending sweep goes on (0: none pending)

    @property
    def last_seq(self) -> int: ...


def begin_sweep(engine: SweptStream) -> None:
    """A consumer went away (in apply): everything from the first message is to be checked."""
    first = max(engine.store.fast_state().first_seq, 1)
    engine.sweep_from = min(engine.sweep_from, first) if engine.sweep_from else first


def prepare_sweep(engine: SweptStream, limit: int = SWEEP_SCAN) -> SweepOp | None:
    """The next step of the pending sweep (leader, outside apply), or None when none is."""
    start = engine.sweep_from
    if not start:
        return None
    store, interest, seqs = engine.store, engine.interest, []
    seq, upto, looked = start, engine.last_seq, 0
    while looked < limit:
        try:
            msg, seq = store.load_next_msg(">", True, seq)
        except NotFoundError:
            break
        if seq > engine.last_seq:
            break
        if not interest.needed(seq, msg.subject):
            seqs.append(seq)
        looked += 1
        upto, seq = seq, seq + 1
    if looked < limit:
        upto = engine.last_seq  # reached the end
    return SweepOp(start, max(upto, start), tuple(seqs))


def apply_sweep(engine: SweptStream, op: SweepOp) -> ApplyResult:
    """Remove the step's messages that are still unneeded; move the sweep on (unless another
    removal started it again meanwhile)."""
    store, interest, removed = engine.store, engine.interest, 0
    for seq in op.seqs:
        try:
            msg = store.load_msg(seq)
        except NotFoundError:
            continue
        if not interest.needed(seq, msg.subject):
            removed += bool(store.remove_msg(seq))
            interest.forget(seq)
    if engine.sweep_from == op.start:
        engine.sweep_from = 0 if op.upto >= engine.last_seq else op.upto + 1
    return ApplyResult(op, value=removed)
