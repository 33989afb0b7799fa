"""A leader's view of one follower: stale rejections and a follower that lost its log."""

from __future__ import annotations

from rayjet.raft.progress import Progress, ProgressState


def acked(match: int) -> Progress:
    pr = Progress(match + 1, 64, None)
    pr.maybe_update(match)
    return pr


def replicating(match: int, sent_upto: int) -> Progress:
    pr = acked(match)
    pr.become_replicate()
    pr.sent_entries(sent_upto - match, sent_upto - match)
    return pr


def test_a_rejection_below_the_match_with_a_hint_at_it_is_stale():
    pr = replicating(match=102, sent_upto=104)
    assert pr.maybe_decr_to(100, 102) is False
    assert (pr.match, pr.next, pr.state) == (102, 105, ProgressState.REPLICATE)


def test_a_follower_whose_log_ends_below_its_match_starts_over():
    """An emptied disk: the follower refuses appends after 102 and its log ends at 1."""
    pr = replicating(match=102, sent_upto=103)
    assert pr.maybe_decr_to(102, 1) is True
    assert (pr.match, pr.next) == (1, 2)
    pr.become_probe()
    assert pr.next == 2  # below the leader's first index: a snapshot goes next


def test_probing_below_the_match_after_a_loss():
    pr = acked(50)
    pr.become_probe()
    assert pr.maybe_decr_to(50, 3) is True
    assert (pr.match, pr.next, pr.probe_sent) == (3, 4, False)
    assert pr.maybe_decr_to(10, 3) is False  # not the probe in flight: stale
