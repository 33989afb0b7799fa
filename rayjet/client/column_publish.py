"""``publish_batch`` of a pyarrow Table or RecordBatch: rows cross to each stream's leader
as Arrow columns, in calls of at most :data:`MAX_CALL_ROWS` rows / :data:`MAX_CALL_BYTES`.

The answers are a :class:`PubAcks`, one per row as in the list form, made when read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rayjet.api import PubAck
from rayjet.api import headers as H
from rayjet.engine.columnar import message_columns
from rayjet.errors import APIError
from rayjet.storage import arrow_arrays as arrays
from rayjet.subjects import validate_stored_subject, validate_subject

MAX_CALL_ROWS = 50_000
MAX_CALL_BYTES = 8 << 20  # one raft entry; followers take entries up to 8 MB per message


class PubAcks(Sequence):
    """One answer per row of a columnar publish: a PubAck, or the APIError that refused
    the row. ``seqs`` holds each row's sequence (the original's for a duplicate, 0 where
    refused) without making the PubAcks."""

    def __init__(self, count: int) -> None:
        self.seqs = np.zeros(count, dtype=np.int64)
        self._stream = np.zeros(count, dtype=np.int32)
        self._streams: list[str] = []
        self._other: dict[int, Any] = {}  # rows whose answer is not a plain stored ack

    def take(self, stream: str, start: int, answer: dict[str, Any]) -> None:
        """Record the compact answer of one call that carried rows ``start...``."""
        if stream not in self._streams:
            self._streams.append(stream)
        self._stream[start:start + answer["count"]] = self._streams.index(stream)
        if answer["refused"] is not None:
            self.refuse(start, answer["count"], answer["refused"])
            return
        for rows, first in answer["runs"]:
            at = np.frombuffer(rows, dtype="<u4").astype(np.int64) + start
            self.seqs[at] = np.arange(first, first + len(at), dtype=np.int64)
        for row, a in answer["rows"].items():
            if type(a) is int:
                self.seqs[start + row] = a
            else:
                self._other[start + row] = a
                if isinstance(a, PubAck):
                    self.seqs[start + row] = a.seq

    def rename_streams(self, rename: Any) -> None:
        """Name each stream by ``rename(name)`` (an account's view of the cluster's)."""
        self._streams = [rename(n) for n in self._streams]
        for row, a in self._other.items():
            if isinstance(a, PubAck):
                self._other[row] = dataclasses.replace(a, stream=rename(a.stream))

    def refuse(self, start: int, count: int, err: BaseException) -> None:
        self._other.update(dict.fromkeys(range(start, start + count), err))

    def refuse_rows(self, rows: np.ndarray, err: BaseException) -> None:
        self._other.update(dict.fromkeys(rows.tolist(), err))

    @property
    def duplicates(self) -> list[int]:
        """Rows already stored (same msg id within the duplicate window)."""
        return [r for r, a in self._other.items() if isinstance(a, PubAck) and a.duplicate]

    @property
    def errors(self) -> dict[int, BaseException]:
        """Refused rows and why."""
        return {r: a for r, a in self._other.items() if isinstance(a, BaseException)}

    def __len__(self) -> int:
        return len(self.seqs)

    def columns(self) -> tuple[list[str], list[int], list[int], dict[int, Any]]:
        """The answers as columns, for writing them out without a PubAck per row: stream
        names, each row's index into them, each row's seq, and the rows whose answer is not
        a plain stored ack (an APIError, or a PubAck marked duplicate and the like)."""
        return list(self._streams), self._stream.tolist(), self.seqs.tolist(), dict(self._other)

    def _one(self, i: int) -> Any:
        a = self._other.get(i)
        if a is not None:
            return a
        return PubAck.stored(self._streams[self._stream[i]], int(self.seqs[i]))

    def to_list(self) -> list[Any]:
        """Every row's answer, made in one pass (the rows' columns read once)."""
        names, stored = self._streams, PubAck.stored
        out = [stored(names[s], q) for s, q in zip(self._stream.tolist(), self.seqs.tolist())]
        for row, a in self._other.items():
            out[row] = a
        return out

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._one(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        return self._one(i % n)

    def __iter__(self):
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PubAcks | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"PubAcks({len(self)} rows, {len(self.errors)} refused)"


def check_client_side(cols, literal_wildcards: bool = False) -> None:
    """What the list form refuses before sending anything: bad subjects, headers, ids."""
    check = validate_stored_subject if literal_wildcards else validate_subject
    for subject in pc.unique(cols.subjects).to_pylist():
        check(subject)
    if cols.headers is not None:
        for h in cols.headers:
            if isinstance(h, dict):
                H.validate_headers(h)
    if cols.msg_ids is not None:
        for msg_id in cols.msg_ids:
            if msg_id and ("\r" in msg_id or "\n" in msg_id):
                H.validate_headers({H.MSG_ID: msg_id})  # raises the list form's error


def call_ranges(cols, start: int, stop: int) -> list[tuple[int, int]]:
    """Row ranges of at most MAX_CALL_ROWS rows and about MAX_CALL_BYTES of payload."""
    out = []
    ends = np.cumsum(arrays.to_numbers(pc.binary_length(cols.data.slice(start, stop - start)))
                     .astype(np.int64))
    at = start
    while at < stop:
        done = ends[at - start - 1] if at > start else 0
        by_bytes = int(np.searchsorted(ends, done + MAX_CALL_BYTES, side="right")) + start
        end = min(stop, at + MAX_CALL_ROWS, max(by_bytes, at + 1))
        out.append((at, end))
        at = end
    return out


def row_streams(cols, stream_for: Callable[[str], str], acks: PubAcks
                ) -> tuple[np.ndarray, list[str]]:
    """Each row's stream as an index into the returned names; -1 where no stream captures
    the subject (those rows are answered in ``acks``)."""
    enc = pc.dictionary_encode(cols.subjects)
    indices = arrays.to_numbers(enc.indices)
    names: list[str] = []
    codes = []
    for k, subject in enumerate(enc.dictionary.to_pylist()):
        try:
            stream = stream_for(subject)
        except APIError as err:
            acks.refuse_rows(np.flatnonzero(indices == k), err)
            codes.append(-1)
            continue
        if stream not in names:
            names.append(stream)
        codes.append(names.index(stream))
    return np.array(codes, dtype=np.int64)[indices], names


def stream_runs(streams: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, stop, stream index) of each run of consecutive rows of one stream."""
    cuts = np.flatnonzero(np.diff(streams)) + 1
    starts = np.r_[0, cuts].tolist()
    stops = np.r_[cuts, len(streams)].tolist()
    return [(a, b, int(streams[a])) for a, b in zip(starts, stops, strict=True)]


