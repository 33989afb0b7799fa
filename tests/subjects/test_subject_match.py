"""Subject validation, matching, overlap and subsets (expected values follow nats-server)."""

from __future__ import annotations

import pytest

from rayjet.errors import InvalidSubjectError
from rayjet.subjects import (
    FWC,
    PWC,
    is_literal,
    is_subset,
    is_valid_filter,
    is_valid_subject,
    matches_any,
    subject_matches,
    subjects_collide,
    tokens,
    validate_filter,
    validate_subject,
)

# -- validation ------------------------------------------------------------------------------
VALID_LITERALS = [
    "foo", "foo.bar", "a.b.c.d.e", "$JS.API.INFO", "_INBOX.abc", "foo-bar.baz_1",
    # wildcard characters inside a longer token are literal
    "foo*", "foo**", "foo.**", "foo*bar", "foo.*bar", "foo*.bar", "*bar",
    "foo>", "foo>>", "foo.>>", "foo>bar", "foo.>bar", "foo>.bar", ">bar",
    "ünïcødé.ok",
]
INVALID_ANY = [
    "", ".", "..", ".foo", "foo.", "foo..bar", ">.bar", "foo.>.bar", "*.>.x",
    "foo bar", "foo.\tbar", "foo\n", " foo", "foo.bar ", "a.\r", "a.\f",
]
WILDCARD_FILTERS = ["*", ">", "foo.*", "foo.>", "*.bar", "foo.*.>", "*.*.*", "a.*.c.>"]


@pytest.mark.parametrize("subject", VALID_LITERALS)
def test_valid_literal_subjects(subject):
    assert is_valid_subject(subject)
    assert is_valid_filter(subject)
    assert is_literal(subject)
    assert validate_subject(subject) == subject


@pytest.mark.parametrize("subject", INVALID_ANY)
def test_invalid_subjects_and_filters(subject):
    assert not is_valid_subject(subject)
    assert not is_valid_filter(subject)
    with pytest.raises(InvalidSubjectError) as exc:
        validate_filter(subject)
    assert exc.value.err_code == 10003 and repr(subject) in str(exc.value)


@pytest.mark.parametrize("subject", WILDCARD_FILTERS)
def test_wildcards_are_filters_not_publish_subjects(subject):
    assert is_valid_filter(subject)
    assert not is_valid_subject(subject)
    assert not is_literal(subject)
    assert validate_filter(subject) == subject
    with pytest.raises(InvalidSubjectError, match="wildcard"):
        validate_subject(subject)


@pytest.mark.parametrize(
    ("subject", "reason"),
    [
        ("", "empty"),
        ("foo..bar", "empty tokens"),
        ("foo bar", "whitespace"),
        ("foo.>.bar", "last token"),
        ("x" * 5000, "at most"),
    ],
)
def test_validation_messages_say_what_is_wrong(subject, reason):
    with pytest.raises(InvalidSubjectError, match=reason):
        validate_filter(subject, what="stream subject")


def test_non_strings_are_invalid():
    for bad in (None, 1, b"foo", ["foo"]):
        assert not is_valid_subject(bad)
        assert not is_valid_filter(bad)
        with pytest.raises(InvalidSubjectError, match="string"):
            validate_subject(bad)


def test_tokens_and_constants():
    assert tokens("a.b.c") == ["a", "b", "c"]
    assert (PWC, FWC) == ("*", ">")


