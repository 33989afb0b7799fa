"""A batch published as Arrow columns is stored byte for byte as the list form stores it,
and every row gets the answer the list form gives it."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayjet.api import PubAck, StreamConfig
from rayjet.api.enums import DiscardPolicy, RetentionPolicy
from rayjet.api.stream import RePublish
from rayjet.clock import ManualClock
from rayjet.engine import MsgRunOp, StreamEngine, decode_op, encode_op, store_config
from rayjet.engine.columnar import message_columns
from rayjet.errors import APIError, BadRequestError
from rayjet.storage import FileStore, MemStore

SUBJECTS = ["s.a", "s.b", "s.c.d", "s.é", "x.out", "s.*"]
CONFIGS = {
    "plain": {},
    "dedup": {"duplicate_window": 60.0},
    "small": {"max_msg_size": 40, "duplicate_window": 60.0},
    "discard_new": {"max_msgs": 12, "discard": DiscardPolicy.NEW},
    "discard_new_bytes": {"max_bytes": 900, "discard": DiscardPolicy.NEW},
    "per_subject": {"max_msgs_per_subject": 2, "discard": DiscardPolicy.NEW,
                    "discard_new_per_subject": True},
    "limits_old": {"max_msgs": 7, "max_msgs_per_subject": 3},
    "counter": {"allow_msg_counter": True},
    "republish": {"republish": RePublish(src="s.>", dest="rp.>")},
    "interest": {"retention": RetentionPolicy.INTEREST},
    "ttl": {"allow_msg_ttl": True, "duplicate_window": 60.0},
}

row = st.fixed_dictionaries({
    "subject": st.sampled_from(SUBJECTS),
    "data": st.one_of(st.none(), st.binary(max_size=48)),
    "msg_id": st.one_of(st.none(), st.sampled_from(["", "m1", "m2", "m3", "m4", "ü"])),
    "headers": st.one_of(st.none(), st.none(), st.just({"k": "v"}),
                         st.just({"Nats-TTL": "5s"}), st.just({"Nats-Expected-Last-Sequence": "2"}),
                         st.just({"Nats-Incr": "+1"})),
})


def _engine(cfg: StreamConfig, kind: str, directory: str, clock: ManualClock) -> StreamEngine:
    if kind == "memory":
        store = MemStore(store_config(cfg), clock=clock)
    else:
        store = FileStore(directory, store_config(cfg), clock=clock)
    return StreamEngine(cfg, store, clock)


def _list_form(rows: list[dict]) -> list[tuple]:
    out = []
    for r in rows:
        headers = dict(r["headers"] or {})
        if r["msg_id"]:
            headers["Nats-Msg-Id"] = r["msg_id"]
        out.append((r["subject"], r["data"] or b"", headers or None))
    return out


def _table(rows: list[dict]) -> pa.Table:
    return pa.table({
        "subject": pa.array([r["subject"] for r in rows], pa.string()),
        "data": pa.array([r["data"] for r in rows], pa.binary()),
        "msg_id": pa.array([r["msg_id"] for r in rows], pa.string()),
        "headers": pa.array([r["headers"] for r in rows], pa.map_(pa.string(), pa.string())),
    })


def _publish_list(engine: StreamEngine, msgs: list[tuple]) -> list:
    """The actor's list-form publish: prepare each message, propose the ops together."""
    answers, ops, slots = [None] * len(msgs), [], []
    for i, (subject, data, headers) in enumerate(msgs):
        try:
            op = engine.prepare_publish(subject, data, headers)
        except APIError as err:
            answers[i] = err
            continue
        if isinstance(op, PubAck):
            answers[i] = op
        else:
            ops.append(op)
            slots.append(i)
    for i, r in zip(slots, engine.apply_batch(ops), strict=True):
        answers[i] = r.answer
    return answers


def _publish_columns(engine: StreamEngine, follower: StreamEngine, table) -> list:
    plan = engine.prepare_columns(table)
    wire = [decode_op(encode_op(op)) for op in plan.ops]  # what followers receive
    answer = plan.answer(engine.apply_batch(plan.ops))
    follower.apply_batch(wire)
    out: list = [None] * answer["count"]
    for rows, first in answer["runs"]:
        for k, r in enumerate(memoryview(rows).cast("I")):
            out[r] = first + k
    for r, a in answer["rows"].items():
        out[r] = a
    if answer["refused"] is not None:
        out = [answer["refused"]] * answer["count"]
    return out


def _key(answer):
    if isinstance(answer, APIError):
        return ("err", answer.err_code)
    if isinstance(answer, PubAck):
        return ("ack", answer.seq, answer.duplicate, answer.val)
    return ("seq", answer)


def _records(engine: StreamEngine) -> list:
    st_ = engine.store.fast_state()
    out = []
    for seq in range(st_.first_seq, st_.last_seq + 1):
        try:
            m = engine.store.load_msg(seq)
        except APIError:
            continue
        out.append((m.seq, m.subject, m.hdr, m.data, m.ts))
    return out


