"""ReadAhead: a consumer decision answered from a window read ahead of time."""

from __future__ import annotations

from rayjet.api import AckPolicy, ConsumerConfig, StreamConfig
from rayjet.engine.consumer.engine import ConsumerEngine
from rayjet.engine.consumer.reader import ReadAhead, StoreReader
from rayjet.storage import MemStore, StoreConfig


class Counting(StoreReader):
    def __init__(self, store) -> None:
        super().__init__(store)
        self.calls: list[str] = []

    def load_next_batch(self, filters, start_seq, limit):
        self.calls.append("load_next_batch")
        return super().load_next_batch(filters, start_seq, limit)

    def num_pending(self, filters, start_seq, last_per_subject=False):
        self.calls.append("num_pending")
        return super().num_pending(filters, start_seq, last_per_subject)


def setup(clock, n=10, **cfg):
    store = MemStore(StoreConfig(storage="memory"), clock=clock)
    for i in range(n):
        store.store_msg(f"ORDERS.{'a' if i % 2 else 'b'}", b"", b"%d" % i)
    inner = Counting(store)
    reader = ReadAhead(inner)
    engine = ConsumerEngine(ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT,
                                           **cfg),
                            StreamConfig(name="ORDERS", subjects=["ORDERS.*"]), reader, clock)
    for op in engine.set_leader():
        engine.apply(op)
    return store, inner, reader, engine


def test_a_window_answers_the_decision_without_reading(clock):
    _store, inner, reader, engine = setup(clock)
    start = engine.read_position()
    reader.offer(inner.read_window(engine.filters, start, 4))
    inner.calls.clear()
    batch = engine.next_batch(clock.now_ns(), 4)
    assert [m.stream_seq for m in batch.messages] == [1, 2, 3, 4]
    assert [m.num_pending for m in batch.messages] == [9, 8, 7, 6]
    assert inner.calls == []
    reader.drop()
    batch = engine.next_batch(clock.now_ns(), 2)
    assert [m.stream_seq for m in batch.messages] == [5, 6]
    assert "load_next_batch" in inner.calls


def test_a_short_window_is_not_taken_for_the_end_of_the_stream(clock):
    _store, inner, reader, engine = setup(clock, n=10)
    reader.offer(inner.read_window(engine.filters, engine.read_position(), 3))
    inner.calls.clear()
    batch = engine.next_batch(clock.now_ns(), 8)  # wants more than the window holds
    assert [m.stream_seq for m in batch.messages] == list(range(1, 9))
    assert "load_next_batch" in inner.calls


def test_a_complete_window_answers_up_to_its_end(clock):
    _store, inner, reader, engine = setup(clock, n=5, filter_subject="ORDERS.a")
    reader.offer(inner.read_window(engine.filters, engine.read_position(), 10))
    inner.calls.clear()
    batch = engine.next_batch(clock.now_ns(), 10)
    assert [m.stream_seq for m in batch.messages] == [2, 4]
    assert inner.calls == []


def test_a_window_for_other_filters_or_an_earlier_position_is_ignored(clock):
    _store, inner, reader, engine = setup(clock)
    reader.offer(inner.read_window(("ORDERS.b",), 1, 10))
    inner.calls.clear()
    batch = engine.next_batch(clock.now_ns(), 2)
    assert [m.stream_seq for m in batch.messages] == [1, 2]
    assert "load_next_batch" in inner.calls
    window = inner.read_window(engine.filters, 5, 10)
    reader.offer(window)
    inner.calls.clear()
    assert [m.stream_seq for m in engine.next_batch(clock.now_ns(), 2).messages] == [3, 4]
    assert "load_next_batch" in inner.calls  # the window starts after the position


def test_a_window_cut_by_size_is_not_taken_for_the_end(clock, monkeypatch):
    from rayjet.engine.consumer import reader as consumer_reader

    monkeypatch.setattr(consumer_reader, "WINDOW_BYTES", 1)  # one record per window
    _store, inner, reader, engine = setup(clock, n=6)
    window = inner.read_window(engine.filters, engine.read_position(), 10)
    assert [m.seq for m in window.msgs] == [1] and window.pending == 6
    reader.offer(window)
    inner.calls.clear()
    batch = engine.next_batch(clock.now_ns(), 10)
    assert [m.stream_seq for m in batch.messages] == [1, 2, 3, 4, 5, 6]
    assert "load_next_batch" in inner.calls


def test_a_bulk_window_crosses_as_columns_and_gives_the_same_messages(clock):
    import pickle

    store, inner, _reader, engine = setup(clock, n=7)
    window = pickle.loads(pickle.dumps(inner.read_window((), 3, 4)))
    assert window.msgs == [store.load_msg(seq) for seq in (3, 4, 5, 6)]
    assert (window.seqs, window.last, window.pending) == ([3, 4, 5, 6], 7, 5)
