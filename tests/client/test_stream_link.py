"""StreamLink's answers when a publish spans several calls and a later one fails: what the
earlier calls stored stays answered as stored (a client told otherwise would send it again);
a failure of the first call is raised (nothing was stored)."""

from __future__ import annotations

import asyncio

import numpy as np
import pyarrow as pa
import pytest

from rayjet.api import PubAck
from rayjet.client import column_publish as CP
from rayjet.client import stream_link as SL
from rayjet.errors import ServiceUnavailableError


class Router:
    """Answers the first ``ok`` calls as stored, then refuses every call."""

    def __init__(self, ok: int) -> None:
        self.ok = ok
        self.calls: list[int] = []
        self.next_seq = 1

    async def acall(self, method, msgs, *args, **kwargs):
        n = len(msgs) if method == "publish" else msgs.num_rows
        self.calls.append(n)
        if len(self.calls) > self.ok:
            raise ServiceUnavailableError("the leader went away")
        first, self.next_seq = self.next_seq, self.next_seq + n
        if method == "publish":
            return list(range(first, first + n))
        rows = np.arange(n, dtype="<u4").tobytes()
        return {"count": n, "refused": None, "runs": [(rows, first)], "rows": {}}


def _table(n: int, size: int) -> pa.Table:
    return pa.table({"subject": ["S.a"] * n, "data": [b"x" * size] * n})


def test_a_later_list_call_failing_answers_only_its_messages(monkeypatch):
    monkeypatch.setattr(SL, "MAX_CALL_MSGS", 3)
    router = Router(ok=1)
    link = SL.StreamLink("S", router, 5.0)
    answers = asyncio.run(link.publish([("S.a", b"%d" % i, None) for i in range(5)]))
    assert router.calls == [3, 2]
    assert answers[:3] == [PubAck.stored("S", s) for s in (1, 2, 3)]
    assert all(isinstance(a, ServiceUnavailableError) for a in answers[3:])


def test_a_later_table_call_failing_answers_only_its_rows(monkeypatch):
    monkeypatch.setattr(CP, "MAX_CALL_BYTES", 1000)  # 4 rows of 300 B: calls of 3 and 1
    router = Router(ok=1)
    acks = asyncio.run(SL.StreamLink("S", router, 5.0).publish_table(_table(4, 300)))
    assert router.calls == [3, 1]
    assert list(acks.seqs[:3]) == [1, 2, 3] and not acks.errors.keys() & {0, 1, 2}
    assert isinstance(acks.errors[3], ServiceUnavailableError)


@pytest.mark.parametrize("form", ["list", "table"])
def test_the_first_call_failing_is_raised(form):
    link = SL.StreamLink("S", Router(ok=0), 5.0)
    publish = (link.publish([("S.a", b"x", None)]) if form == "list"
               else link.publish_table(_table(2, 10)))
    with pytest.raises(ServiceUnavailableError):
        asyncio.run(publish)