def messages_table(msgs: list[tuple]) -> pa.Table:
    """Checked ``(subject, data, headers)`` messages as a message table: a header dict
    holding only a Nats-Msg-Id goes to the ``msg_id`` column (its row is then admitted
    with the run), any other to ``headers``."""
    ids: list[str | None] = []
    headers: list[dict | None] = []
    for _, _, h in msgs:
        if h and len(h) == 1 and h.get(H.MSG_ID):
            ids.append(h[H.MSG_ID])
            headers.append(None)
        else:
            ids.append(None)
            headers.append(h or None)
    columns = {"subject": arrays.binaries([m[0] for m in msgs], pa.string()),
               "data": arrays.binaries([m[1] for m in msgs])}
    if any(i is not None for i in ids):
        columns["msg_id"] = arrays.binaries(ids, pa.string())
    if any(h is not None for h in headers):
        columns["headers"] = pa.array(headers, pa.map_(pa.string(), pa.string()))
    return pa.table(columns)


def table_messages(batch: Any) -> list[tuple]:
    """The rows of a batch as list-form messages (an atomic publish)."""
    cols = message_columns(batch)
    return [cols.message(i) for i in range(cols.count)]


__all__ = ["MAX_CALL_BYTES", "MAX_CALL_ROWS", "PubAcks", "call_ranges", "check_client_side",
           "message_columns", "messages_table",
           "row_streams", "stream_runs", "table_messages"]
