import pytest

from rayjet.api.consumer import ConsumerConfig
from rayjet.api.enums import AckPolicy, RetentionPolicy
from rayjet.api.stream import StreamConfig
from rayjet.errors import (
    ClusterNoPeersError,
    ConsumerNotFoundError,
    InvalidConfigError,
    MaximumConsumersError,
    StreamNameInUseError,
    StreamNotFoundError,
    SubjectsOverlapError,
)
from rayjet.meta import (
    Catalogue,
    MetaOp,
    decode_meta_op,
    encode_meta_op,
    next_replica_after,
    replica_number,
)
from rayjet.meta.catalogue import DELETE_STREAM, RESERVE_REPLICAS


def apply(cat, op, index=None):
    index = index or cat.applied_index + 1
    return cat.apply(index, decode_meta_op(encode_meta_op(op)))  # through the wire, as raft does


def add(cat, name, subjects, replicas=1, **kw):
    cfg = StreamConfig(name=name, subjects=subjects, num_replicas=replicas, **kw)
    return apply(cat, cat.prepare_add_stream(cfg, peers=tuple((f"r{i}", f"n{i}") for i in range(replicas)),
                                             now_ns=7))


def test_add_stream_assigns_a_group_per_incarnation():
    cat = Catalogue()
    sa = add(cat, "ORDERS", ["ORDERS.*"], replicas=3)
    assert sa.peers == (("r0", "n0"), ("r1", "n1"), ("r2", "n2")) and sa.created_ns == 7
    assert sa.config.duplicate_window == 120.0  # defaults applied before replication
    apply(cat, cat.prepare_delete_stream("ORDERS"))
    again = add(cat, "ORDERS", ["ORDERS.*"])
    assert again.group != sa.group  # never reuse the old replicas' state


def test_identical_add_is_idempotent_different_is_10058():
    cat = Catalogue()
    sa = add(cat, "ORDERS", ["ORDERS.*"])
    same = cat.prepare_add_stream(StreamConfig(name="ORDERS", subjects=["ORDERS.*"]),
                                  peers=(("r0", "n0"),), now_ns=9)
    assert same is sa
    with pytest.raises(StreamNameInUseError) as info:
        cat.prepare_add_stream(StreamConfig(name="ORDERS", subjects=["ORDERS.>"]),
                               peers=(("r0", "n0"),), now_ns=9)
    assert info.value.err_code == 10058


def test_subjects_overlap_between_streams_is_10065():
    cat = Catalogue()
    add(cat, "ORDERS", ["ORDERS.*"])
    with pytest.raises(SubjectsOverlapError) as info:
        cat.prepare_add_stream(StreamConfig(name="ALL", subjects=["ORDERS.>"]), peers=(("r0", "n0"),),
                               now_ns=1)
    assert info.value.err_code == 10065
    assert "ORDERS" in info.value.description
    # an update may keep its own subjects
    op = cat.prepare_update_stream(StreamConfig(name="ORDERS", subjects=["ORDERS.*"],
                                                description="orders"))
    assert apply(cat, op).config.description == "orders"
    assert cat.stream_for_subject("ORDERS.new").name == "ORDERS"
    assert cat.stream_for_subject("OTHER.new") is None


def test_invalid_config_and_missing_stream():
    cat = Catalogue()
    with pytest.raises(InvalidConfigError):
        cat.prepare_add_stream(StreamConfig(name="a.b"), peers=(("r0", "n0"),), now_ns=1)
    with pytest.raises(StreamNotFoundError) as info:
        cat.prepare_delete_stream("NOPE")
    assert info.value.err_code == 10059
    with pytest.raises(ClusterNoPeersError):
        cat.prepare_add_stream(StreamConfig(name="R3", num_replicas=3), peers=(("r0", "n0"),), now_ns=1)


def test_update_can_change_replicas_and_peers():
    cat = Catalogue()
    add(cat, "S", ["s.>"])
    op = cat.prepare_update_stream(StreamConfig(name="S", subjects=["s.>"], num_replicas=3),
                                   peers=(("r0", "n0"), ("r1", "n1"), ("r2", "n2")))
    sa = apply(cat, op)
    assert sa.config.num_replicas == 3 and len(sa.peers) == 3
    assert sa.bootstrap == ("r0",)  # the first membership never changes


