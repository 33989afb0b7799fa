"""The calls every replica actor answers alike (ReplicaShell): its group starts once, on
the first call, and a replica that cannot run its group drops raft messages and refuses
the rest."""

from __future__ import annotations

import asyncio

import pytest

from rayjet.actors.replica_shell import ReplicaShell, awaited


class FakeHost:
    def __init__(self) -> None:
        self.starts: list[bool] = []
        self.received: list[list] = []
        self.stopped = asyncio.Event()

    def start(self, *, lead_at_once: bool) -> None:
        self.starts.append(lead_at_once)

    def receive(self, messages: list) -> None:
        self.received.append(messages)

    async def until_stopped(self) -> None:
        await self.stopped.wait()


class Shell(ReplicaShell):
    def __init__(self, preferred: bool = False, closed: Exception | None = None) -> None:
        self.id = "r0"
        self.host = FakeHost()
        self._preferred = preferred
        self.closed = closed
        self.tasks_started = 0

    def _not_open(self) -> Exception | None:
        return self.closed

    def _start_tasks(self) -> None:
        self.tasks_started += 1


def test_the_group_starts_once_on_the_first_call():
    async def run() -> Shell:
        shell = Shell(preferred=True)
        assert await shell.ping() == "r0"
        await shell.receive(["m"])
        assert await shell.ping() == "r0"
        return shell

    shell = asyncio.run(run())
    assert shell.host.starts == [True] and shell.tasks_started == 1
    assert shell.host.received == [["m"]]


def test_hold_answers_once_the_replica_stops():
    async def run() -> None:
        shell = Shell()
        held = asyncio.ensure_future(shell.hold())
        await asyncio.sleep(0)
        assert not held.done() and shell.host.starts == [False]
        shell.host.stopped.set()
        await asyncio.wait_for(held, 1)

    asyncio.run(run())


def test_a_replica_that_cannot_run_drops_messages_and_refuses_calls():
    async def run() -> Shell:
        shell = Shell(closed=RuntimeError("files not open"))
        await shell.receive(["m"])
        with pytest.raises(RuntimeError, match="files not open"):
            await shell.ping()
        return shell

    shell = asyncio.run(run())
    assert shell.host.received == [] and shell.host.starts == [] and not shell.tasks_started


def test_awaited_wraps_an_awaitable_in_a_coroutine():
    async def answer() -> int:
        return 7

    async def run() -> int:
        return await asyncio.wait_for(awaited(answer()), 1)

    assert asyncio.run(run()) == 7
