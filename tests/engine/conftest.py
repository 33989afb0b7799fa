"""A single-replica harness around StreamEngine: prepare on the leader, then apply."""

from __future__ import annotations

import contextlib

import pytest

from rayjet.api import PubAck, StreamConfig
from rayjet.clock import ManualClock
from rayjet.engine import StreamEngine, store_config
from rayjet.errors import APIError
from rayjet.storage import FileStore, MemStore


class Harness:
    def __init__(self, clock: ManualClock, store_kind: str = "memory", directory: str = "",
                 store_opts: dict | None = None, **cfg) -> None:
        cfg.setdefault("name", "S")
        cfg.setdefault("subjects", ["s.>"])
        cfg.setdefault("storage", "memory" if store_kind == "memory" else "file")
        self.clock = clock
        self.directory = directory
        self.store_opts = store_opts or {}
        self.config = StreamConfig(**cfg)
        self.store = self._store(store_kind)
        self.engine = StreamEngine(self.config, self.store, clock)
        self.engine.set_leader(1)

    def _store(self, kind: str):
        sc = store_config(self.config, **self.store_opts)
        if kind == "memory":
            return MemStore(sc, clock=self.clock)
        return FileStore(self.directory, sc, clock=self.clock)

    def pub(self, subject: str, data: bytes = b"", headers=None) -> PubAck:
        """Publish through prepare + apply; duplicate answers come straight from prepare."""
        op = self.engine.prepare_publish(subject, data, headers)
        if isinstance(op, PubAck):
            return op
        res = self.engine.apply(op)
        assert res.ok, res.error
        return res.ack

    def apply(self, op):
        return self.engine.apply(op)

    def seqs(self) -> list[int]:
        out, seq = [], 0
        while True:
            try:
                _m, seq = self.store.load_next_msg(">", True, seq + 1)
            except APIError:
                return out
            out.append(seq)

    def msgs(self, subject: str = ">") -> list:
        out, seq = [], 0
        while True:
            try:
                m, seq = self.store.load_next_msg(subject, True, seq + 1)
            except APIError:
                return out
            out.append(m)

    def state(self):
        return self.store.state()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make(clock):
    def factory(**cfg) -> Harness:
        return Harness(clock, **cfg)

    return factory


@contextlib.contextmanager
def refused(err_code: int, text: str | None = None):
    """Assert the block raises an APIError with this NATS err_code (and text, if given)."""
    with pytest.raises(APIError) as info:
        yield info
    assert info.value.err_code == err_code, repr(info.value)
    if text is not None:
        assert text in info.value.description, info.value.description