def test_consumers_add_update_delete_and_limits():
    cat = Catalogue()
    add(cat, "S", ["s.>"], max_consumers=1)
    ca = apply(cat, cat.prepare_add_consumer(
        "S", ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT), now_ns=3))
    assert ca.group.startswith("S-D-") and ca.peers == (("r0", "n0"),)
    assert cat.consumer("S", "D").config.ack_wait == 30.0
    with pytest.raises(MaximumConsumersError) as info:
        cat.prepare_add_consumer("S", ConsumerConfig(durable_name="E"), now_ns=4)
    assert info.value.err_code == 10026
    # updating keeps the group (the consumer's state lives there)
    up = apply(cat, cat.prepare_add_consumer(
        "S", ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=5),
        now_ns=5))
    assert up.group == ca.group and up.config.ack_wait == 5.0 and up.created_ns == 3
    apply(cat, cat.prepare_delete_consumer("S", "D"))
    with pytest.raises(ConsumerNotFoundError) as info:
        cat.consumer("S", "D")
    assert info.value.err_code == 10014


def test_work_queue_rules_see_existing_consumers():
    cat = Catalogue()
    add(cat, "Q", ["q.>"], retention=RetentionPolicy.WORK_QUEUE)
    apply(cat, cat.prepare_add_consumer(
        "Q", ConsumerConfig(durable_name="A", ack_policy=AckPolicy.EXPLICIT), now_ns=1))
    with pytest.raises(Exception) as info:
        cat.prepare_add_consumer(
            "Q", ConsumerConfig(durable_name="B", ack_policy=AckPolicy.EXPLICIT), now_ns=1)
    assert info.value.err_code == 10099


def test_concurrent_adds_resolve_the_same_way_everywhere():
    a, b = Catalogue(), Catalogue()
    add(a, "BASE", ["base"])
    add(b, "BASE", ["base"])
    op1 = a.prepare_add_stream(StreamConfig(name="X", subjects=["x.1"]), peers=(("r0", "n0"),), now_ns=1)
    op2 = a.prepare_add_stream(StreamConfig(name="X", subjects=["x.2"]), peers=(("r0", "n0"),), now_ns=2)
    for cat in (a, b):
        apply(cat, op1)
        apply(cat, op2)  # stale: the name was taken by op1 in between
    assert a.stream("X").config.subjects == b.stream("X").config.subjects == ("x.1",)


def test_snapshot_round_trip():
    cat = Catalogue()
    add(cat, "S", ["s.>"], replicas=3)
    apply(cat, cat.prepare_add_consumer("S", ConsumerConfig(durable_name="D"), now_ns=1))
    other = Catalogue()
    other.restore(cat.snapshot())
    assert other.streams.keys() == cat.streams.keys()
    assert other.stream("S").config == cat.stream("S").config
    assert other.consumer("S", "D") == cat.consumer("S", "D")
    assert other.applied_index == cat.applied_index


def _scale(cat, name, replicas, nodes="n"):
    """Grow or shrink as the meta leader does: keep the first replicas, reserve fresh ids."""
    sa = cat.stream(name)
    kept = list(sa.peers[:replicas])
    grow = replicas - len(kept)
    if grow > 0:
        ids = apply(cat, cat.prepare_reserve_replicas(name, grow))
        kept += [(rid, f"{nodes}{rid}") for rid in ids]
    cfg = StreamConfig(**{**sa.config.__dict__, "num_replicas": replicas})
    return apply(cat, cat.prepare_update_stream(cfg, peers=tuple(kept)))


def test_replica_ids_are_never_reused_within_a_group():
    cat = Catalogue()
    sa = add(cat, "S", ["s.>"], replicas=3)
    assert sa.next_replica == 3
    seen = {rid for rid, _ in sa.peers}
    for replicas in (1, 3, 1, 5, 3):
        sa = _scale(cat, "S", replicas)
        new = {rid for rid, _ in sa.peers} - seen
        assert not new & seen
        seen |= new
    assert [rid for rid, _ in _scale(cat, "S", 1).peers] == ["r0"]
    assert [rid for rid, _ in _scale(cat, "S", 3).peers] == ["r0", "r9", "r10"]
    assert cat.stream("S").bootstrap == ("r0", "r1", "r2")


def test_a_reservation_hands_out_ids_even_when_never_used():
    cat = Catalogue()
    add(cat, "S", ["s.>"], replicas=1)
    assert apply(cat, cat.prepare_reserve_replicas("S", 2)) == ("r1", "r2")
    # the leader died before growing: the next change still gets fresh ids
    assert apply(cat, cat.prepare_reserve_replicas("S", 1)) == ("r3",)
    assert cat.stream("S").peers == (("r0", "n0"),)
    with pytest.raises(StreamNotFoundError):
        cat.prepare_reserve_replicas("NOPE", 1)
    with pytest.raises(Exception) as info:
        cat.prepare_reserve_replicas("S", 0)
    assert info.value.err_code == 10003


