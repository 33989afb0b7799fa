"""A simulated multi-node Ray cluster with labelled nodes (``ray.cluster_utils.Cluster``).

Ray can be initialised once per process, so these tests run in their own pytest process
(``pytest tests/multinode``; the default run skips the directory, see ``norecursedirs``).

Layout: an unlabelled head (the driver and the meta group live there; with the unique tag
``az`` it never holds replicas) and five labelled nodes in three regions. ``w3`` and ``w4``
share a zone so the unique tag has something to refuse.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest

from rayjet.placement import CLUSTER_LABEL
from tests import waiting
from tests.replicas import hosting_for_tests

UNIQUE_TAG = "az"
LAYOUT: dict[str, dict[str, str]] = {
    "w1": {CLUSTER_LABEL: "west", "az": "w-a"},
    "w2": {CLUSTER_LABEL: "west", "az": "w-b"},
    "w3": {CLUSTER_LABEL: "west", "az": "w-c"},
    "w4": {CLUSTER_LABEL: "west", "az": "w-c"},
    "c1": {CLUSTER_LABEL: "central", "az": "c-a"},
    "e1": {CLUSTER_LABEL: "east", "az": "e-a"},
}
REGION_NODES = {r: [n for n, lab in LAYOUT.items() if lab[CLUSTER_LABEL] == r]
                for r in ("west", "central", "east")}

_names = itertools.count()


# a node or replica may be coming back: any error counts as not yet
wait_for = partial(waiting.wait_for, retry_on=Exception, interval=0.2)


@dataclass
class MultiNode:
    cluster: Any
    js: Any
    nodes: dict[str, Any] = field(default_factory=dict)  # name -> ray Node (alive ones)

    def labels(self, name: str) -> dict[str, str]:
        return {**LAYOUT[name], "host": name}

    def add(self, *names: str) -> None:
        """Start (again) the nodes ``names`` with their labels; a new Ray node id each time."""
        for name in names:
            assert name not in self.nodes, f"{name} is already up"
            self.nodes[name] = self.cluster.add_node(num_cpus=1, labels=self.labels(name),
                                                     wait=False)
        self.cluster.wait_for_nodes(timeout=60)

    def remove(self, name: str) -> None:
        """Kill every process of node ``name`` (its replica actors die with it)."""
        self.cluster.remove_node(self.nodes.pop(name))

    def restore(self) -> None:
        missing = [name for name in LAYOUT if name not in self.nodes]
        if missing:
            self.add(*missing)

    def host_of(self, node_id: str) -> str | None:
        import ray

        for n in ray.nodes():
            if n["NodeID"] == node_id and n.get("Alive"):
                return (n.get("Labels") or {}).get("host")
        return None


@pytest.fixture(scope="session")
def mn(tmp_path_factory):
    # A private Ray temp dir: the cluster's address file and sessions stay out of /tmp/ray,
    # so another Ray on this machine never connects to this cluster by accident.
    ray_tmp = tempfile.mkdtemp(prefix="rjmn", dir="/tmp")
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAYJET_UNIQUE_TAG")}
    os.environ["RAY_TMPDIR"] = ray_tmp
    os.environ["RAYJET_UNIQUE_TAG"] = UNIQUE_TAG  # read by the meta actors (inherited env)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")

    import ray
    from ray.cluster_utils import Cluster

    import rayjet

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "labels": {"host": "head"}})
    state = MultiNode(cluster=cluster, js=None)
    try:
        state.add(*LAYOUT)
        state.js = rayjet.connect(address=cluster.address,
                                  data_dir=tmp_path_factory.mktemp("rayjet-data"), timeout=20,
                                  hosting=hosting_for_tests())
        yield state
    finally:
        if state.js is not None:
            state.js.close()
        ray.shutdown()
        cluster.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture
def js(mn):
    return mn.js


@pytest.fixture
def stream_name(request):
    base = "".join(ch for ch in request.node.name if ch.isalnum()).upper()[:30]
    return f"{base}{next(_names)}"


@pytest.fixture(autouse=True)
def _layout_and_cleanup(mn):
    """Each test starts with every node up and leaves no stream behind (idle replicas
    still tick and load a 2-core machine)."""
    mn.restore()
    before = set(mn.js.stream_names())
    yield
    mn.restore()
    for name in set(mn.js.stream_names()) - before:
        try:
            mn.js.delete_stream(name)
        except Exception:  # noqa: BLE001 - best effort: the test's own outcome stands
            pass
