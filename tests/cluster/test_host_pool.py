"""A new server's meta leader starts its node's replica hosts at once, so the first streams
and buckets do not wait for a host process to start."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CHECK = textwrap.dedent("""
    import sys
    import time
    import ray
    import rayjet
    from rayjet.actors.names import NAMESPACE, host_actor_name
    from rayjet.actors.replica_lifecycle import hosts_per_node

    js = rayjet.connect(data_dir=sys.argv[1], num_cpus=2)
    node = ray.get_runtime_context().get_node_id()
    names = [host_actor_name(node, i) for i in range(hosts_per_node())]
    deadline = time.monotonic() + 90
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            try:
                ray.get(ray.get_actor(name, namespace=NAMESPACE).names.remote(), timeout=30)
                pending.discard(name)
            except ValueError:
                pass  # not created (yet)
        time.sleep(0.2)
    print("streams", len(js.stream_names()), "hosts answering", len(names) - len(pending),
          "of", len(names))
    js.close()
""")


def test_the_hosts_of_the_meta_leaders_node_start_before_any_replica_needs_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAYJET_HOSTS_PER_NODE"] = "2"
    done = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "streams 0 hosts answering 2 of 2"
