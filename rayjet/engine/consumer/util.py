"""Small pieces of the consumer engine: the starting sequence, durations, header rewrites."""

from __future__ import annotations

from datetime import UTC, datetime

from rayjet.api import ConsumerConfig, StreamConfig
from rayjet.api import headers as H
from rayjet.api.enums import DeliverPolicy
from rayjet.clock import NANOS_PER_SECOND

_NS = NANOS_PER_SECOND


def to_ns(seconds: float | None) -> int:
    return int(round((seconds or 0.0) * _NS))


def go_duration(seconds: float) -> str:
    """A duration the way Go prints it in status texts (1s, 1.5s, 250ms, 2m0s)."""
    ns = to_ns(seconds)
    if ns < 1_000_000:
        return f"{ns / 1000:g}µs" if ns >= 1000 else f"{ns}ns"
    if ns < _NS:
        return f"{ns / 1_000_000:g}ms"
    total = ns / _NS
    h, rem = divmod(total, 3600)
    m, s = divmod(rem, 60)
    out = f"{s:g}s"
    if h or m:
        out = f"{int(m)}m{out}"
    if h:
        out = f"{int(h)}h{out}"
    return out


def parse_sample_freq(text: str | None) -> int:
    """``"30%"`` or ``"30"`` -> 30; empty -> 0."""
    if not text:
        return 0
    return max(0, min(100, int(text.strip().removesuffix("%") or 0)))


def headers_only(hdr: bytes, data: bytes) -> bytes:
    """The header block of a headers_only delivery: the message's headers + Nats-Msg-Size."""
    line = f"{H.MSG_SIZE}: {len(data)}\r\n\r\n".encode()
    if hdr:
        return hdr[:-2] + line
    return b"NATS/1.0\r\n" + line


def iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / _NS, tz=UTC).isoformat().replace("+00:00", "Z")


def dt(ns: int) -> datetime | None:
    return datetime.fromtimestamp(ns / _NS, tz=UTC) if ns else None



def select_start(cfg: ConsumerConfig, stream_config: StreamConfig, reader,
                 filters: tuple[str, ...]) -> tuple[int, int]:
    """The first stream seq to deliver and, for last_per_subject, the stream's last seq at
    the start (the end of the per-subject catch-up); as nats-server's selectStartingSeqNo."""
    first, last = reader.bounds()
    opt = cfg.opt_start_seq or 0
    resume = 0
    dp = cfg.deliver_policy
    if opt:
        seq = opt
    elif dp is DeliverPolicy.ALL:
        seq = first
    elif dp is DeliverPolicy.LAST:
        seq = reader.last_seq_for(filters) if filters else last
    elif dp is DeliverPolicy.LAST_PER_SUBJECT:
        if stream_config.max_msgs_per_subject == 1:
            seq = first
        else:
            seqs = reader.last_per_subject(filters, last)
            seq = seqs[0] if seqs else last
            resume = last
    elif dp is DeliverPolicy.BY_START_TIME and cfg.opt_start_time is not None:
        seq = reader.seq_for_time(int(cfg.opt_start_time.timestamp() * _NS))
    else:  # new
        seq = last + 1
    if first == 0 and not opt:  # a stream never written to: whatever comes next
        seq, resume = 1, 0
    elif seq > last and not opt:
        seq = last + 1
    elif seq < first:
        seq = first
    return max(seq, 1), resume


__all__ = ["dt", "go_duration", "headers_only", "iso", "parse_sample_freq", "select_start",
           "to_ns"]
