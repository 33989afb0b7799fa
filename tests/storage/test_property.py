"""Random operation sequences leave MemStore, FileStore and a naive model in agreement."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayjet.clock import ManualClock
from rayjet.errors import NotFoundError
from rayjet.storage import FileStore, MemStore, StoreConfig, record_size
from rayjet.subjects import subject_matches

# raise for a long soak: RAYJET_STORE_EXAMPLES=2000 pytest tests/storage/test_property.py
EXAMPLES = int(os.environ.get("RAYJET_STORE_EXAMPLES", "40"))
SUBJECTS = ["a", "b.x", "b.y", "c.d.e"]
FILTERS = [">", "a", "b.*", "b.>", "c.>", "zzz"]


class Model:
    """Dict-of-messages semantics of a NATS stream store, written as plainly as possible."""

    def __init__(self, max_msgs: int, max_per: int) -> None:
        self.msgs: dict[int, tuple[str, bytes, int]] = {}
        self.last = 0
        self.first_empty = 0  # first_seq while empty
        self.last_ts = 0
        self.max_msgs, self.max_per = max_msgs, max_per

    def first(self) -> int:
        return min(self.msgs) if self.msgs else self.first_empty

    def _removed(self) -> None:
        if not self.msgs:
            self.first_empty = self.last + 1

    def store(self, subject, data, ts) -> int:
        self.last += 1
        self.msgs[self.last] = (subject, data, ts)
        self.last_ts = ts
        if self.max_per:
            same = sorted(s for s, m in self.msgs.items() if m[0] == subject)
            for s in same[:max(0, len(same) - self.max_per)]:
                del self.msgs[s]
        if self.max_msgs:
            for s in sorted(self.msgs)[:max(0, len(self.msgs) - self.max_msgs)]:
                del self.msgs[s]
        self._removed()
        return self.last

    def remove(self, seq) -> bool:
        ok = self.msgs.pop(seq, None) is not None
        self._removed()
        return ok

    def skip(self, n) -> None:
        self.last += n
        self._removed()

    def purge_ex(self, subject, seq, keep) -> int:
        if seq == 1:
            return 0
        if subject == ">" and seq > 1:
            return self.compact(seq)
        hits = sorted(s for s, m in self.msgs.items() if subject_matches(m[0], subject))
        if keep:
            hits = hits[:max(0, len(hits) - keep)]
        if seq:
            hits = [s for s in hits if s < seq]
        for s in hits:
            del self.msgs[s]
        self._removed()
        return len(hits)

    def compact(self, seq) -> int:
        if self.first() > seq and self.msgs:
            return 0
        gone = [s for s in self.msgs if s < seq]
        for s in gone:
            del self.msgs[s]
        if seq > self.last:
            self.last = seq - 1
        self._removed()
        if not self.msgs:
            self.first_empty = max(self.first_empty, seq, self.last + 1)
        return len(gone)

    def truncate(self, seq) -> None:
        if seq >= self.last:
            return
        for s in [s for s in self.msgs if s > seq]:
            del self.msgs[s]
        if seq in self.msgs:
            self.last_ts = self.msgs[seq][2]
        self.last = seq
        self._removed()

    def bytes(self) -> int:
        return sum(record_size(len(m[0]), 0, len(m[1])) for m in self.msgs.values())

    def deleted(self) -> list[int]:
        if not self.msgs:
            return []
        return [s for s in range(self.first(), self.last + 1) if s not in self.msgs]


op = st.one_of(
    st.tuples(st.just("store"), st.sampled_from(SUBJECTS), st.binary(max_size=12)),
    st.tuples(st.just("batch"), st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=5)),
    st.tuples(st.just("remove"), st.integers(0, 40)),
    st.tuples(st.just("erase"), st.integers(0, 40)),
    st.tuples(st.just("skip"), st.integers(1, 3)),
    st.tuples(st.just("purge_ex"), st.sampled_from(FILTERS[:5]), st.integers(0, 30),
              st.integers(0, 3)),
    st.tuples(st.just("compact"), st.integers(1, 45)),
    st.tuples(st.just("truncate"), st.integers(1, 40)),
    st.tuples(st.just("reopen"), st.booleans()),
)


def check(store, model: Model) -> None:
    s = store.state()
    first = model.first() if (model.msgs or model.last) else 0
    assert (s.msgs, s.first_seq, s.last_seq) == (len(model.msgs), first, model.last)
    assert s.bytes == model.bytes()
    assert s.deleted == model.deleted()
    if model.msgs:
        assert s.last_ts == model.last_ts
    for seq, (subject, data, ts) in model.msgs.items():
        m = store.load_msg(seq)
        assert (m.subject, m.data, m.ts) == (subject, data, ts)
    for f in FILTERS:
        hits = sorted(q for q, m in model.msgs.items() if subject_matches(m[0], f))
        totals: dict[str, int] = {}
        for q in hits:
            totals[model.msgs[q][0]] = totals.get(model.msgs[q][0], 0) + 1
        assert store.subjects_totals(f) == totals
        for start in (0, first + 1, model.last):
            want = [q for q in hits if q >= start]
            assert store.num_pending(start, f)[0] == len(want)
            try:
                got = store.load_next_msg(f, True, start)[1]
            except NotFoundError:
                got = None
            assert got == (want[0] if want else None)
            before = [q for q in hits if q <= start]
            try:
                got = store.load_prev_msg(start, f)[1]
            except NotFoundError:
                got = None
            assert got == (before[-1] if before else None)
        try:
            got = store.load_last_msg(f).seq
        except NotFoundError:
            got = None
        assert got == (hits[-1] if hits else None)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(op, max_size=30), max_msgs=st.sampled_from([0, 0, 5]),
       max_per=st.sampled_from([0, 0, 2]))
def test_stores_agree_with_model(ops, max_msgs, max_per):
    clock = ManualClock()
    tmp = tempfile.mkdtemp()
    limits = dict(max_msgs=max_msgs or -1, max_msgs_per_subject=max_per or -1)
    file_cfg = StoreConfig(block_size=1024, **limits)
    stores = [MemStore(StoreConfig(storage="memory", **limits), clock=clock),
              FileStore(tmp, file_cfg, clock=clock)]
    model = Model(max_msgs, max_per)
    try:
        for o in ops:
            clock.advance(0.001)
            kind = o[0]
            if kind == "store":
                seq = model.store(o[1], o[2], clock.now_ns())
                assert all(s.store_msg(o[1], b"", o[2])[0] == seq for s in stores)
            elif kind == "batch":
                seqs = [model.store(subj, b"b", clock.now_ns()) for subj in o[1]]
                for s in stores:
                    assert [q for q, _ in s.store_batch([(x, b"", b"b") for x in o[1]])] == seqs
            elif kind in ("remove", "erase"):
                want = model.remove(o[1])
                for s in stores:
                    assert getattr(s, f"{kind}_msg")(o[1]) == want
            elif kind == "skip":
                model.skip(o[1])
                for s in stores:
                    s.skip_msgs(0, o[1])
            elif kind == "purge_ex":
                want = model.purge_ex(*o[1:])
                assert all(s.purge_ex(*o[1:]) == want for s in stores)
            elif kind == "compact":
                want = model.compact(o[1])
                assert all(s.compact(o[1]) == want for s in stores)
            elif kind == "truncate":
                model.truncate(o[1])
                for s in stores:
                    s.truncate(o[1])
            elif kind == "reopen":
                f = stores[1]
                if o[1]:
                    f.close()
                else:  # a crash: no index file, blocks replayed
                    for blk in f._blocks.values():
                        blk.close()
                    f._closed = True
                stores[1] = FileStore(tmp, file_cfg, clock=clock)
            for s in stores:
                check(s, model)
    finally:
        for s in stores:
            if not s._closed:
                s.close()
        shutil.rmtree(tmp, ignore_errors=True)
