"""Publishing a pyarrow batch of messages: its columns, and how its answers map to rows.

A batch has the columns ``subject`` (string), ``data`` (binary or string; null is empty),
and optionally ``headers`` (a map of string to string, or NATS header blocks as binary;
null for none) and ``msg_id`` (string; null or empty for none). The leader admits runs of rows
without headers as a whole (:meth:`StreamEngine.prepare_columns`) and rows with headers
one by one, so a batch is stored as the same messages as the list form would store.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rayjet.api import PubAck
from rayjet.api import headers as H
from rayjet.api.enums import DiscardPolicy
from rayjet.engine.ops import MsgRunOp, id_header
from rayjet.errors import APIError, BadRequestError, DuplicateInProcessError, MessageTooBigError
from rayjet.storage import arrow_arrays as arrays

REQUIRED = ("subject", "data")
OPTIONAL = ("headers", "msg_id")


def _one_array(col: Any) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _as_binary(arr: pa.Array) -> pa.Array:
    t = arr.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        out = arr
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
        out = arr.cast(pa.large_binary() if pa.types.is_large_string(t) else pa.binary())
    elif pa.types.is_fixed_size_binary(t):
        out = arr.cast(pa.binary())
    else:
        raise BadRequestError(f"column 'data' must be binary or string, not {t}")
    return pc.fill_null(out, b"") if out.null_count else out


def _as_strings(arr: pa.Array, name: str) -> pa.Array:
    t = arr.type
    if pa.types.is_dictionary(t):
        arr, t = arr.cast(t.value_type), t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
        return arr
    raise BadRequestError(f"column {name!r} must be a string column, not {t}")


def _headers_list(arr: pa.Array) -> list[Any]:
    """Per row: a dict of headers, a NATS header block (bytes) or None."""
    t = arr.type
    if pa.types.is_map(t):
        return [dict(v) if v else None for v in arr.to_pylist()]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return [v or None for v in arr.to_pylist()]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [v.encode() if v else None for v in arr.to_pylist()]
    if pa.types.is_null(t):
        return [None] * len(arr)
    raise BadRequestError("column 'headers' must be a map of string to string or NATS "
                          f"header blocks (binary), not {t}")


class MessageColumns(NamedTuple):
    count: int
    subjects: pa.Array  # string
    data: pa.Array  # binary or large_binary, no nulls
    headers: list[Any] | None  # per row: dict, header block or None
    msg_ids: list[str | None] | None

    def special_rows(self) -> list[int]:
        """Rows the leader admits one by one: those with headers to check."""
        if self.headers is None:
            return []
        return [i for i, h in enumerate(self.headers) if h]

    def message(self, row: int) -> tuple[Any, bytes, Any]:
        """Row ``row`` as the list form's ``(subject, data, headers)``."""
        subject = self.subjects[row].as_py()
        headers = self.headers[row] if self.headers is not None else None
        msg_id = self.msg_ids[row] if self.msg_ids is not None else None
        if msg_id:  # null or "": no id
            if isinstance(headers, bytes):
                headers = H.decode_headers(headers)
            headers = {**(headers or {}), H.MSG_ID: msg_id}
        return subject, self.data[row].as_py(), headers


def message_columns(batch: Any) -> MessageColumns:
    """The columns of a ``pyarrow.Table`` or ``RecordBatch`` of messages, checked."""
    if not isinstance(batch, pa.Table | pa.RecordBatch):
        raise BadRequestError(f"expected a pyarrow Table or RecordBatch, not {type(batch).__name__}")
    names = batch.schema.names
    unknown = [n for n in names if n not in REQUIRED + OPTIONAL]
    if unknown or len(set(names)) != len(names):
        raise BadRequestError(f"unexpected columns {unknown or names}: a message batch has "
                              "'subject', 'data' and optionally 'headers' and 'msg_id'")
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        raise BadRequestError(f"a message batch needs the columns {missing}")
    subjects = _as_strings(_one_array(batch.column("subject")), "subject")
    data = _as_binary(_one_array(batch.column("data")))
    headers = msg_ids = None
    if "headers" in names:
        headers = _headers_list(_one_array(batch.column("headers")))
    if "msg_id" in names:
        msg_ids = _as_strings(_one_array(batch.column("msg_id")), "msg_id").to_pylist()
    return MessageColumns(batch.num_rows, subjects, data, headers, msg_ids)


