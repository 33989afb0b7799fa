"""The seed 004 virtual global stream, run from examples/virtual_global_stream.py.

On one machine, unplaced (the walkthrough places streams by region only when the Ray
cluster has nodes labelled with every region): the data flow is the same, a "region down"
stops its write stream's replicas.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
from pathlib import Path

import pytest

from rayjet.client.regions import ClusterMapping, regional

_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "virtual_global_stream.py"
_prefixes = itertools.count()


def load_example():
    spec = importlib.util.spec_from_file_location("virtual_global_stream", _EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cluster_mapping_rules():
    m = ClusterMapping("west", subjects={"foo.>": "foo.{cluster}.>",
                                         "bar.*": {"east": "bar.e.$1"}},
                       streams={"foo": "foo-read-{cluster}"})
    assert m.subject("foo.test") == "foo.west.test"
    assert m.subject("foo.a.b") == "foo.west.a.b"
    assert m.subject("bar.x") == "bar.x"  # no rule for west
    assert ClusterMapping("east", subjects={"bar.*": {"east": "bar.e.$1"}}).subject(
        "bar.x") == "bar.e.x"
    assert m.stream("foo") == "foo-read-west" and m.stream("other") == "other"

    class Recorder:
        def publish(self, subject, data):
            return subject, data

        def stream_names(self):
            return ["x"]

    r = regional(Recorder(), "west", subjects={"foo.>": "foo.{cluster}.>"})
    assert r.publish("foo.test", b"d") == ("foo.west.test", b"d")
    assert r.stream_names() == ["x"] and r.cluster == "west"


@pytest.fixture
def vgs(js):
    ex = load_example()
    prefix = f"vgs{next(_prefixes)}"
    ex.define_streams(js, prefix=prefix)
    yield ex, prefix
    for name in js.stream_names():
        if name.startswith(prefix + "-"):
            with contextlib.suppress(Exception):
                js.delete_stream(name)


def test_virtual_global_stream_converges_after_region_outages(js, vgs):
    ex, p = vgs
    west, central, east = (ex.connect_region(js, r, p) for r in ex.REGIONS)
    ack = west.publish(f"{p}.test", b"w1")
    assert ack.stream == f"{p}-write-west"
    assert js.get_msg(f"{p}-write-west", ack.seq).subject == f"{p}.west.test"
    first = ex.converge(js, 1, prefix=p)
    assert first == [(f"{p}.test", b"w1")]
    assert west.stream_info(p).config.name == f"{p}-read-west"

    # one region down: the others keep publishing and reading
    ex.region_down(js, "central", p)
    east.publish(f"{p}.test", b"e1")
    west.publish(f"{p}.other", b"w2")
    ex.region_up(js, "central", p)
    # two regions down: the isolated one keeps taking local writes
    ex.region_down(js, "west", p)
    ex.region_down(js, "east", p)
    central.publish(f"{p}.test", b"c1")
    ex.region_up(js, "west", p)
    ex.region_up(js, "east", p)
    east.publish(f"{p}.test", b"e2")
    final = ex.converge(js, 5, prefix=p)
    assert sorted(d for _s, d in final) == [b"c1", b"e1", b"e2", b"w1", b"w2"]
    assert {s for s, _d in final} == {f"{p}.test", f"{p}.other"}
