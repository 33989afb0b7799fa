"""Shared fixtures: one Ray instance for the whole session (starting Ray costs seconds)."""

from __future__ import annotations

import os

import pytest

from tests import file_order


def pytest_collection_modifyitems(session, config, items):
    items[:] = file_order.longest_first(items, file_order.load())


@pytest.fixture(scope="session")
def ray_session(tmp_path_factory):
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not ray.is_initialized():
        # "local": a Ray of our own, even when `ray start` left a cluster running here.
        # Ray's metrics agent runs on the node without the dashboard (tests/metrics).
        from rayjet.client.ray_join import RAY_SYSTEM_CONFIG

        ray.init(address="local", num_cpus=2, namespace="rayjet", log_to_driver=False,
                 include_dashboard=False, _system_config=RAY_SYSTEM_CONFIG)
    yield ray
    ray.shutdown()