def binary_parts(arr: pa.Array) -> tuple[np.ndarray, bytes]:
    """A binary array without nulls as (end offset of each value, the values' bytes)."""
    width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=width)[arr.offset:arr.offset + n + 1]
    start, stop = int(offsets[0]), int(offsets[-1])
    values = arr.buffers()[2]
    data = values[start:stop].to_pybytes() if values is not None else b""
    return (offsets[1:] - start).astype("<u8"), data


class ColumnPlan:
    """What a columnar publish proposes, and which rows each op answers."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.ops: list[Any] = []
        self.rows: list[np.ndarray | int] = []  # per op: the rows it stores
        self.answers: dict[int, Any] = {}  # rows answered before proposing
        self.refused: APIError | None = None  # every row refused alike

    def add(self, op: Any, rows: np.ndarray | int) -> None:
        self.ops.append(op)
        self.rows.append(rows)

    def answer(self, results: list[Any]) -> dict[str, Any]:
        """The compact answer for the client: runs of stored rows as (rows as u32 bytes,
        first seq) and the other rows' answers (a seq, a PubAck or an APIError)."""
        runs: list[tuple[bytes, int]] = []
        rows_out = dict(self.answers)
        for rows, r in zip(self.rows, results, strict=True):
            if isinstance(rows, int):
                rows_out[rows] = r.answer
            elif r.ok:
                runs.append((rows.astype("<u4").tobytes(), r.op.seq))
            else:
                rows_out.update(dict.fromkeys(rows.tolist(), r.error))
        return {"count": self.count, "runs": runs, "rows": rows_out, "refused": self.refused}




_ID_HEADER_LEN = len(id_header(""))


