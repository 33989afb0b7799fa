"""Mirrors and sources on real replica actors: copies, headers, failover, store-and-forward."""

from __future__ import annotations

from functools import partial

import pytest
import ray
from ray.exceptions import RayError

from rayjet import StorageType
from rayjet.api import headers as H
from rayjet.api.stream import StreamSource, SubjectTransformConfig
from rayjet.errors import APIError, InvalidConfigError
from tests import waiting
from tests.replicas import kill, stream_replicas

MEM = StorageType.MEMORY


def handles(js, name):
    js._stream(name, refresh=True)
    return stream_replicas(js, name)


def leader(js, name, timeout=30.0):
    def found():
        for rid, h in handles(js, name).items():
            try:
                if ray.get(h.status.remote(), timeout=5)["role"] == "Leader":
                    return rid, h
            except RayError:
                continue  # restarting
        return None

    return waiting.wait_for(found, timeout, f"a leader of {name}", interval=0.2)


def contents(js, name):
    """(seq, subject, data, headers) of every message, read from the stream's leader."""
    _rid, h = leader(js, name)
    got = ray.get(h.read_range.remote(1, 1 << 62, max_msgs=1_000_000), timeout=60)
    return [(s, subj, d, H.decode_headers(hd)) for s, subj, d, hd in
            zip(got["seq"], got["subject"], got["data"], got["hdr"], strict=True)]


# a copy in progress may meet a replica between leaders: its errors count as not yet
wait_for = partial(waiting.wait_for, retry_on=(APIError, RayError), interval=0.2)


def same_as_origin(js, mirror, origin):
    want = [(s, subj, d) for s, subj, d, _h in contents(js, origin)]
    return lambda: [(s, subj, d) for s, subj, d, _h in contents(js, mirror)] == want


@pytest.fixture
def cleanup(js):
    names: list[str] = []
    yield names
    for name in reversed(names):
        try:
            js.delete_stream(name)
        except APIError:
            pass


def test_mirror_copies_with_seqs_preserved_and_refuses_publishes(js, stream_name, cleanup):
    o, m = stream_name, stream_name + "M"
    js.add_stream(name=o, subjects=[f"{o}.>"], storage=MEM)
    cleanup.append(o)
    for i in range(30):
        js.publish(f"{o}.{'a' if i % 3 else 'b'}", b"%d" % i)
    js.delete_msg(o, 5)
    js.add_stream(name=m, mirror=StreamSource(name=o), storage=MEM, mirror_direct=True)
    cleanup.append(m)
    wait_for(same_as_origin(js, m, o), what="mirror == origin")
    info = js.stream_info(m)
    assert (info.state.first_seq, info.state.last_seq, info.state.messages) == (1, 30, 29)
    assert info.mirror is not None and info.mirror.name == o
    wait_for(lambda: js.stream_info(m).mirror.lag == 0, what="lag 0")
    ans = js._stream_call(m, "publish", [(f"{o}.a", b"x", None)])  # straight to the mirror
    assert isinstance(ans[0], APIError) and ans[0].err_code == 10003, ans
    # live: new origin messages keep flowing, seqs still match
    for i in range(5):
        js.publish(f"{o}.b", b"late%d" % i)
    wait_for(same_as_origin(js, m, o), what="mirror follows")
    # mirror_direct: the mirror answers direct gets for the origin
    assert js._mirror_direct_get(o, 31, None, None)["data"] == b"late0"


def test_mirror_filter_and_transform(js, stream_name, cleanup):
    o, m1, m2 = stream_name, stream_name + "F", stream_name + "T"
    js.add_stream(name=o, subjects=[f"{o}.>"], storage=MEM)
    cleanup.append(o)
    for i in range(20):
        js.publish(f"{o}.{'keep' if i % 2 else 'drop'}.{i}", b"%d" % i)
    js.add_stream(name=m1, mirror=StreamSource(name=o, filter_subject=f"{o}.keep.>"), storage=MEM)
    cleanup.append(m1)
    js.add_stream(name=m2, storage=MEM, mirror=StreamSource(name=o, subject_transforms=(
        SubjectTransformConfig(src=f"{o}.keep.*", dest="k.{{wildcard(1)}}"),)))
    cleanup.append(m2)
    want = [(i + 1, f"{o}.keep.{i}") for i in range(20) if i % 2]
    wait_for(lambda: [(s, subj) for s, subj, _d, _h in contents(js, m1)] == want,
             what="filtered mirror")
    want2 = [(i + 1, f"k.{i}") for i in range(20) if i % 2]
    wait_for(lambda: [(s, subj) for s, subj, _d, _h in contents(js, m2)] == want2,
             what="transformed mirror")


