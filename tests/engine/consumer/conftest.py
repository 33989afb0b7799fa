"""A single-process harness around ConsumerEngine: a MemStore stream, decide, commit."""

from __future__ import annotations

import random

import pytest

from rayjet.api import ConsumerConfig, StreamConfig
from rayjet.clock import ManualClock
from rayjet.engine.consumer.engine import ConsumerEngine
from rayjet.engine.consumer.ops import decode_consumer_op, encode_consumer_op
from rayjet.engine.consumer.reader import StoreReader
from rayjet.engine.consumer.types import PullRequest
from rayjet.storage import MemStore, StoreConfig


class Consumer:
    """One stream store, one consumer leader and optional followers fed the encoded ops."""

    def __init__(self, clock: ManualClock, *, stream: StreamConfig | None = None,
                 store: MemStore | None = None, followers: int = 0, seed: int = 1,
                 start: bool = True, **cfg) -> None:
        self.clock = clock
        self.stream_config = stream or StreamConfig(name="ORDERS", subjects=["ORDERS.*"])
        self.store = store or MemStore(StoreConfig(storage="memory"), clock=clock)
        cfg.setdefault("durable_name", "DISPATCH")
        self.config = ConsumerConfig(**cfg)
        self.reader = StoreReader(self.store)
        self.engine = self._engine(seed)
        self.followers = [self._engine(seed) for _ in range(followers)]
        self.log: list[bytes] = []
        self.acked: list[int] = []  # stream seqs the stream was told it may release
        self.advisories: list = []
        if start:
            self.commit(self.engine.set_leader())

    def _engine(self, seed: int) -> ConsumerEngine:
        return ConsumerEngine(self.config, self.stream_config, self.reader, self.clock,
                              created_ns=self.clock.now_ns(), rng=random.Random(seed))

    @property
    def now(self) -> int:
        return self.clock.now_ns()

    def pub(self, subject: str = "ORDERS.processed", data: bytes = b"x", hdr: bytes = b"") -> int:
        return self.store.store_msg(subject, hdr, data)[0]

    def commit(self, ops) -> None:
        for op in ops:
            if op is None:
                continue
            buf = encode_consumer_op(op)
            self.log.append(buf)
            res = self.engine.apply(op)
            self.acked.extend(res.acked)
            for f in self.followers:
                f.apply(decode_consumer_op(buf))

    def take(self, batch) -> list:
        self.commit(batch.ops)
        self.advisories.extend(batch.advisories)
        return batch.messages

    def fetch(self, n: int = 1, max_bytes: int = 0) -> list:
        return self.take(self.engine.next_batch(self.now, n, max_bytes))

    def request(self, batch: int = 1, reply: str = "r1", **kw):
        b = self.engine.request(PullRequest(reply=reply, batch=batch, **kw), self.now)
        self.take(b)
        return b

    def serve(self):
        b = self.engine.serve(self.now)
        self.take(b)
        return b

    def _outcome(self, out):
        self.advisories.extend(out.advisories)
        if out.op is not None:
            self.commit([out.op])
        return out

    def ack(self, seq: int, cseq: int = 0):
        return self._outcome(self.engine.prepare_ack(seq, self.now, cseq=cseq))

    def nak(self, seq: int, delay: float | None = None):
        return self._outcome(self.engine.prepare_nak(seq, delay, self.now))

    def progress(self, seq: int):
        return self._outcome(self.engine.prepare_progress(seq, self.now))

    def term(self, seq: int, reason: str = ""):
        return self._outcome(self.engine.prepare_term(seq, reason, self.now))

    def tick(self, seconds: float = 0.0):
        """Let time pass and run the ack-wait timer."""
        if seconds:
            self.clock.advance(seconds)
        b = self.engine.due_redeliveries(self.now)
        self.take(b)
        return b

    def row(self) -> tuple:
        """(delivered c/s, ack floor c/s, ack pending, redelivered, pending) as in the seed."""
        i = self.engine.info(self.now)
        return (f"{i.delivered.consumer_seq}/{i.delivered.stream_seq}",
                f"{i.ack_floor.consumer_seq}/{i.ack_floor.stream_seq}",
                i.num_ack_pending, i.num_redelivered, i.num_pending)

    def replicas_agree(self) -> bool:
        docs = [e.state.to_doc() for e in (self.engine, *self.followers)]
        return all(d == docs[0] for d in docs) and self.engine.view.same_as(self.engine.state)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make(clock):
    def factory(**kw) -> Consumer:
        return Consumer(clock, **kw)

    return factory
