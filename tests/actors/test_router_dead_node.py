"""A replica whose host's node is gone (Ray answers ActorUnschedulableError: the call never
ran) is skipped like a dead one: the router asks the next replica, even for writes that
must not be retried when their outcome is unknown."""

from __future__ import annotations

import asyncio

from ray.exceptions import ActorUnschedulableError

from rayjet.actors.router import GroupRouter


class _Method:
    def __init__(self, answer):
        self.answer = answer

    def remote(self, *args, **kwargs):
        async def run():
            if isinstance(self.answer, BaseException):
                raise self.answer
            return self.answer
        return run()


class _Replica:
    def __init__(self, answer):
        self.publish = _Method(answer)


def test_a_replica_on_a_gone_node_is_skipped_even_when_retries_are_unsafe():
    router = GroupRouter({"r0": "a", "r1": "b"}, "stream S")
    router._handles = {"r0": _Replica(ActorUnschedulableError("node gone")),
                       "r1": _Replica("stored")}
    router.leader = "r0"
    got = asyncio.run(router.acall("publish", timeout=2, retry_unknown=False))
    assert got == "stored" and router.leader == "r1"
    assert "r0" not in router._handles  # its handle is looked up again next time
