"""ray_cluster.yaml is a real `ray up` config: Ray's own validator accepts it."""

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def config():
    return yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())


def test_ray_accepts_the_cluster_config(config):
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(config))


def test_node_types_carry_placement_labels(config):
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    zones = {t["labels"]["az"] for t in types.values()}
    assert len(zones) >= 3, "three zones let an R3 stream keep one replica per zone"
    for node_type in types.values():
        assert "rayjet.cluster" in node_type["labels"]
    workers = [t for name, t in types.items() if name != config["head_node_type"]]
    assert all(t["max_workers"] >= t["min_workers"] for t in workers)


def test_on_prem_example_is_valid_yaml():
    text = (ROOT / "ray_cluster.yaml").read_text()
    block = text.split("# --- On-prem / local provider", 1)[1]
    lines = [re.sub(r"^# ?", "", ln) for ln in block.splitlines()[1:] if ln.startswith("#")]
    body = "\n".join(ln for ln in lines if not ln.startswith("The local provider")
                     and not ln.startswith("`ray start") and not ln.startswith("labels"))
    local = yaml.safe_load(body)
    assert local["provider"]["type"] == "local"
    assert json.dumps(local)  # plain data, no YAML tricks
