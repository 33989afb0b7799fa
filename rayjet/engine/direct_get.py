"""Direct gets of several messages at once (ADR-31), as nats-server 2.15.1 serves them on
``$JS.API.DIRECT.GET.<stream>``: a ``batch`` of messages from a sequence, a start time or
along ``next_by_subj``, or with ``multi_last`` the last message of every subject matching
some filters (``up_to_seq`` / ``up_to_time`` bound them), within ``max_bytes``.

:func:`parse_request` checks a request's body and answers a bad one with the status
nats-server gives (408 Empty / Malformed / Bad Request); :func:`read` answers it from a
store in one pass (a replica does it in one call); :func:`wire` writes the answer as the
messages nats-server sends: each message's header block (its stored headers, then
Nats-Stream, Nats-Subject, Nats-Sequence, Nats-Time-Stamp and, in a batch, Nats-Num-Pending
and Nats-Last-Sequence: the previous message's sequence, 0 for the first), then the
``204 EOB`` status carrying the pending count, the last sequence sent and, for multi_last,
Nats-UpTo-Sequence. Nothing found answers 404; more than 1024 subjects, 413.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from rayjet.api.headers import append_header
from rayjet.engine.consumer.reader import StoreReader
from rayjet.errors import APIError

MAX_MULTI = 1024  # subjects a multi_last request may match at most
DEFAULT_MAX_BYTES = 64 << 20  # nats-server's max pending bytes: a batch's default limit

_EMPTY = (408, "Empty Request")
_MALFORMED = (408, "Malformed Request")
_BAD = (408, "Bad Request")
_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
                   r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$")

_UINTS = ("seq", "up_to_seq")
_INTS = ("batch", "max_bytes")
_STRS = ("last_by_subj", "next_by_subj")
_TIMES = ("start_time", "up_to_time")


class _Malformed(ValueError):
    pass


def time_ns(text: Any) -> int:
    """An RFC 3339 time (nanoseconds kept) as nanoseconds since the epoch."""
    m = _TIME.match(text) if isinstance(text, str) else None
    if m is None:
        raise _Malformed(text)
    y, mo, d, h, mi, s, frac, z, sign, zh, zm = m.groups()
    try:
        base = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=UTC)
    except ValueError:
        raise _Malformed(text) from None
    ns = int(base.timestamp()) * 1_000_000_000 + int((frac or "").ljust(9, "0"))
    if not z:
        offset = (int(zh) * 60 + int(zm)) * 60_000_000_000
        ns -= offset if sign == "+" else -offset
    return ns


def rfc3339_ns(ns: int) -> str:
    """Nanoseconds since the epoch as Go writes RFC3339Nano in UTC (trailing zeros of the
    fraction dropped, no fraction when whole)."""
    secs, frac = divmod(ns, 1_000_000_000)
    text = datetime.fromtimestamp(secs, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += ("." + f"{frac:09d}").rstrip("0")
    return text + "Z"


def _fields(doc: dict[str, Any]) -> dict[str, Any]:
    """The request's fields as nats-server decodes them (missing or null: zero values); a
    value of the wrong type is malformed."""
    out: dict[str, Any] = {}
    for key in _UINTS + _INTS:
        v = doc.get(key)
        if v is None:
            v = 0
        if isinstance(v, bool) or not isinstance(v, int) or (key in _UINTS and v < 0):
            raise _Malformed(key)
        out[key] = v
    for key in _STRS:
        v = doc.get(key)
        if v is None:
            v = ""
        if not isinstance(v, str):
            raise _Malformed(key)
        out[key] = v
    for key in _TIMES:
        v = doc.get(key)
        out[key] = None if v is None else time_ns(v)
    multi = doc.get("multi_last") or []
    if not isinstance(multi, list) or not all(isinstance(f, str) for f in multi):
        raise _Malformed("multi_last")
    out["multi_last"] = multi
    no_hdr = doc.get("no_hdr")
    if no_hdr is not None and not isinstance(no_hdr, bool):
        raise _Malformed("no_hdr")
    out["no_hdr"] = bool(no_hdr)
    return out


def parse_request(payload: bytes, last_by_subject: str | None = None
                  ) -> dict[str, Any] | tuple[int, str]:
    """A direct get's body as :func:`read` takes it, or the (code, text) status a bad one
    gets. ``last_by_subject``: the subject named in the request's own subject
    (``DIRECT.GET.<stream>.<subject>``; "" when that subject ends after the stream), where
    the body may only add ``no_hdr`` and ``max_bytes``."""
    by_subject = last_by_subject is not None
    if not payload.strip() and not by_subject:
        return _EMPTY
    try:
        doc = json.loads(payload) if payload.strip() else {}
        if not isinstance(doc, dict):
            raise _Malformed("not an object")
        req = _fields(doc)
    except (ValueError, RecursionError):
        return _MALFORMED
    seq, last, nxt, batch = req["seq"], req["last_by_subj"], req["next_by_subj"], req["batch"]
    multi, start, up_seq, up_time = (req["multi_last"], req["start_time"], req["up_to_seq"],
                                     req["up_to_time"])
    if by_subject:
        if not last_by_subject or last or nxt or multi or seq or batch or start is not None \
                or up_seq or up_time is not None:
            return _BAD
        req["last_by_subj"] = last_by_subject
        return req
    if not (seq or last or nxt or multi or start is not None):
        return _EMPTY
    if ((seq and last) or (seq and start is not None) or (start is not None and last)
            or (last and nxt) or (last and batch > 0) or (last and multi) or (nxt and multi)
            or (up_seq and up_time is not None)):
        return _BAD
    return req


def is_batch(req: dict[str, Any]) -> bool:
    """Whether a parsed request is answered with several messages and an EOB."""
    return bool(req["batch"] or req["multi_last"])


# -- reading -----------------------------------------------------------------------------
def _answer(status: tuple[int, str] | None = None, msgs: list | None = None,
            eob: list | None = None, *, batch: bool = False, no_hdr: bool = False
            ) -> dict[str, Any]:
    """What :func:`read` returns: ``msgs`` as [subject, seq, hdr, data, ts, pending,
    previous seq] lists, the ending ``status`` or ``eob`` [pending, last seq, up-to seq
    (0: none)]."""
    return {"status": list(status) if status else None, "msgs": msgs or [], "eob": eob,
            "batch": batch, "no_hdr": no_hdr}


def read(store: Any, req: dict[str, Any]) -> dict[str, Any]:
    """Answer a parsed request (see :func:`parse_request`) from ``store``."""
    if req["multi_last"]:
        return _read_multi(store, req)
    reader = StoreReader(store)
    seq = reader.seq_for_time(req["start_time"]) if req["start_time"] is not None \
        else req["seq"]
    nxt, last_for = req["next_by_subj"], req["last_by_subj"]
    batch = req["batch"]
    batched = batch != 0
    pending = 0
    if batched:
        pending = _pending(store, seq, nxt or ">")
    else:
        batch = 1
    limit = req["max_bytes"] or DEFAULT_MAX_BYTES
    no_hdr = req["no_hdr"]
    msgs: list[list] = []
    last = sent = 0
    for i in range(batch):
        try:
            if seq > 0 and not nxt:
                if i == 0 and not batched:
                    m = store.load_msg(seq)
                else:
                    m, seq = store.load_next_msg(">", True, seq)
                seq += 1
            elif nxt:
                m, seq = store.load_next_msg(nxt, True, seq)
                seq += 1
            else:
                m = store.load_last_msg(last_for or ">")
        except APIError:
            if batch > 1 and i > 0:
                break
            return _answer((404, "Message Not Found"))
        if batched and not no_hdr and pending > 0:
            pending -= 1
        msgs.append([m.subject, m.seq, m.hdr, m.data, m.ts, pending, last])
        last = m.seq
        sent += len(m.subject) + len(m.hdr) + len(m.data)
        if sent >= limit:
            break
    return _answer(None, msgs, [pending, last, 0] if batched else None, batch=batched,
                   no_hdr=no_hdr)


def _pending(store: Any, seq: int, subject: str) -> int:
    try:
        return store.num_pending(max(seq, 1), subject)[0]
    except APIError:
        return 0


def _last_seqs(store: Any, filters: list[str], up_to: int) -> list[int] | None:
    """The seq of the last message at or before ``up_to`` of every subject matching
    ``filters``, ascending; None when that is more than MAX_MULTI."""
    seqs: set[int] = set()
    for f in filters:
        try:
            subjects = store.subjects_totals(f)
        except APIError:
            subjects = {}
        for subject, count in subjects.items():
            last = store.last_seq_for_subject(subject)
            if last and last > up_to:
                last = 0
                if count > 1:
                    try:
                        last = store.load_prev_msg(up_to, subject)[1]
                    except APIError:
                        pass
            if last:
                seqs.add(last)
        if len(seqs) > MAX_MULTI:
            return None
    return sorted(seqs)


def _read_multi(store: Any, req: dict[str, Any]) -> dict[str, Any]:
    state = store.fast_state()
    up_to = req["up_to_seq"]
    if req["up_to_time"] is not None:
        up_to = StoreReader(store).seq_for_time(req["up_to_time"])
        if up_to <= state.first_seq:
            return _answer((404, "No Results"))
        up_to -= 1
    if not up_to:
        up_to = state.last_seq
    seqs = _last_seqs(store, req["multi_last"], up_to) if state.msgs else []
    if seqs is None:
        return _answer((413, "Too Many Results"))
    if not seqs:
        return _answer((404, "No Results"))
    limit = req["max_bytes"] or DEFAULT_MAX_BYTES
    pending, msgs, last, size, sent = len(seqs), [], 0, 0, 0
    for seq in seqs:
        pending = max(pending - 1, 0)
        if seq < req["seq"]:
            continue
        try:
            m = store.load_msg(seq)
        except APIError:
            return _answer((404, "Message Not Found"))
        msgs.append([m.subject, m.seq, m.hdr, m.data, m.ts, pending, last])
        last = m.seq
        size += len(m.subject) + len(m.hdr) + len(m.data)
        if size >= limit:
            break
        sent += 1
        if req["batch"] > 0 and sent >= req["batch"]:
            break
    return _answer(None, msgs, [pending, last, up_to], batch=True)


# -- the wire ----------------------------------------------------------------------------
def status_block(code: int, text: str) -> bytes:
    return b"NATS/1.0 %d %s\r\n\r\n" % (code, text.encode())


def message_block(stream: str, m: list, batch: bool) -> bytes:
    """One answered message's header block, as nats-server writes it."""
    subject, seq, hdr, _, ts, pending, last = m
    pairs = [("Nats-Stream", stream), ("Nats-Subject", subject), ("Nats-Sequence", str(seq)),
             ("Nats-Time-Stamp", rfc3339_ns(ts))]
    if batch:
        pairs += [("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last))]
    if not hdr:
        return b"NATS/1.0\r\n" + b"".join(b"%s: %s\r\n" % (k.encode(), v.encode())
                                          for k, v in pairs) + b"\r\n"
    for k, v in pairs:
        hdr = append_header(hdr, k, v)
    return hdr


def wire(answer: dict[str, Any], stream: str) -> list[tuple[bytes | None, bytes]]:
    """The messages (header block or None, payload) that answer a request, in order."""
    out: list[tuple[bytes | None, bytes]] = []
    for m in answer["msgs"]:
        hdr = None if answer["no_hdr"] else message_block(stream, m, answer["batch"])
        out.append((hdr, m[3]))
    if answer["status"]:
        out.append((status_block(*answer["status"]), b""))
    elif answer["eob"] is not None:
        pending, last, up_to = answer["eob"]
        block = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n" % (
            pending, last)
        if up_to:
            block += b"Nats-UpTo-Sequence: %d\r\n" % up_to
        out.append((block + b"\r\n", b""))
    return out


__all__ = ["DEFAULT_MAX_BYTES", "MAX_MULTI", "is_batch", "message_block", "parse_request",
           "read", "rfc3339_ns", "status_block", "time_ns", "wire"]
