"""The backup archive: what is written reads back; any damage is refused whole."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.storage.backup_archive import (
    ArchiveWriter,
    BackupDamagedError,
    message_records,
    verify_archive,
)


def _archive(n_pages: int = 3, per_page: int = 50) -> bytes:
    w = ArchiveWriter()
    out = [w.header({"name": "S", "subjects": ["s.>"]},
                    {"messages": n_pages * per_page, "first_ts": datetime(2026, 1, 1, tzinfo=UTC)},
                    created_ns=7, first_seq=3, last_seq=3 + n_pages * per_page + 5)]
    seq = 3
    for _ in range(n_pages):
        seqs = list(range(seq, seq + per_page))
        seq += per_page
        out.append(w.messages(seqs, [s * 10 for s in seqs], [f"s.{s % 4}" for s in seqs],
                              [b"NATS/1.0\r\nA: 1\r\n\r\n" if s % 9 == 0 else None for s in seqs],
                              [b"x" * (s % 13) for s in seqs]))
    out.append(w.sources([["ORIG > >", 10, "id"]]))
    out.append(w.consumer("C", {"durable_name": "C"}, {"delivered": [4, 6]}))
    out.append(w.end())
    return b"".join(out)


def test_an_archive_reads_back_what_was_written():
    raw = _archive()
    s = verify_archive(io.BytesIO(raw))
    assert (s.first_seq, s.last_seq, s.messages, s.created_ns) == (3, 158, 150, 7)
    assert s.config["name"] == "S" and s.state["first_ts"].startswith("2026-01-01")
    assert s.sources == [["ORIG > >", 10, "id"]]
    assert [(c.name, c.state) for c in s.consumers] == [("C", {"delivered": [4, 6]})]
    cols = list(message_records(io.BytesIO(raw)))
    seqs = [x for c in cols for x in c["seq"]]
    assert seqs == list(range(3, 153))
    assert cols[0]["hdr"][6] == b"NATS/1.0\r\nA: 1\r\n\r\n" and cols[0]["hdr"][0] == b""
    assert s.data_bytes == sum(len(d) for c in cols for d in c["data"])


_RAW = _archive(2, 20)


@settings(max_examples=300, deadline=None)
@given(pos=st.integers(0, len(_RAW) - 1), bit=st.integers(0, 7))
def test_every_flipped_bit_is_refused(pos, bit):
    damaged = bytearray(_RAW)
    damaged[pos] ^= 1 << bit
    with pytest.raises(BackupDamagedError):
        verify_archive(io.BytesIO(bytes(damaged)))


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(0, len(_RAW) - 1))
def test_every_cut_off_archive_is_refused(cut):
    with pytest.raises(BackupDamagedError):
        verify_archive(io.BytesIO(_RAW[:cut]))


def test_records_lost_repeated_or_reordered_are_refused():
    w = ArchiveWriter()
    head = w.header({"name": "S"}, {}, created_ns=0, first_seq=1, last_seq=4)
    a = w.messages([1, 2], [0, 0], ["s", "s"], [None, None], [b"", b""])
    b = w.messages([3, 4], [0, 0], ["s", "s"], [None, None], [b"", b""])
    end = w.end()
    assert verify_archive(io.BytesIO(head + a + b + end)).messages == 4
    for parts in ([head, b, a, end], [head, a, end], [head, a, a, b, end], [a, head, b, end],
                  [head, a, b, end, end], [head, a, b]):
        with pytest.raises(BackupDamagedError):
            verify_archive(io.BytesIO(b"".join(parts)))


@settings(max_examples=100, deadline=None)
@given(junk=st.binary(max_size=400))
def test_a_strangers_bytes_are_refused(junk):
    with pytest.raises(BackupDamagedError):
        verify_archive(io.BytesIO(junk))
    with pytest.raises(BackupDamagedError):
        verify_archive(io.BytesIO(b"RJBACKUP" + junk))
