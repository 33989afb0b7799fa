"""Two ways to coordinate writers with the key-value store.

Pessimistic (create-and-hold): ``create`` succeeds for exactly one writer while the lock key
has a value; the holder works, then deletes the key with ``last=`` its own revision (so it
never removes somebody else's lock). A per-key TTL is the lease: a holder that dies without
releasing frees the lock when the lease runs out.

Optimistic (compare-and-set): read the value and its revision, compute, then ``update`` with
``last=`` that revision; when another writer got there first the update raises
KeyWrongLastSequenceError and the writer reads again and retries.

Run: ``python examples/kv_locks.py`` (starts a local Ray when RAY_ADDRESS is not set).
"""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager

import rayjet
from rayjet import KeyValueConfig, StorageType
from rayjet.errors import KeyWrongLastSequenceError

WORKERS = 4
ROUNDS = 5


# -- pessimistic: a lock held by creating a key -----------------------------------------------
@contextmanager
def locked(kv, name: str, lease: float = 10.0, wait: float = 30.0):
    """Hold the lock ``name`` for the duration of the block (at most ``lease`` seconds)."""
    owner = uuid.uuid4().hex.encode()
    deadline = time.monotonic() + wait
    pause = 0.01
    while True:
        try:
            rev = kv.create(name, owner, msg_ttl=lease)
            break
        except KeyWrongLastSequenceError:  # somebody holds it
            if time.monotonic() > deadline:
                raise TimeoutError(f"lock {name!r} not acquired within {wait}s") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
    try:
        yield rev
    finally:
        try:
            kv.delete(name, last=rev)  # only if it is still our lock
        except KeyWrongLastSequenceError:
            pass  # the lease ran out and another holder took over


def pessimistic(kv) -> None:
    kv.put("balance", b"0")
    inside = []

    def worker() -> None:
        for _ in range(ROUNDS):
            with locked(kv, "lock.balance"):
                inside.append(1)
                assert len(inside) == 1, "two holders at once"
                value = int(kv.get("balance").value)
                kv.put("balance", str(value + 1).encode())  # plain put: the lock protects it
                inside.pop()

    run(worker)
    print("pessimistic: balance =", kv.get("balance").value.decode(),
          f"(expected {WORKERS * ROUNDS})")


# -- optimistic: compare-and-set retries ----------------------------------------------------
def increment(kv, key: str) -> int:
    """Add one to the number at ``key``; returns the number of retries it took."""
    retries = 0
    while True:
        entry = kv.get(key)
        try:
            kv.update(key, str(int(entry.value) + 1).encode(), last=entry.revision)
            return retries
        except KeyWrongLastSequenceError:
            retries += 1


def optimistic(kv) -> None:
    kv.put("counter", b"0")
    retries = []

    def worker() -> None:
        for _ in range(ROUNDS):
            retries.append(increment(kv, "counter"))

    run(worker)
    print("optimistic: counter =", kv.get("counter").value.decode(),
          f"(expected {WORKERS * ROUNDS}, {sum(retries)} retries after conflicts)")


def run(worker) -> None:
    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> None:
    with rayjet.connect() as js:
        kv = js.create_key_value(KeyValueConfig(bucket="locks_example", history=5,
                                                storage=StorageType.MEMORY))
        try:
            pessimistic(kv)
            optimistic(kv)
        finally:
            js.delete_key_value("locks_example")


if __name__ == "__main__":
    main()
