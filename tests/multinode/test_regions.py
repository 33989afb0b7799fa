"""Regions as groups of labelled Ray nodes: store-and-forward copies across a node outage,
the seed 004 virtual global stream with whole regions going down, and a stretch stream."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest

from rayjet import StreamConfig
from rayjet.api.stream import Placement, StreamSource
from rayjet.errors import APIError
from rayjet.placement import CLUSTER_LABEL
from tests.multinode.conftest import REGION_NODES, wait_for
from tests.multinode.support import (
    Publisher,
    all_placed,
    assert_exactly_once,
    contents,
    replica_labels,
    statuses,
)

_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "virtual_global_stream.py"


def load_example():
    spec = importlib.util.spec_from_file_location("virtual_global_stream", _EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def datas(js, name):
    return [d for _seq, _subj, d, _h in contents(js, name)]


def test_mirror_and_source_catch_up_after_the_origin_node_is_replaced(mn, js, stream_name):
    o, m, s = stream_name + "O", stream_name + "M", stream_name + "S"
    js.add_stream(StreamConfig(name=o, subjects=[f"{o}.>"], placement=Placement(cluster="central")))
    js.add_stream(StreamConfig(name=m, mirror=StreamSource(name=o),
                               placement=Placement(cluster="west")))
    js.add_stream(StreamConfig(name=s, subjects=[f"{s}.>"], sources=(StreamSource(name=o),),
                               placement=Placement(cluster="east")))
    for i in range(20):
        js.publish(f"{o}.a", b"o%d" % i)
    wait_for(lambda: len(datas(js, m)) == 20, 30, "the mirror's first copy")

    mn.remove("c1")  # the origin's only node
    with pytest.raises(APIError):
        js.publish(f"{o}.a", b"lost", timeout=2)  # refused or unknown: nothing acked
    for i in range(10):  # the sourcing stream keeps taking its own writes
        js.publish(f"{s}.d", b"d%d" % i)
    mn.add("c1")  # a new node with the same labels: the origin's replica restarts there

    for i in range(20, 40):  # a msg id makes the retry safe while the replica restarts
        js.publish(f"{o}.a", b"o%d" % i, headers={"Nats-Msg-Id": f"o{i}"}, timeout=30)
    origin = contents(js, o)
    assert [(seq, d) for seq, _subj, d, _h in origin][-1][0] == len(origin)
    want = [(seq, subj, d) for seq, subj, d, _h in origin]
    wait_for(lambda: [(q, subj, d) for q, subj, d, _h in contents(js, m)] == want, 60,
             "the mirror equal to the origin, sequence numbers included")
    expected = Counter(d for _q, _subj, d, _h in origin) + Counter(b"d%d" % i for i in range(10))
    wait_for(lambda: Counter(datas(js, s)) == expected, 60,
             "the sourcing stream with every origin message once and its own writes")
    assert {lab[CLUSTER_LABEL] for lab in replica_labels(js, o).values()} == {"central"}


def test_virtual_global_stream_across_region_nodes(mn, js):
    ex = load_example()
    prefix = "vgs"
    ex.define_streams(js, prefix=prefix)
    # every write and read stream sits on a node of its region
    for region in ex.REGIONS:
        for kind in ("write", "read"):
            placed = wait_for(lambda r=region, k=kind: all_placed(js, f"{prefix}-{k}-{r}", 1),
                              30, f"{prefix}-{kind}-{region}")
            assert [lab[CLUSTER_LABEL] for lab in placed.values()] == [region]
    apps = {r: ex.connect_region(js, r, prefix) for r in ex.REGIONS}
    sent: list[tuple[str, bytes]] = []

    def publish(region, n, tag):
        for i in range(n):
            data = f"{tag} {i} from {region}".encode()
            apps[region].publish(f"{prefix}.test", data, timeout=30,
                                 headers={"Nats-Msg-Id": f"{region}-{tag}-{i}"})
            sent.append((f"{prefix}.test", data))

    def down(*regions):
        for r in regions:
            for node in REGION_NODES[r]:
                mn.remove(node)

    def up(*regions):
        mn.add(*[node for r in regions for node in REGION_NODES[r]])

    publish("west", 3, "hello")
    assert ex.converge(js, len(sent), prefix=prefix) == sorted(sent)

    down("central")  # one region down: the others keep writing and reading
    publish("east", 5, "while central is down")
    publish("west", 5, "while central is down")
    wait_for(lambda: sorted(ex.view(apps["west"], prefix)) == sorted(sent), 30,
             "west reads east's writes while central is down")
    up("central")
    assert ex.converge(js, len(sent), prefix=prefix) == sorted(sent)

    down("west", "east")  # central alone (a split brain's small side) keeps writing
    publish("central", 5, "isolated")
    wait_for(lambda: sorted(ex.view(apps["central"], prefix)) == sorted(sent), 30,
             "central reads its own writes while the others are down")
    up("west", "east")
    down("central")
    publish("east", 5, "central gone again")
    up("central")
    final = ex.converge(js, len(sent), prefix=prefix, timeout=90)
    assert final == sorted(sent) and len(set(final)) == len(final)


def test_stretch_stream_keeps_writing_with_a_region_down(mn, js, stream_name):
    js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3,
                               placement=Placement(cluster="*")))
    placed = wait_for(lambda: all_placed(js, stream_name, 3), 30, "three replicas")
    assert sorted(lab[CLUSTER_LABEL] for lab in placed.values()) == ["central", "east", "west"]

    pub = Publisher(js, f"{stream_name}.a", "m")
    pub.start()
    try:
        pub.wait_count(50)
        mn.remove("e1")  # all of east
        at_loss = len(pub.acked)
        pub.wait_count(at_loss + 100, timeout=60)
        # east's replica waits for an east node instead of doubling up in another region
        alive = replica_labels(js, stream_name)
        assert sorted(lab[CLUSTER_LABEL] for lab in alive.values()) == ["central", "west"]
    finally:
        acked = pub.stop()
    assert_exactly_once(js, stream_name, acked)

    mn.add("e1")

    def caught_up():
        st = statuses(js, stream_name)
        return all(st.values()) and len({x["last_seq"] for x in st.values()}) == 1

    wait_for(caught_up, 60, "east's replica back and caught up")
    again = replica_labels(js, stream_name)
    assert sorted(lab[CLUSTER_LABEL] for lab in again.values()) == ["central", "east", "west"]