def test_sources_aggregate_with_the_source_header(js, stream_name, cleanup):
    a, b, agg = stream_name + "A", stream_name + "B", stream_name + "AGG"
    for n in (a, b):
        js.add_stream(name=n, subjects=[f"{n}.>"], storage=MEM)
        cleanup.append(n)
        for i in range(10):
            js.publish(f"{n}.x", b"%s-%d" % (n.encode(), i))
    js.add_stream(name=agg, subjects=[f"{agg}.>"], storage=MEM, sources=(
        StreamSource(name=a),
        StreamSource(name=b, subject_transforms=(
            SubjectTransformConfig(src=f"{b}.>", dest=f"{agg}.from-b.>"),))))
    cleanup.append(agg)
    js.publish(f"{agg}.own", b"direct")
    wait_for(lambda: len(contents(js, agg)) == 21, what="21 messages")
    msgs = contents(js, agg)
    assert [s for s, *_ in msgs] == list(range(1, 22))
    from_a = [(d, h[H.STREAM_SOURCE]) for _s, subj, d, h in msgs if subj == f"{a}.x"]
    assert [d for d, _ in from_a] == [b"%s-%d" % (a.encode(), i) for i in range(10)]
    ident = from_a[0][1].split(" ")[5]
    assert [h for _, h in from_a] == [f"{a} {i} > > {a}.x {ident}" for i in range(1, 11)]
    from_b = [(subj, h) for _s, subj, _d, h in msgs if subj.startswith(f"{agg}.from-b")]
    assert len(from_b) == 10 and from_b[0][1][H.STREAM_SOURCE].startswith(
        f"{b} 1 {b}.> {agg}.from-b.> {b}.x ")
    info = js.stream_info(agg)
    assert sorted(s.name for s in info.sources) == sorted([a, b])
    wait_for(lambda: all(s.lag == 0 and s.active >= 0 for s in js.stream_info(agg).sources),
             what="sources active, no lag")


def test_cycles_are_refused(js, stream_name, cleanup):
    a, b, c = stream_name + "A", stream_name + "B", stream_name + "C"
    js.add_stream(name=a, subjects=[f"{a}.>"], storage=MEM)
    cleanup.append(a)
    js.add_stream(name=b, storage=MEM, sources=(StreamSource(name=a),))
    cleanup.append(b)
    js.add_stream(name=c, storage=MEM, mirror=StreamSource(name=b))
    cleanup.append(c)
    with pytest.raises(InvalidConfigError) as err:
        js.update_stream(name=a, subjects=[f"{a}.>"], storage=MEM,
                         sources=(StreamSource(name=c),))
    assert err.value.err_code == 10052 and "->" in err.value.description
    with pytest.raises(InvalidConfigError):
        js.add_stream(name=stream_name + "S", storage=MEM,
                      sources=(StreamSource(name=stream_name + "S"),))


def test_killing_leaders_mid_copy_loses_and_duplicates_nothing(js, stream_name, cleanup):
    o, m, s = stream_name, stream_name + "M", stream_name + "S"
    js.add_stream(name=o, subjects=[f"{o}.>"], num_replicas=3, storage=StorageType.FILE)
    cleanup.append(o)
    js.publish_batch([(f"{o}.a", b"%d" % i) for i in range(2000)])
    js.add_stream(name=m, mirror=StreamSource(name=o), num_replicas=3, storage=StorageType.FILE)
    cleanup.append(m)
    js.add_stream(name=s, sources=(StreamSource(name=o),), num_replicas=3,
                  storage=StorageType.FILE)
    cleanup.append(s)
    # the copying side's leaders die mid-copy, then the origin's
    for victim in (m, s, o):
        _rid, h = leader(js, victim)
        kill(h)
    js.publish_batch([(f"{o}.b", b"late%d" % i) for i in range(500)])
    wait_for(same_as_origin(js, m, o), timeout=60, what="mirror == origin")

    def sourced_ok():
        got = contents(js, s)
        want = contents(js, o)
        return [d for _s, _subj, d, _h in got] == [d for _s, _subj, d, _h in want]

    wait_for(sourced_ok, timeout=60, what="source == origin")


def test_origin_unreachable_then_back_and_recreated(js, stream_name, cleanup):
    o, m, s = stream_name, stream_name + "M", stream_name + "S"
    js.add_stream(name=o, subjects=[f"{o}.>"], storage=StorageType.FILE)
    cleanup.append(o)
    js.add_stream(name=m, mirror=StreamSource(name=o), storage=MEM)
    cleanup.append(m)
    js.add_stream(name=s, sources=(StreamSource(name=o),), storage=MEM)
    cleanup.append(s)
    for i in range(10):
        js.publish(f"{o}.a", b"%d" % i)
    wait_for(same_as_origin(js, m, o), what="first copy")
    # the origin's only replica goes away; its disk keeps the messages
    (h,) = handles(js, o).values()
    kill(h, restart=False)
    # the copies fail and retry until the replica is back; the meta leader's reconciliation
    # re-creates it within seconds (adding the same stream again does it at once)
    js._meta_call("add_stream", js._stream(o)[0]["config"])
    for i in range(10, 20):
        js.publish(f"{o}.a", b"%d" % i)
    wait_for(same_as_origin(js, m, o), what="caught up after outage")
    wait_for(lambda: len(contents(js, s)) == 20, what="source caught up")
    # delete and re-create the origin: the source copies the new incarnation from its start
    js.delete_stream(o)
    js.add_stream(name=o, subjects=[f"{o}.>"], storage=StorageType.FILE)
    for i in range(5):
        js.publish(f"{o}.a", b"new%d" % i)
    want = [b"%d" % i for i in range(20)] + [b"new%d" % i for i in range(5)]
    wait_for(lambda: [d for _s, _subj, d, _h in contents(js, s)] == want,
             what="source after re-creation")
