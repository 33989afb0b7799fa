"""Read-index bookkeeping: reads waiting for a heartbeat round to confirm leadership."""

from __future__ import annotations

from dataclasses import dataclass, field

from rayjet.raft.messages import ReadState


@dataclass(slots=True)
class _Pending:
    index: int
    ctx: bytes
    acks: set[str] = field(default_factory=set)


class ReadOnly:
    """Requests queue in arrival order; an ack for one confirms every earlier one too."""

    def __init__(self) -> None:
        self._pending: dict[bytes, _Pending] = {}
        self._queue: list[bytes] = []

    def add_request(self, index: int, ctx: bytes) -> None:
        if ctx in self._pending:
            return
        self._pending[ctx] = _Pending(index, ctx)
        self._queue.append(ctx)

    def recv_ack(self, frm: str, ctx: bytes) -> set[str] | None:
        p = self._pending.get(ctx)
        if p is None:
            return None
        p.acks.add(frm)
        return p.acks

    def advance(self, ctx: bytes) -> list[ReadState]:
        """Release ``ctx`` and every request queued before it."""
        if ctx not in self._pending:
            return []
        k = self._queue.index(ctx) + 1
        done, self._queue = self._queue[:k], self._queue[k:]
        out = []
        for c in done:
            p = self._pending.pop(c)
            out.append(ReadState(p.index, c))
        return out

    def last_pending_ctx(self) -> bytes:
        return self._queue[-1] if self._queue else b""

    def pending_count(self) -> int:
        return len(self._queue)
