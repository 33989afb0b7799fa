"""How a replica's placement becomes Ray scheduling options (no Ray cluster needed)."""

from __future__ import annotations

import pytest
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayjet.actors import autoscaling, node_selection
from rayjet.api.stream import Placement
from rayjet.placement import CLUSTER_LABEL

EAST_1 = {CLUSTER_LABEL: "east", "az": "E-a", "host": "e1", "ray.io/node-id": "n1"}


def test_hard_selector_from_cluster_tags_exclusions_and_unique_tag():
    p = Placement(cluster="east", tags=["az:e-a", "!disk:hdd", "ssd"])
    # the tag matches the label ignoring case; the selector keeps the label's own spelling
    assert node_selection.hard_selector(p, EAST_1, None) == {
        CLUSTER_LABEL: "east", "az": "E-a", "disk": "!hdd"}
    assert node_selection.hard_selector(Placement(cluster="east"), EAST_1, "az") == {
        CLUSTER_LABEL: "east", "az": "E-a"}
    # an unplaced stream is still bound to the cluster its node is in
    assert node_selection.hard_selector(None, EAST_1, None) == {CLUSTER_LABEL: "east"}
    two_out = Placement(tags=["!az:a", "!az:b"])
    assert node_selection.hard_selector(two_out, {}, None) == {"az": "!in(a,b)"}
    # the chosen node is gone: the placement alone
    assert node_selection.hard_selector(Placement(cluster="west", tags=["az:w-a"]), None, "az") == {
        CLUSTER_LABEL: "west", "az": "w-a"}


def test_stretch_groups_pin_each_replica_to_its_own_region(monkeypatch):
    monkeypatch.delenv(node_selection.STRETCH_UNIQUE_TAG_ENV, raising=False)
    stretch = Placement(cluster=node_selection.STRETCH_CLUSTER)
    assert node_selection.unique_tag_for(stretch) == CLUSTER_LABEL
    assert node_selection.hard_selector(stretch, EAST_1, CLUSTER_LABEL) == {CLUSTER_LABEL: "east"}
    assert node_selection.hard_selector(stretch, None, CLUSTER_LABEL) == {}


def test_scheduling_options_prefer_the_chosen_node_and_fall_back_within_the_selector(
        monkeypatch):
    monkeypatch.setenv(node_selection.UNIQUE_TAG_ENV, "az")
    from rayjet.api import StreamConfig

    cfg = StreamConfig(name="S", subjects=["s"], placement=Placement(cluster="east"))
    opts = node_selection.scheduling_options(cfg, "n1", EAST_1)
    hard = {CLUSTER_LABEL: "east", "az": "E-a"}
    assert opts == {"label_selector": {**hard, "host": "e1"},
                    "fallback_strategy": [{"label_selector": hard}]}
    # unlabelled nodes (a laptop): a soft affinity, as before
    plain = node_selection.scheduling_options(StreamConfig(name="S", subjects=["s"]), "ab" * 28, {})
    assert isinstance(plain["scheduling_strategy"], NodeAffinitySchedulingStrategy)
    assert plain["scheduling_strategy"].soft


def test_capacity_requests_carry_the_placement_labels(monkeypatch):
    from rayjet.api import StreamConfig

    seen = []
    monkeypatch.setattr(autoscaling, "capacity_hook", lambda b, s: seen.append((b, s)))
    autoscaling.request_capacity(StreamConfig(name="S", subjects=["s"], num_replicas=2,
                                            placement=Placement(cluster="east")))
    assert seen == [([{"CPU": 1}] * 2, [{CLUSTER_LABEL: "east"}] * 2)]


@pytest.mark.parametrize("value", ["east", "!hdd", "!in(a,b)"])
def test_selector_values_are_valid_for_ray(value):
    from ray._private.label_utils import validate_label_selector_value

    assert validate_label_selector_value(value) is None
