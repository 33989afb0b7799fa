"""Purge, delete and erase as ops; deny_delete / deny_purge; sequence skips."""

from __future__ import annotations

from rayjet.engine import PurgeOp

from .conftest import refused


def _fill(h):
    for i in range(1, 7):
        h.pub("s.a" if i % 2 else "s.b", b"%d" % i)


def test_purge_all(make):
    h = make()
    _fill(h)
    assert h.apply(h.engine.prepare_purge()).value == 6
    st = h.state()
    assert st.msgs == 0 and st.first_seq == 7 and st.last_seq == 6
    assert h.pub("s.a").seq == 7


def test_purge_subject_seq_keep(make):
    h = make()
    _fill(h)
    assert h.apply(h.engine.prepare_purge(subject="s.a", keep=1)).value == 2
    assert h.apply(h.engine.prepare_purge(seq=4)).value == 1  # s.b 2 below seq 4
    assert h.seqs() == [4, 5, 6]


def test_purge_refusals(make):
    h = make(deny_purge=True)
    with refused(10110):
        h.engine.prepare_purge()
    # an op proposed before the config changed is refused the same way on every replica
    assert not h.apply(PurgeOp()).ok
    h2 = make()
    with refused(10110):
        h2.engine.prepare_purge(seq=3, keep=1)


def test_delete_and_erase(make):
    h = make()
    _fill(h)
    assert h.apply(h.engine.prepare_delete(2)).value is True
    assert h.apply(h.engine.prepare_delete(3, erase=True)).value is True
    st = h.state()
    assert st.msgs == 4 and st.deleted == [2, 3]
    # as nats-server answers: a sequence deleted already, and one past the end
    with refused(10043) as err:
        h.engine.prepare_delete(2)
    assert err.value.description == "sequence 2 not found" and err.value.code == 400
    with refused(10057) as err:
        h.engine.prepare_delete(st.last_seq + 1)
    assert err.value.description == "stream store EOF" and err.value.code == 500


def test_deny_delete(make):
    h = make(deny_delete=True)
    h.pub("s.a")
    with refused(10057):
        h.engine.prepare_delete(1)


def test_skip_leaves_a_gap(make):
    h = make()
    h.pub("s.a")
    op = h.engine.prepare_skip(3)
    assert (op.seq, op.num) == (2, 3)
    nxt = h.engine.prepare_publish("s.a", b"")  # pipelined after the skip
    assert nxt.seq == 5
    assert h.apply(op).ok and h.apply(nxt).ok
    h2 = make()
    h2.pub("s.a")
    h2.apply(h2.engine.prepare_skip(3))
    assert h2.pub("s.a").seq == 5
    assert h2.state().last_seq == 5 and h2.seqs() == [1, 5]
