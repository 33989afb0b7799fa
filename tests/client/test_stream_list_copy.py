"""The client's copy of the catalogue's stream assignments (rayjet.client.stream_list)."""

from __future__ import annotations

from rayjet.client.stream_list import StreamListCopy, capturing


def _a(name, subjects=None, consumers=()):
    return {"config": {"name": name, "subjects": subjects or [f"{name}.>"]},
            "group": f"{name}-1", "consumers": list(consumers)}


def _names(assignments):
    return [a["config"]["name"] for a in assignments]


def test_a_full_answer_then_changes_keep_the_copy_sorted_and_current():
    copy = StreamListCopy()
    assert copy.applied == -1
    assert _names(copy.update({"applied": 5, "streams": [_a("B"), _a("A")]})) == ["A", "B"]
    assert copy.applied == 5
    got = copy.update({"applied": 9, "changed": [_a("C"), _a("A", consumers=["d"])],
                       "removed": ["B"]})
    assert _names(got) == ["A", "C"] and got[0]["consumers"] == ["d"]
    assert copy.applied == 9
    # nothing changed: the same list, no rebuilding
    assert copy.update({"applied": 9, "changed": [], "removed": []}) is got


def test_an_answer_overtaken_by_a_newer_one_changes_nothing():
    copy = StreamListCopy()
    copy.update({"applied": 10, "streams": [_a("A"), _a("B")]})
    # another thread's answer about index 7 arrives after the one about 10
    assert _names(copy.update({"applied": 7, "streams": [_a("A")]})) == ["A", "B"]
    assert _names(copy.update({"applied": 8, "changed": [], "removed": ["B"]})) == ["A", "B"]
    assert copy.applied == 10


def test_a_reset_answer_replaces_a_copy_ahead_of_the_catalogue():
    copy = StreamListCopy()
    copy.update({"applied": 50, "streams": [_a("OLD")]})
    # a cluster made again on the same address: its history starts over
    got = copy.update({"applied": 3, "streams": [_a("NEW")], "reset": True})
    assert _names(got) == ["NEW"] and copy.applied == 3
    copy.forget()
    assert copy.applied == -1 and copy.update({"applied": 0, "streams": []}) == []


def test_capturing_filters_by_subject_as_the_meta_does():
    listed = [_a("A", ["orders.*"]), _a("B", ["pay.>"]), {"config": {"name": "M"}}]
    assert _names(capturing(listed, None)) == ["A", "B", "M"]
    assert _names(capturing(listed, "orders.new")) == ["A"]
    assert _names(capturing(listed, "pay.x.y")) == ["B"]
    assert capturing(listed, "other") == []
