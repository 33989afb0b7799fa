"""What the replica actors share: their raft transport calls, and starting on first use.

A stream replica, a consumer replica and a meta member each run one raft group in a
:class:`~rayjet.actors.raft_host.RaftHost`, started by the first call that reaches them (its
creator's ping, its own after a restart, a peer's message, a client call) so that it starts
on the actor's event loop. :class:`ReplicaShell` answers the calls they all answer alike;
what differs between them are its hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayjet.actors.raft_host import RaftHost
    from rayjet.raft import Message


class ReplicaShell:
    """Mixed into the replica classes, which set ``id`` and ``host`` (and ``_preferred``
    when they are the first voter of a new group)."""

    id: str
    host: RaftHost | None
    _preferred = False  # leads a new group: it campaigns as soon as it starts
    _started = False

    # -- hooks ------------------------------------------------------------------------------
    def _not_open(self) -> Exception | None:
        """Why this replica cannot run its group (None: it can). Calls that need the group
        raise it; raft messages are dropped meanwhile."""
        return None

    def _start_tasks(self) -> None:
        """Start the replica's own background tasks: once, right after its group starts."""

    # -- shared -----------------------------------------------------------------------------
    def _ensure_started(self) -> None:
        err = self._not_open()
        if err is not None:
            raise err
        if not self._started:
            self._started = True
            self.host.start(lead_at_once=self._preferred)
            self._start_tasks()

    async def receive(self, messages: list[Message]) -> None:
        if self._not_open() is not None:
            return  # dropped, as a dead replica's are (raft sends again)
        self._ensure_started()
        self.host.receive(messages)

    async def ping(self) -> str:
        self._ensure_started()
        return self.id

    async def hold(self) -> None:
        """Answer only when this replica stops: quiet peers wait on it to notice our death."""
        self._ensure_started()
        await self.host.until_stopped()


async def awaited(ref: Any) -> Any:
    """``ref``'s answer (a Ray ObjectRef), awaited in a coroutine of its own: what
    ``asyncio.wait_for`` is handed for an actor call."""
    return await ref
