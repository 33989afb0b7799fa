"""Rebuilding the engine's own state from its store after a restart.

The store survives a restart; the engine's tables are derived from it: the last sequence and
msg id, the dedup ids still inside the duplicate window (read back from the Nats-Msg-Id
headers of recent messages, as nats-server does) and the schedules (replayed in seq order).
Consumer interest is not in the store: consumers register again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rayjet.api import headers as H
from rayjet.engine import schedules as S
from rayjet.errors import NotFoundError
from rayjet.storage import limits as L

if TYPE_CHECKING:
    from rayjet.engine.stream import StreamEngine


def rebuild_from_store(engine: StreamEngine) -> None:
    store = engine.store
    st = store.fast_state()
    engine._last_seq, engine._last_ts = st.last_seq, st.last_ts
    engine._last_msg_id = ""
    engine.dedup.clear()
    if st.msgs:
        try:
            last = store.load_msg(st.last_seq)
            engine._last_msg_id = L.header_value(last.hdr, H.MSG_ID) or ""
        except NotFoundError:
            pass
    if engine._window_ns and st.msgs:
        _rebuild_dedup(engine, st.last_seq, engine.clock.now_ns() - engine._window_ns)
    engine.schedules = S.Schedules()
    if engine.config.allow_msg_schedules and st.msgs:
        _rebuild_schedules(engine)


def _rebuild_dedup(engine: StreamEngine, last_seq: int, cutoff: int) -> None:
    """Walk back from the last message until one is older than the window."""
    found: list[tuple[str, int, int]] = []
    seq = last_seq + 1
    while seq > 1:
        try:
            msg, seq = engine.store.load_prev_msg(seq - 1)
        except NotFoundError:
            break
        if msg.ts < cutoff:
            break
        msg_id = L.header_value(msg.hdr, H.MSG_ID) if msg.hdr else None
        if msg_id:
            found.append((msg_id, seq, msg.ts))
    for msg_id, seq, ts in reversed(found):
        engine.dedup.add(msg_id, seq, ts)


def _rebuild_schedules(engine: StreamEngine) -> None:
    """Replay what applying each message did to the schedule table."""
    sch, seq = engine.schedules, 0
    while True:
        try:
            msg, seq = engine.store.load_next_msg(">", True, seq + 1)
        except NotFoundError:
            return
        if not msg.hdr:
            sch.remove(msg.subject)
            continue
        pattern = L.header_value(msg.hdr, S.SCHEDULE)
        scheduler = L.header_value(msg.hdr, S.SCHEDULER)
        parsed = S.parse_schedule(pattern, msg.ts) if pattern else None
        if parsed is not None:
            sch.add(msg.subject, seq, parsed[0])
        elif not scheduler:
            sch.remove(msg.subject)
        nxt = L.header_value(msg.hdr, S.SCHEDULE_NEXT)
        if scheduler and nxt and nxt != S.SCHEDULE_NEXT_PURGE:
            sch.update(scheduler, S.parse_ns(nxt))


__all__ = ["rebuild_from_store"]