# -- matching --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("subject", "filter_", "expected"),
    [  # nats-server TestSublistMatchLiterals
        ("foo", "foo", True),
        ("foo", "bar", False),
        ("foo", "*", True),
        ("foo", ">", True),
        ("foo.bar", ">", True),
        ("foo.bar", "foo.>", True),
        ("foo.bar", "bar.>", False),
        ("stats.test.22", "stats.>", True),
        ("stats.test.22", "stats.*.*", True),
        ("foo.bar", "foo", False),
        ("stats.test.foos", "stats.test.foos", True),
        ("stats.test.foos", "stats.test.foo", False),
        ("stats.test", "stats.test.*", False),
        ("stats.test.foos", "stats.*", False),
        ("stats.test.foos", "stats.*.*.foos", False),
        ("*bar", "*bar", True),
        ("foo*", "foo*", True),
        ("foo*bar", "foo*bar", True),
        ("foo.***.bar", "foo.***.bar", True),
        (">bar", ">bar", True),
        ("foo>", "foo>", True),
        ("foo>bar", "foo>bar", True),
        ("foo.>>>.bar", "foo.>>>.bar", True),
        # more
        ("foo", "foo.>", False),
        ("foo.bar.baz", "foo.*.baz", True),
        ("foo.bar.baz", "*.*.>", True),
        ("foo.bar", "*.*.>", False),
        ("foox", "foo*", False),
        ("foo.x", "foo.x*", False),
    ],
)
def test_subject_matches(subject, filter_, expected):
    assert subject_matches(subject, filter_) is expected


@pytest.mark.parametrize(
    ("subject", "filter_", "expected"),
    [  # a subject with wildcards matches when all it stands for matches (nats SubjectMatchesFilter)
        ("foo.*", ">", True),
        ("foo.*", "*.*", True),
        ("foo.*", "foo.*", True),
        ("foo.*", "foo.bar", False),
        ("foo.>", ">", True),
        ("foo.>", "*.>", True),
        ("foo.>", "foo.>", True),
        ("foo.>", "foo.bar", False),
        ("foo.>", "foo.*", False),
        ("foo.*", "foo.>", True),
    ],
)
def test_subject_matches_with_wildcard_subjects(subject, filter_, expected):
    assert subject_matches(subject, filter_) is expected
    assert is_subset(subject, filter_) is expected


def test_matches_any():
    assert matches_any("orders.new", ["billing.>", "orders.*"])
    assert matches_any("orders.new", ("orders.new",))
    assert not matches_any("orders.new.eu", ["billing.>", "orders.*"])
    assert not matches_any("orders.new", [])


# -- overlap ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [  # nats-server TestSublistSubjectCollide and more
        ("foo.*", "foo.*.bar.>", False),
        ("foo.*", "foo.foo", True),
        ("foo.*", "*.foo", True),
        ("foo.bar.>", "*.bar.foo", True),
        ("foo", "foo", True),
        ("foo", "bar", False),
        ("foo.>", "foo", False),
        ("foo.>", "foo.bar", True),
        (">", "foo", True),
        ("*", "foo.bar", False),
        ("*", ">", True),
        ("foo.*.baz", "foo.>", True),
        ("foo.*.baz", "foo.bar.*", True),
        ("foo.*.baz", "foo.bar.qux", False),
        ("a.*.c.>", "a.b.*", False),
        ("a.*.c.>", "a.b.*.d", True),
        ("foo*", "foo*", True),
        ("foo*", "foo", False),
        ("foo.*x", "foo.*", True),
        ("foo.*x.>", "foo.y.>", False),
    ],
)
def test_subjects_collide(a, b, expected):
    assert subjects_collide(a, b) is expected
    assert subjects_collide(b, a) is expected


# -- subsets ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sub", "sup", "expected"),
    [  # nats-server TestIsSubsetMatch and more
        ("foo.bar", "foo.bar", True),
        ("foo.*", ">", True),
        ("foo.*", "*.*", True),
        ("foo.*", "foo.*", True),
        ("foo.*", "foo.bar", False),
        ("foo.>", ">", True),
        ("foo.>", "*.>", True),
        ("foo.>", "foo.>", True),
        ("foo.>", "foo.bar", False),
        ("foo..bar", "foo.*", False),
        ("foo.*", "foo..bar", False),
        ("foo.*.>", "foo.>", True),
        ("foo.>", "foo.*.>", False),
        ("foo.*", "foo.*.>", False),
        ("foo.bar.baz", "foo.*.>", True),
        (">", ">", True),
        (">", "*", False),
        ("*", ">", True),
    ],
)
def test_is_subset(sub, sup, expected):
    assert is_subset(sub, sup) is expected
