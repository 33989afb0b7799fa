"""rayjet.engine.direct_get without Ray: requests parsed as nats-server decodes them, and
batched and multi_last reads from a store."""

from __future__ import annotations

import pytest

from rayjet.clock import ManualClock
from rayjet.engine import direct_get as DG
from rayjet.storage import MemStore, StoreConfig


@pytest.mark.parametrize(("payload", "subject", "status"), [
    (b"", None, (408, "Empty Request")),
    (b"{}", None, (408, "Empty Request")),
    (b'{"batch":3}', None, (408, "Empty Request")),
    (b"[1]", None, (408, "Malformed Request")),
    (b'{"seq":-1}', None, (408, "Malformed Request")),
    (b'{"seq":1.5}', None, (408, "Malformed Request")),
    (b'{"multi_last":"a"}', None, (408, "Malformed Request")),
    (b'{"start_time":"yesterday"}', None, (408, "Malformed Request")),
    (b'{"seq":1,"last_by_subj":"a"}', None, (408, "Bad Request")),
    (b'{"last_by_subj":"a","batch":2}', None, (408, "Bad Request")),
    (b'{"multi_last":["a"],"next_by_subj":"a"}', None, (408, "Bad Request")),
    (b'{"seq":1}', "", (408, "Bad Request")),
    (b'{"seq":1}', "a", (408, "Bad Request")),
])
def test_bad_requests_get_nats_servers_statuses(payload, subject, status):
    assert DG.parse_request(payload, subject) == status


def test_times_keep_their_nanoseconds():
    ns = DG.time_ns("2024-01-31T12:00:00.123456789+01:00")
    assert DG.rfc3339_ns(ns) == "2024-01-31T11:00:00.123456789Z"
    assert DG.rfc3339_ns(DG.time_ns("2024-01-31T12:00:00.5Z")) == "2024-01-31T12:00:00.5Z"
    assert DG.rfc3339_ns(DG.time_ns("2024-01-31T12:00:00Z")) == "2024-01-31T12:00:00Z"


def _store() -> MemStore:
    clock = ManualClock()
    store = MemStore(StoreConfig(storage="memory"), clock=clock)
    for i in range(6):
        store.store_msg("s." + "ab"[i % 2], b"", b"m%d" % i)
        clock.advance(1.0)
    store.remove_msg(2)
    return store


def test_a_batch_counts_down_what_is_pending():
    req = DG.parse_request(b'{"batch":3,"seq":1}')
    got = DG.read(_store(), req)
    assert [(m[1], m[5], m[6]) for m in got["msgs"]] == [(1, 4, 0), (3, 3, 1), (4, 2, 3)]
    assert got["eob"] == [2, 4, 0]
    wire = DG.wire(got, "S")
    assert wire[-1] == (b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 2\r\n"
                        b"Nats-Last-Sequence: 4\r\n\r\n", b"")
    assert wire[0][0].startswith(b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s.a\r\n"
                                 b"Nats-Sequence: 1\r\nNats-Time-Stamp: ")


def test_multi_last_as_of_a_sequence_and_its_limits(monkeypatch):
    store = _store()
    got = DG.read(store, DG.parse_request(b'{"multi_last":["s.a","s.b"],"up_to_seq":2}'))
    assert [m[1] for m in got["msgs"]] == [1] and got["eob"] == [0, 1, 2]
    got = DG.read(store, DG.parse_request(b'{"multi_last":["x.>"]}'))
    assert got["status"] == [404, "No Results"]
    monkeypatch.setattr(DG, "MAX_MULTI", 1)
    got = DG.read(store, DG.parse_request(b'{"multi_last":["s.>"]}'))
    assert got["status"] == [413, "Too Many Results"]
