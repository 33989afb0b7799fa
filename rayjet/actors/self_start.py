"""A restarted replica actor starts itself.

Ray restarts a dead actor by running ``__init__`` again, and then nothing calls it until a
client or a peer does: a quiet raft group (or an R1 mirror that only pulls) would sit there
unstarted. So an actor pings itself from ``__init__``; the call runs once the actor is ready.
For a fresh actor this is the same ping its creator sends.
"""

from __future__ import annotations

import contextlib

import ray


def start_when_restarted(actor_name: str) -> None:
    """Queue a ``ping`` on this actor when it is the actor named ``actor_name`` (not a
    replica constructed inside a host, or an object built outside Ray)."""
    if not ray.is_initialized():
        return
    with contextlib.suppress(RuntimeError, AssertionError, AttributeError):
        ctx = ray.get_runtime_context()
        if ctx.get_actor_name() == actor_name:
            ctx.current_actor.ping.remote()
