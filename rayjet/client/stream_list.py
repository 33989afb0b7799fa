"""A client's copy of the meta catalogue's stream assignments, kept current by the changes
since the applied index it is at: a listing asks the meta leader for what changed (an
answer the size of the changes, not of the catalogue) and confirms its leadership as a
full listing did, so the copy is as current as a full listing would have been. Shared by
the threads of one connection (the gateway answers requests from a pool)."""

from __future__ import annotations

import threading
from typing import Any

from rayjet.errors import BadRequestError
from rayjet.subjects import matches_any


class StreamListCopy:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._applied = -1  # the meta catalogue's applied index the copy is at; -1: none
        self._by_name: dict[str, dict[str, Any]] = {}
        self._sorted: list[dict[str, Any]] | None = []

    @property
    def applied(self) -> int:
        return self._applied

    def update(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        """Take the meta's answer to ``streams_since(applied)``: every stream
        (``streams``), or what changed and what was removed after the index asked about.
        An answer older than the copy (another thread's, overtaken) changes nothing: a
        newer one covered what it says. Answers the assignments, sorted by name."""
        with self._lock:
            applied = answer["applied"]
            # ``reset``: the meta's history is behind the copy's (a cluster made again on
            # the same address): its answer is the truth, whatever the index
            if applied >= self._applied or answer.get("reset"):
                if answer.get("streams") is not None:
                    self._by_name = {a["config"]["name"]: a for a in answer["streams"]}
                    self._sorted = None
                else:
                    for a in answer.get("changed") or ():
                        self._by_name[a["config"]["name"]] = a
                        self._sorted = None
                    for name in answer.get("removed") or ():
                        if self._by_name.pop(name, None) is not None:
                            self._sorted = None
                self._applied = applied
            if self._sorted is None:
                self._sorted = [self._by_name[n] for n in sorted(self._by_name)]
            return self._sorted

    def forget(self) -> None:
        """Drop the copy (the meta group's history restarted: a new cluster on the same
        address); the next listing takes every stream."""
        with self._lock:
            self._applied, self._by_name, self._sorted = -1, {}, []


def capturing(assignments: list[dict[str, Any]], subject: str | None) -> list[dict[str, Any]]:
    """The assignments of the streams whose subjects match ``subject`` (all when None), as
    the meta leader filters a listing."""
    if subject is None:
        return assignments
    return [a for a in assignments if matches_any(subject, a["config"].get("subjects") or ())]


def listed_names(names: Any, what: str) -> list[str]:
    """``names`` given to a call about many streams or consumers (``what``: "stream",
    "consumer") as a list, or BadRequestError: one name alone, not a list, or an empty or
    non-string name."""
    if isinstance(names, str):
        raise BadRequestError(f"names must be a list of {what} names, not one name")
    try:
        names = list(names)
    except TypeError:
        raise BadRequestError(f"names must be a list of {what} names") from None
    if not all(isinstance(n, str) and n for n in names):
        raise BadRequestError(f"names must be a list of {what} names")
    return names


__all__ = ["StreamListCopy", "capturing", "listed_names"]
