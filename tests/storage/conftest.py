"""Store factories: every contract test runs on MemStore and on FileStore (plain,
compressed, encrypted), reopening FileStores where a test asks to."""

from __future__ import annotations

import itertools

import pytest

from rayjet.clock import ManualClock
from rayjet.storage import FileStore, MemStore, StoreConfig

KINDS = ["mem", "file", "file-s2", "file-enc"]
KEY = b"correct horse battery staple"


class Factory:
    def __init__(self, kind: str, tmp_path, clock: ManualClock) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.clock = clock
        self._n = itertools.count()
        self.open: list = []

    @property
    def is_file(self) -> bool:
        return self.kind != "mem"

    def config(self, **kw) -> StoreConfig:
        if self.kind == "mem":
            return StoreConfig(storage="memory", **kw)
        if self.kind == "file-s2":
            kw.setdefault("compression", "s2")
        if self.kind == "file-enc":
            kw.setdefault("encryption_key", KEY)
        kw.setdefault("block_size", 4096)
        return StoreConfig(**kw)

    def __call__(self, **kw):
        cfg = self.config(**kw)
        if self.kind == "mem":
            store = MemStore(cfg, clock=self.clock)
        else:
            store = FileStore(str(self.tmp_path / f"s{next(self._n)}"), cfg, clock=self.clock)
        self.open.append(store)
        return store

    def reopen(self, store, *, clean: bool = True):
        """The same store after close (clean) or after a crash (no index file)."""
        if self.kind == "mem":
            return store
        if clean:
            store.close()
        else:
            for blk in store._blocks.values():
                blk.close()
            store._closed = True
        fresh = FileStore(store.directory, store.config, clock=self.clock)
        self.open.append(fresh)
        return fresh


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=KINDS)
def make(request, tmp_path, clock):
    factory = Factory(request.param, tmp_path, clock)
    yield factory
    for store in factory.open:
        if not store._closed:
            store.close()
