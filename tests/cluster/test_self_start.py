"""A replica that Ray restarts runs again without anyone calling it.

The meta leader's reconciliation does not call running replicas (that would cost a call per
replica every pass), and a quiet group is called by nobody: an R1 mirror only pulls from its
origin while it runs. So a restarted replica actor (or replica host) must start itself. The
test watches the mirror's files on disk grow, never calling the mirror until the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from rayjet import StorageType
from rayjet.actors.host import hosted_on
from rayjet.actors.names import NAMESPACE, stream_actor_name
from rayjet.api.stream import StreamSource
from tests.waiting import wait_for

PAYLOAD = b"x" * 4096
COUNT = 100


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize("hosting", ["dedicated", "shared"])
def test_a_restarted_mirror_pulls_again_uncalled(js, stream_name, drop_new_streams, hosting):
    origin, mirror = stream_name, stream_name + "M"
    js.add_stream(name=origin, subjects=[f"{origin}.*"], storage=StorageType.FILE)
    js.add_stream(name=mirror, mirror=StreamSource(name=origin), storage=StorageType.FILE,
                  hosting=hosting)
    js.publish(f"{origin}.a", b"first")
    wait_for(lambda: js.stream_info(mirror).state.messages == 1, 30, "the mirror's copy",
             interval=0.2)

    group = js._meta_call("stream_assignment", mirror)["group"]
    name = stream_actor_name(group, "r0")
    victim_name = hosted_on(name) if hosting == "shared" else name
    assert victim_name is not None
    victim = ray.get_actor(victim_name, namespace=NAMESPACE)
    # the replica's directory, as it sees it (the meta's data dir may be another test's)
    if hosting == "shared":
        where = ray.get(victim.__ray_call__.remote(lambda self: str(self.replicas[name].dir)))
    else:
        where = ray.get(victim.__ray_call__.remote(lambda self: str(self.dir)))
    replica_dir = Path(where)
    assert replica_dir.is_dir()
    pid = ray.get(victim.__ray_call__.remote(lambda self: __import__("os").getpid()))
    ray.kill(victim, no_restart=False)  # Ray restarts it; nobody calls it afterwards

    def restarted():  # the same name, a new process (asks Ray, not the actor)
        try:
            again = ray.get_actor(victim_name, namespace=NAMESPACE)
            return ray.get(again.__ray_call__.remote(
                lambda self: __import__("os").getpid()), timeout=5) != pid
        except (ray.exceptions.RayError, ValueError):
            return False

    wait_for(restarted, 60, "Ray to restart the replica's process", interval=0.2)
    before = disk_bytes(replica_dir)
    js.publish_batch([(f"{origin}.a", PAYLOAD) for _ in range(COUNT)])
    # the mirror's raft log and store take the copies: half the payload at least
    wait_for(lambda: disk_bytes(replica_dir) - before >= COUNT * len(PAYLOAD) // 2, 60,
             "the restarted mirror to copy the new messages", interval=0.2)
    wait_for(lambda: js.stream_info(mirror).state.messages == COUNT + 1, 30, "every copy",
             interval=0.2)
