"""Rebuilding the engine's own state from its store after a restart.

The store survives a restart; the engine's tables are derived from it: the last sequence and
msg id, the dedup ids still inside the duplicate window (read back from the Nats-Msg-Id
headers of recent messages, as nats-server does) and the schedules (replayed in seq order).
Consumer interest is not in the store: consumers register again.
"""

from __future__ import annotations

from typing import NamedTuple

from rayjet.api import headers as H
from rayjet.engine import schedules as S
from rayjet.errors import NotFoundError
from rayjet.storage import limits as L
from rayjet.storage.protocol import StreamStore


class Recovered(NamedTuple):
    """The engine's own state, read back from its store."""

    last_seq: int
    last_ts: int
    last_msg_id: str
    dedup: list[tuple[str, int, int]]  # (msg id, seq, ts) still inside the window, oldest first
    schedules: S.Schedules


def recover_from_store(store: StreamStore, *, window_ns: int, now_ns: int,
                       schedules: bool) -> Recovered:
    st = store.fast_state()
    last_msg_id = ""
    if st.msgs:
        try:
            last = store.load_msg(st.last_seq)
            last_msg_id = L.header_value(last.hdr, H.MSG_ID) or ""
        except NotFoundError:
            pass
    dedup = _dedup_ids(store, st.last_seq, now_ns - window_ns) if window_ns and st.msgs else []
    table = _schedules(store) if schedules and st.msgs else S.Schedules()
    return Recovered(st.last_seq, st.last_ts, last_msg_id, dedup, table)


def _dedup_ids(store: StreamStore, last_seq: int, cutoff: int) -> list[tuple[str, int, int]]:
    """Walk back from the last message until one is older than the window."""
    found: list[tuple[str, int, int]] = []
    seq = last_seq + 1
    while seq > 1:
        try:
            msg, seq = store.load_prev_msg(seq - 1)
        except NotFoundError:
            break
        if msg.ts < cutoff:
            break
        msg_id = L.header_value(msg.hdr, H.MSG_ID) if msg.hdr else None
        if msg_id:
            found.append((msg_id, seq, msg.ts))
    found.reverse()
    return found


def _schedules(store: StreamStore) -> S.Schedules:
    """Replay what applying each message did to the schedule table."""
    sch, seq = S.Schedules(), 0
    while True:
        try:
            msg, seq = store.load_next_msg(">", True, seq + 1)
        except NotFoundError:
            return sch
        if not msg.hdr:
            sch.remove(msg.subject)
            continue
        pattern = L.header_value(msg.hdr, S.SCHEDULE)
        scheduler = L.header_value(msg.hdr, S.SCHEDULER)
        parsed = S.stored_schedule(pattern, L.header_value(msg.hdr, S.SCHEDULE_TIME_ZONE),
                                   msg.ts)
        if parsed is not None:
            sch.add(msg.subject, seq, parsed.first)
        elif not scheduler:
            sch.remove(msg.subject)
        nxt = L.header_value(msg.hdr, S.SCHEDULE_NEXT)
        if scheduler and nxt and nxt != S.SCHEDULE_NEXT_PURGE:
            sch.update(scheduler, S.parse_ns(nxt))


__all__ = ["Recovered", "recover_from_store"]
