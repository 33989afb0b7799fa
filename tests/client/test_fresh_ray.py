"""What a Ray that ``rayjet.connect()`` starts for itself gives: calls that carry messages
up to 2 MB in the call, and its node's replica hosts started before any replica needs one.
One fresh Ray in a process of its own serves both checks (starting one costs seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

CHECK = textwrap.dedent("""
    import json
    import sys
    import time
    import ray
    import rayjet
    from rayjet.actors.names import NAMESPACE, host_actor_name
    from rayjet.actors.host_pools import hosts_per_node

    js = rayjet.connect(data_dir=sys.argv[1], num_cpus=2)

    @ray.remote
    def make(n):
        return b"x" * n

    refs = [make.remote(500_000), make.remote(3_000_000)]
    ray.get(refs)
    where = ray.experimental.get_object_locations(refs)
    in_store = [bool(where[r]["node_ids"]) for r in refs]

    node = ray.get_runtime_context().get_node_id()
    names = [host_actor_name(node, i) for i in range(hosts_per_node())]
    pending, deadline = set(names), time.monotonic() + 90
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            try:
                ray.get(ray.get_actor(name, namespace=NAMESPACE).names.remote(), timeout=30)
                pending.discard(name)
            except ValueError:
                pass  # not created (yet)
        time.sleep(0.2)
    print(json.dumps({"in_object_store": in_store, "streams": len(js.stream_names()),
                      "hosts": len(names), "hosts_answering": len(names) - len(pending)}))
    js.close()
""")


def test_a_ray_started_by_connect(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAYJET_HOSTS_PER_NODE"] = "2"
    done = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    # a 500 KB result crossed in the call, a 3 MB one through the object store
    assert got["in_object_store"] == [False, True]
    # the meta leader started its node's hosts with no stream made
    assert (got["streams"], got["hosts"], got["hosts_answering"]) == (0, 2, 2)