class ColumnarPublish:
    """Mixed into :class:`rayjet.engine.StreamEngine`: the leader's admission of a batch
    given as columns. Runs of rows without headers are admitted with vectorised work and
    proposed as one :class:`MsgRunOp` each; rows with headers, and every row of a stream
    whose rules need per-message work (counters, republish, per-subject discard-new,
    interest retention without interest), go through :meth:`admit` one by one."""

    def prepare_columns(self, batch: Any) -> ColumnPlan:
        self.require_leader()
        cols = message_columns(batch)
        plan = ColumnPlan(cols.count)
        try:
            self._refuse_writes()
        except APIError as err:
            plan.refused = err
            return plan
        start = 0
        for row in [*cols.special_rows(), cols.count]:
            if row > start:
                self._admit_rows(cols, start, row, plan)
            if row < cols.count:
                self._admit_row(cols, row, plan)
            start = row + 1
        return plan

    def _runs_allowed(self) -> bool:
        cfg = self.config
        return not (cfg.allow_msg_counter or self._republish is not None
                    or (cfg.discard_new_per_subject and cfg.max_msgs_per_subject > 0))

    def _admit_row(self, cols: MessageColumns, row: int, plan: ColumnPlan) -> None:
        try:
            subject, data, headers = cols.message(row)  # a bad header block raises here
            hdr, h = self._headers(headers)
            out = self.admit(subject, data, hdr, h, None)
        except APIError as err:
            plan.answers[row] = err
            return
        if isinstance(out, PubAck):
            plan.answers[row] = out
        else:
            plan.add(self.assign(out), row)

    def _admit_rows(self, cols: MessageColumns, start: int, stop: int, plan: ColumnPlan) -> None:
        """Rows ``start..stop-1`` (none with headers) as one run, or one by one when the
        stream's rules (or the run's limits) need per-message checks."""
        run = self._run_of(cols, start, stop) if self._runs_allowed() else None
        if run is None:
            for row in range(start, stop):
                self._admit_row(cols, row, plan)
            return
        answers, op, rows = run
        plan.answers.update(answers)
        if op is not None:
            plan.add(op, rows)

    def _run_of(self, cols: MessageColumns, start: int, stop: int):
        """(answers of refused rows, the MsgRunOp of the others or None, their rows), or
        None when a message must be checked on its own."""
        n = stop - start
        subjects = cols.subjects.slice(start, n)
        if subjects.null_count:
            return None
        enc = pc.dictionary_encode(subjects)
        which = arrays.to_numbers(enc.indices).astype(np.int64)
        stored: list[str] = []
        answers: dict[int, Any] = {}
        ok = np.ones(n, dtype=bool)
        for k, subject in enumerate(enc.dictionary.to_pylist()):
            try:
                stored.append(self._subject(subject))
            except APIError as err:
                stored.append("")
                bad = np.flatnonzero(which == k)
                ok[bad] = False
                answers.update(dict.fromkeys((bad + start).tolist(), err))
        data = cols.data.slice(start, n)
        dlen = arrays.to_numbers(pc.binary_length(data)).astype(np.int64)
        ids = cols.msg_ids[start:stop] if cols.msg_ids is not None else None
        if ids is not None and not any(ids):
            ids = None
        hlen = (np.fromiter((_ID_HEADER_LEN + len(i.encode()) if i else 0 for i in ids),
                            dtype=np.int64, count=n) if ids is not None else 0)
        if self._max_size:
            big = np.flatnonzero(ok & (hlen + dlen > self._max_size))
            if len(big):
                ok[big] = False
                answers.update({int(r) + start: MessageTooBigError() for r in big})
        if ids is not None and not self._dedup_rows(ids, ok, start, answers):
            return None
        rows = np.flatnonzero(ok)
        if not len(rows):
            return answers, None, rows
        slen = np.fromiter((len(s.encode()) for s in stored), dtype=np.int64, count=len(stored))
        sizes = 30 + slen[which] + dlen + (np.where(hlen > 0, hlen + 4, 0) if ids is not None else 0)
        sizes = sizes[rows]
        used, run_which = np.unique(which[rows], return_inverse=True)
        names = tuple(stored[k] for k in used.tolist())
        if not self._run_fits(len(rows), int(sizes.sum()), names):
            return None
        if len(rows) < n:
            data = data.take(arrays.numbers(rows))
        ends, payload = binary_parts(data)
        run_ids = tuple(ids[r] or "" for r in rows.tolist()) if ids is not None else ()
        op = self._assign_run(names, run_which, ends, payload, run_ids, sizes)
        return answers, op, rows + start

    def _dedup_rows(self, ids: list, ok: np.ndarray, start: int, answers: dict) -> bool:
        """Refuse the rows whose msg id is a duplicate (as a set operation over the ids;
        rows one by one only where some id is known or repeated). False when an id is
        not a plain header value, so its row must be checked on its own."""
        present = [i for i in ids if i]
        if any("\r" in i or "\n" in i for i in present):
            return False
        if not self._window_ns:
            return True
        wanted = set(present)
        if len(wanted) == len(present) and not (self.dedup.known(wanted)
                                                or wanted & self.pending.ids.keys()):
            return True
        now, seen = self.clock.now_ns(), set()
        for r in np.flatnonzero(ok).tolist():
            msg_id = ids[r]
            if not msg_id:
                continue
            seq = self.dedup.get(msg_id, now, self._window_ns)
            if seq:
                answers[r + start] = PubAck(stream=self.name, seq=seq, duplicate=True)
            elif msg_id in self.pending.ids or msg_id in seen:
                answers[r + start] = DuplicateInProcessError()
            else:
                seen.add(msg_id)
                continue
            ok[r] = False
        return True

    def _run_fits(self, count: int, size: int, names: tuple[str, ...]) -> bool:
        """Whether discard-new limits and interest retention let the whole run through
        without per-message checks."""
        cfg, pending = self.config, self.pending
        if cfg.discard is DiscardPolicy.NEW and (cfg.max_msgs > 0 or cfg.max_bytes > 0):
            st = self.store.fast_state()
            if cfg.max_msgs > 0 and st.msgs + pending.msgs + count > cfg.max_msgs:
                return False
            if cfg.max_bytes > 0 and st.bytes + pending.bytes + size > cfg.max_bytes:
                return False
        if self._interest_ret:
            return all(self.interest.has_interest(s) for s in names)
        return True

    def _assign_run(self, names: tuple[str, ...], which: np.ndarray, ends: np.ndarray,
                    payload: bytes, ids: tuple[str, ...], sizes: np.ndarray) -> MsgRunOp:
        """The op storing a run at the next sequences, all with one timestamp."""
        pending = self.pending
        count = len(which)
        seq = pending.next_seq
        pending.next_seq = seq + count
        ts = max(self.clock.now_ns(), pending.last_ts)
        pending.last_ts = ts
        msgs = np.bincount(which, minlength=len(names))
        nbytes = np.bincount(which, weights=sizes, minlength=len(names)).astype(np.int64)
        _, first_from_end = np.unique(which[::-1], return_index=True)
        lasts = seq + count - 1 - first_from_end
        pending.add_run(seq, count, {s: (int(m), int(b), int(last)) for s, m, b, last in
                                     zip(names, msgs, nbytes, lasts, strict=True)},
                        int(sizes.sum()), list(ids))
        return MsgRunOp(seq, ts, names, which.astype("<u4").tobytes(), ends.tobytes(),
                        payload, ids, self._pid)


__all__ = ["ColumnPlan", "ColumnarPublish", "MessageColumns", "binary_parts", "message_columns"]