def test_replicated_reservations_agree_on_every_member():
    a, b = Catalogue(), Catalogue()
    for cat in (a, b):
        add(cat, "S", ["s.>"], replicas=1)
    ops = [a.prepare_reserve_replicas("S", 2), a.prepare_reserve_replicas("S", 2)]
    got = [[apply(cat, op) for op in ops] for cat in (a, b)]
    assert got[0] == got[1] == [("r1", "r2"), ("r3", "r4")]  # concurrent asks never collide


def test_ops_without_a_count_encode_as_before():
    import msgpack

    op = MetaOp(DELETE_STREAM, "S")
    assert len(msgpack.unpackb(encode_meta_op(op))) == 7
    old = msgpack.packb([1, DELETE_STREAM, "S", None, "", [], 0])
    assert decode_meta_op(old) == op
    reserve = MetaOp(RESERVE_REPLICAS, "S", count=2)
    assert decode_meta_op(encode_meta_op(reserve)) == reserve


def test_snapshot_keeps_the_counter_and_older_snapshots_derive_it():
    import msgpack

    cat = Catalogue()
    add(cat, "S", ["s.>"], replicas=3)
    _scale(cat, "S", 1)
    other = Catalogue()
    other.restore(cat.snapshot())
    assert other.stream("S").next_replica == 3
    assert other.stream("S").fresh_ids(1) == ("r3",)
    # a snapshot from before the counter: rows of six fields
    version, applied, rows, _limits = msgpack.unpackb(cat.snapshot(), raw=False)
    old = msgpack.packb([version, applied, [row[:6] for row in rows]], use_bin_type=True)
    legacy = Catalogue()
    legacy.restore(old)
    sa = legacy.stream("S")
    assert sa.peers == (("r0", "n0"),) and sa.bootstrap == ("r0", "r1", "r2")
    assert sa.next_replica == 3  # derived from every id it still knows
    assert sa.fresh_ids(2) == ("r3", "r4")


def test_replica_numbers():
    assert replica_number("r12") == 12
    assert replica_number("x1") is None and replica_number("r") is None
    assert next_replica_after(["r0", "r7", "odd"]) == 8
    assert next_replica_after([]) == 0


def test_changes_since_names_what_changed_and_what_was_deleted():
    cat = Catalogue()
    add(cat, "A", ["a.*"])
    add(cat, "B", ["b.*"])
    mark = cat.applied_index
    assert cat.changes_since(mark) == ([], [])
    add(cat, "C", ["c.*"])
    apply(cat, cat.prepare_update_stream(StreamConfig(name="A", subjects=["a.*"],
                                                      description="changed"),
                                         peers=(("r0", "n0"),)))
    apply(cat, cat.prepare_delete_stream("B"))
    changed, removed = cat.changes_since(mark)
    assert sorted(sa.name for sa in changed) == ["A", "C"] and removed == ["B"]
    assert [sa.config.description for sa in changed if sa.name == "A"] == ["changed"]
    # a stream deleted and made again since counts as changed, not removed
    apply(cat, cat.prepare_delete_stream("C"))
    add(cat, "C", ["c.>"])
    changed, removed = cat.changes_since(mark)
    assert sorted(sa.name for sa in changed) == ["A", "C"] and removed == ["B"]
    assert cat.changes_since(cat.applied_index) == ([], [])


def test_changes_since_before_a_snapshot_or_forgotten_deletions_is_unknown(monkeypatch):
    from rayjet.meta import catalogue as module

    cat = Catalogue()
    add(cat, "A", ["a.*"])
    restored = Catalogue()
    restored.restore(cat.snapshot())
    assert restored.changes_since(0) is None  # the snapshot does not say when A came
    assert restored.changes_since(restored.applied_index) == ([], [])
    monkeypatch.setattr(module, "TOMBSTONES", 2)
    mark = cat.applied_index
    for i in range(4):  # more deletions than it remembers
        add(cat, f"T{i}", [f"t{i}.*"])
        apply(cat, cat.prepare_delete_stream(f"T{i}"))
    assert cat.changes_since(mark) is None
    assert len(cat.changed) <= len(cat.streams) + 2
    recent = cat.applied_index - 1  # the last deletion is still known
    assert cat.changes_since(recent) == ([], ["T3"])