def _block_bytes(directory: str) -> list[bytes]:
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "**", "*.blk"), recursive=True)):
        with open(path, "rb") as f:
            out.append(f.read())
    return out


@pytest.mark.parametrize("kind", ["memory", "file"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(batches=st.lists(st.lists(row, min_size=0, max_size=14), min_size=1, max_size=3))
def test_columns_store_and_answer_as_the_list_form(tmp_path_factory, kind, config, batches):
    base = tmp_path_factory.mktemp("col")
    cfg = StreamConfig(name="S", subjects=["s.>"], storage="memory" if kind == "memory" else "file",
                       **CONFIGS[config])
    clock = ManualClock()
    listed = _engine(cfg, kind, str(base / "list"), clock)
    columns = _engine(cfg, kind, str(base / "cols"), clock)
    follower = _engine(cfg, kind, str(base / "follow"), clock)
    listed.set_leader(1)
    columns.set_leader(1)
    if config == "interest":
        for e in (listed, columns, follower):
            e.register_consumer("C", ["s.a", "s.b"])
    for rows in batches:
        want = _publish_list(listed, _list_form(rows))
        got = _publish_columns(columns, follower, _table(rows))
        assert [_key(a) for a in got] == [_key(a) for a in want]
        clock.advance(0.5)
    assert _records(columns) == _records(listed) == _records(follower)
    assert columns.store.fast_state() == listed.store.fast_state()
    assert columns.last_seq == listed.last_seq == follower.last_seq
    if kind == "file":
        for e in (listed, columns, follower):
            e.store.flush()
        assert _block_bytes(str(base / "cols")) == _block_bytes(str(base / "list"))
        assert _block_bytes(str(base / "follow")) == _block_bytes(str(base / "list"))


def test_a_plain_batch_is_one_run_op_whatever_its_size():
    clock = ManualClock()
    cfg = StreamConfig(name="S", subjects=["s.>"], storage="memory", duplicate_window=60.0)
    engine = _engine(cfg, "memory", "", clock)
    engine.set_leader(1)
    n = 5000
    table = pa.table({"subject": [f"s.{i % 7}" for i in range(n)],
                      "data": [i.to_bytes(4, "little") for i in range(n)],
                      "msg_id": [f"id-{i}" for i in range(n)]})
    plan = engine.prepare_columns(table)
    assert [type(op) for op in plan.ops] == [MsgRunOp]
    (op,) = plan.ops
    assert (op.seq, op.count, sorted(op.names)) == (1, n, sorted(f"s.{i}" for i in range(7)))
    engine.apply_batch(plan.ops)
    assert engine.store.load_msg(4321).data == (4320).to_bytes(4, "little")
    # the same ids again are duplicates of what is stored, answered without a proposal
    again = engine.prepare_columns(table)
    assert again.ops == [] and len(again.answers) == n
    assert again.answers[17] == PubAck(stream="S", seq=18, duplicate=True)


def test_a_header_row_splits_the_run_and_keeps_the_order():
    clock = ManualClock()
    cfg = StreamConfig(name="S", subjects=["s.>"], storage="memory", allow_msg_ttl=True)
    engine = _engine(cfg, "memory", "", clock)
    engine.set_leader(1)
    table = pa.table({"subject": ["s.a", "s.b", "s.c", "s.d"], "data": [b"1", b"2", b"3", b"4"],
                      "headers": pa.array([None, None, {"Nats-TTL": "9"}, None],
                                          pa.map_(pa.string(), pa.string()))})
    plan = engine.prepare_columns(table)
    assert [type(op).__name__ for op in plan.ops] == ["MsgRunOp", "MsgOp", "MsgRunOp"]
    answer = plan.answer(engine.apply_batch(plan.ops))
    assert answer["rows"] == {2: 3}
    assert [m[1] for m in _records(engine)] == ["s.a", "s.b", "s.c", "s.d"]


@pytest.mark.parametrize("columns,problem", [
    ({"subject": ["s.a"]}, "needs the columns"),
    ({"subject": ["s.a"], "data": [b"x"], "payload": [b"y"]}, "unexpected columns"),
    ({"subject": [1], "data": [b"x"]}, "string column"),
    ({"subject": ["s.a"], "data": [1.5]}, "binary or string"),
    ({"subject": ["s.a"], "data": [b"x"], "headers": [3]}, "headers"),
])
def test_a_malformed_batch_is_a_bad_request(columns, problem):
    with pytest.raises(BadRequestError, match=problem):
        message_columns(pa.table(columns))


def test_not_a_table_is_a_bad_request():
    with pytest.raises(BadRequestError, match="pyarrow Table or RecordBatch"):
        message_columns([("s.a", b"x")])


def test_a_sealed_stream_refuses_every_row_alike():
    clock = ManualClock()
    cfg = StreamConfig(name="S", subjects=["s.>"], storage="memory", sealed=True)
    engine = _engine(cfg, "memory", "", clock)
    engine.set_leader(1)
    plan = engine.prepare_columns(pa.table({"subject": ["s.a", "s.b"], "data": [b"", b""]}))
    assert plan.ops == [] and plan.refused is not None and plan.refused.err_code == 10109


def _ids_table(start: int, count: int) -> pa.Table:
    return pa.table({"subject": [f"s.{i % 5}" for i in range(start, start + count)],
                     "data": [b"%d" % i for i in range(start, start + count)],
                     "msg_id": [f"r{i}" for i in range(start, start + count)]})


def _wire(plan) -> list:
    return [decode_op(encode_op(op)) for op in plan.ops]


def test_a_retry_on_the_next_leader_stores_each_row_once():
    """The old leader's first run commits, its second is lost with it; the client sends the
    whole table again to the new leader, which has applied the log."""
    clock = ManualClock()
    cfg = StreamConfig(name="S", subjects=["s.>"], storage="memory", duplicate_window=60.0)
    old, new = _engine(cfg, "memory", "", clock), _engine(cfg, "memory", "", clock)
    old.set_leader(1)
    committed = _wire(old.prepare_columns(_ids_table(0, 100)))
    old.prepare_columns(_ids_table(100, 100))  # proposed, never committed
    new.apply_batch(committed)
    new.set_leader(2)
    plan = new.prepare_columns(_ids_table(0, 200))
    answer = plan.answer(new.apply_batch(_wire(plan)))
    assert [answer["rows"][r] for r in (0, 99)] == [
        PubAck(stream="S", seq=1, duplicate=True), PubAck(stream="S", seq=100, duplicate=True)]
    assert len(answer["rows"]) == 100 and [first for _, first in answer["runs"]] == [101]
    records = _records(new)
    assert [r[3] for r in records] == [b"%d" % i for i in range(200)]
    assert new.store.fast_state().msgs == 200


def test_a_stale_leaders_run_is_refused_on_every_replica():
    """Two replicas believe they lead: the run the log orders second was projected on a state
    that is gone, so every replica skips it and its rows are answered with the error."""
    clock = ManualClock()
    cfg = StreamConfig(name="S", subjects=["s.>"], storage="memory", duplicate_window=60.0)
    old, new, third = (_engine(cfg, "memory", "", clock) for _ in range(3))
    old.set_leader(1)
    new.set_leader(2)
    stale = old.prepare_columns(_ids_table(0, 50))
    current = new.prepare_columns(_ids_table(50, 50))
    log = _wire(current) + _wire(stale)
    results = third.apply_batch(log)
    assert [r.ok for r in results] == [True, False]
    answer = stale.answer(old.apply_batch(_wire(current) + stale.ops)[1:])
    assert answer["runs"] == [] and len(answer["rows"]) == 50
    assert all(isinstance(a, APIError) for a in answer["rows"].values())
    assert [r[3] for r in _records(third)] == [b"%d" % i for i in range(50, 100)]
    # the client sends the refused rows again, to the current leader: stored after the others
    new.apply_batch(_wire(current))
    again = new.prepare_columns(_ids_table(0, 50))
    third.apply_batch(_wire(again))
    assert [r[3] for r in _records(third)] == \
        [b"%d" % i for i in range(50, 100)] + [b"%d" % i for i in range(50)]


def test_header_blocks_as_binary_are_checked_row_by_row():
    clock = ManualClock()
    cfg = StreamConfig(name="S", subjects=["s.>"], storage="memory", duplicate_window=60.0)
    engine = _engine(cfg, "memory", "", clock)
    engine.set_leader(1)
    table = pa.table({"subject": ["s.a", "s.b", "s.c", "s.d"], "data": [b"1", b"2", b"3", b"4"],
                      "headers": pa.array([None, b"garbage", b"NATS/1.0\r\nk: v\r\n\r\n",
                                           b"no block"], pa.binary()),
                      "msg_id": [None, None, "m3", "m4"]})
    plan = engine.prepare_columns(table)
    answer = plan.answer(engine.apply_batch(plan.ops))
    assert sorted(answer["rows"]) == [1, 2, 3]
    assert [type(answer["rows"][r]).__name__ for r in (1, 3)] == ["BadRequestError"] * 2
    assert answer["rows"][2] == 2
    assert [(m[1], m[2]) for m in _records(engine)] == [
        ("s.a", b""), ("s.c", b"NATS/1.0\r\nk: v\r\nNats-Msg-Id: m3\r\n\r\n")]
    # nothing projected for the refused rows: the next publish continues at seq 3
    plan = engine.prepare_columns(pa.table({"subject": ["s.e"], "data": [b"5"]}))
    assert [op.seq for op in plan.ops] == [3]
