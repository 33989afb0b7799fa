"""Deliveries as columns: every message's fields come back as the Delivery had them."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.engine.consumer.delivery_batch import (
    MAX_RANGE_ACKS,
    DeliveryBatch,
    expand_ranges,
    seq_ranges,
)
from rayjet.engine.consumer.types import Delivery
from rayjet.errors import BadRequestError

deliveries = st.lists(st.builds(
    lambda subject, hdr, data, sseq, cseq, n, ts, pending: Delivery(
        subject, hdr, data, "ORDERS", "D", sseq, cseq, n, ts, pending),
    st.sampled_from(["a.b", "a.c", "ü.x", "z"]),
    st.sampled_from([b"", b"NATS/1.0\r\nK: v\r\n\r\n"]),
    st.binary(max_size=40),
    st.integers(1, 2**62), st.integers(1, 2**62), st.integers(1, 9),
    st.integers(0, 2**62), st.integers(0, 2**40)), max_size=30)


def fields(d: Delivery) -> tuple:
    return (d.subject, d.hdr, d.data, d.stream_seq, d.consumer_seq, d.num_delivered,
            d.timestamp, d.num_pending, d.reply)


def batch_fields(b: DeliveryBatch) -> list[tuple]:
    _, _, _, sseq, cseq, n, pending, ts = b.lists()
    return [(*b.message(i), sseq[i], cseq[i], n[i], ts[i], pending[i], b.reply(i))
            for i in range(len(b))]


@settings(deadline=None)
@given(deliveries)
def test_a_batch_answers_every_field_of_its_deliveries(ds):
    b = pickle.loads(pickle.dumps(DeliveryBatch.of(ds, "ORDERS", "D")))
    assert len(b) == len(ds)
    assert batch_fields(b) == [fields(d) for d in ds]
    assert (b.stream, b.consumer) == ("ORDERS", "D")


@settings(deadline=None)
@given(deliveries)
def test_arrow_rows_are_the_deliveries(ds):
    rb = DeliveryBatch.of(ds, "ORDERS", "D").to_arrow()
    assert rb.schema.metadata == {b"stream": b"ORDERS", b"consumer": b"D"}
    rows = rb.to_pylist()
    assert [(r["subject"], r["headers"] or b"", r["data"], r["stream_seq"], r["consumer_seq"],
             r["num_delivered"], r["num_pending"]) for r in rows] == [
        (d.subject, d.hdr, d.data, d.stream_seq, d.consumer_seq, d.num_delivered,
         d.num_pending) for d in ds]
    assert [r["headers"] is None for r in rows] == [not d.hdr for d in ds]
    assert rb.column("timestamp").cast(pa.int64()).to_pylist() == [d.timestamp for d in ds]


@settings(deadline=None)
@given(deliveries, st.integers(0, 35), st.integers(0, 35))
def test_slices_and_concatenation_keep_every_field(ds, a, b):
    whole = DeliveryBatch.of(ds, "ORDERS", "D")
    lo, hi = min(a, b), max(a, b)
    part = whole.slice(lo, hi)
    assert batch_fields(part) == [fields(d) for d in ds[lo:hi]]
    joined = DeliveryBatch.concat([whole.slice(0, lo), whole.slice(lo)])
    assert batch_fields(joined) == [fields(d) for d in ds]


@settings(deadline=None)
@given(st.lists(st.integers(1, 200), max_size=60))
def test_ack_ranges_name_the_same_seqs(seqs):
    ranges = seq_ranges(seqs)
    assert len(ranges) % 2 == 0
    assert expand_ranges(ranges) == sorted(set(seqs))
    assert expand_ranges(ranges.tolist()) == sorted(set(seqs))


def test_contiguous_acks_are_one_range():
    assert seq_ranges(range(5, 505)).tolist() == [5, 504]
    assert seq_ranges([9, 3, 4, 5, 9, 11]).tolist() == [3, 5, 9, 9, 11, 11]


@pytest.mark.parametrize("bad", [[1], [0, 3], [5, 2], [1.5, 2.0], ["a", "b"], [[1, 2], [3]],
                                 [1, 2**64 + 5], [1, MAX_RANGE_ACKS + 1]])
def test_bad_ack_ranges_are_refused(bad):
    with pytest.raises(BadRequestError):
        expand_ranges(np.array(bad, dtype=object) if isinstance(bad[0], list) else bad)


def test_an_empty_batch_has_the_schema():
    rb = DeliveryBatch.of([], "S", "C").to_arrow()
    assert rb.num_rows == 0 and rb.schema.names[:3] == ["subject", "data", "headers"]


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a.b", "z"]), st.binary(max_size=9)), max_size=12),
       st.integers(1, 50), st.integers(0, 8), deliveries)
def test_runs_and_single_deliveries_make_the_same_batch(rows, cseq, pending, singles):
    from rayjet.engine.consumer.types import DeliveryRun
    from rayjet.storage.protocol import StoredMsg

    msgs = [StoredMsg(subject, b"", data, 100 + i, 7 + i) for i, (subject, data) in
            enumerate(rows)]
    run = DeliveryRun(msgs, "ORDERS", "D", cseq, pending)
    mixed = [*singles[:3], run, *singles[3:]] if rows else singles
    spelled = [*singles[:3], *run.deliveries(), *singles[3:]] if rows else singles
    assert batch_fields(DeliveryBatch.of(mixed, "ORDERS", "D")) == [fields(d) for d in spelled]
    assert [d.num_pending for d in run.deliveries()] == [max(pending - i, 0)
                                                          for i in range(len(msgs))]
