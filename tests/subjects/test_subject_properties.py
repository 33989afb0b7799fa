"""Property tests: the fast matchers against naive references.

The references are a regex per filter and brute force over a bounded universe of literal
subjects. Filters use tokens ``a``, ``b``, ``*x`` (a literal that looks like a wildcard), ``*``
and ``>``; the universe adds ``c`` as "any other token" and goes one token longer than any
filter, which is enough to witness every collision and every non-subset.
"""

from __future__ import annotations

import itertools
import re
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.subjects import (
    SubjectTransform,
    is_subset,
    is_valid_filter,
    is_valid_subject,
    subject_matches,
    subjects_collide,
)

MAX_FILTER_TOKENS = 4
FILTER_TOKENS = ["a", "b", "*x", "*"]
LITERAL_TOKENS = ["a", "b", "*x", "c"]
UNIVERSE = tuple(
    ".".join(toks)
    for n in range(1, MAX_FILTER_TOKENS + 2)
    for toks in itertools.product(LITERAL_TOKENS, repeat=n)
)

PROPS = settings(max_examples=300, deadline=None)


@st.composite
def filters(draw):
    n = draw(st.integers(1, MAX_FILTER_TOKENS))
    toks = draw(st.lists(st.sampled_from(FILTER_TOKENS), min_size=n, max_size=n))
    if draw(st.booleans()):
        toks[-1] = ">"
    return ".".join(toks)


literals = st.lists(st.sampled_from(LITERAL_TOKENS), min_size=1,
                    max_size=MAX_FILTER_TOKENS + 1).map(".".join)


@cache
def _regex(filter_: str) -> re.Pattern[str]:
    parts = []
    for tok in filter_.split("."):
        if tok == "*":
            parts.append(r"[^.]+")
        elif tok == ">":
            parts.append(r"[^.]+(?:\.[^.]+)*")
        else:
            parts.append(re.escape(tok))
    return re.compile(r"\.".join(parts))


def naive_matches(subject: str, filter_: str) -> bool:
    return _regex(filter_).fullmatch(subject) is not None


@cache
def matched(filter_: str) -> frozenset[str]:
    return frozenset(s for s in UNIVERSE if naive_matches(s, filter_))


@PROPS
@given(literals, filters())
def test_subject_matches_agrees_with_regex(subject, filter_):
    assert subject_matches(subject, filter_) == naive_matches(subject, filter_)


@PROPS
@given(filters(), filters())
def test_collide_iff_some_subject_matches_both(a, b):
    expected = bool(matched(a) & matched(b))
    assert subjects_collide(a, b) == expected
    assert subjects_collide(b, a) == expected


@PROPS
@given(filters(), filters())
def test_subset_iff_every_matched_subject_matches(sub, sup):
    expected = matched(sub) <= matched(sup)
    assert is_subset(sub, sup) == expected
    # a filter used as the subject matches when it is a subset, like nats SubjectMatchesFilter
    assert subject_matches(sub, sup) == expected
    if expected:
        assert subjects_collide(sub, sup)


@PROPS
@given(filters())
def test_literal_members_are_subsets(filter_):
    for subject in list(matched(filter_))[:50]:
        assert is_subset(subject, filter_)
        assert subjects_collide(subject, filter_)


# -- validation against a naive validator ----------------------------------------------------
def naive_valid(subject: str, *, wildcards: bool) -> bool:
    if not subject or any(ch.isspace() for ch in subject):
        return False
    toks = subject.split(".")
    for i, tok in enumerate(toks):
        if tok == "":
            return False
        if tok in ("*", ">") and not wildcards:
            return False
        if tok == ">" and i != len(toks) - 1:
            return False
    return True


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab.*> \t", max_size=8))
def test_validation_agrees_with_naive_validator(text):
    assert is_valid_filter(text) == naive_valid(text, wildcards=True)
    assert is_valid_subject(text) == naive_valid(text, wildcards=False)


# -- transforms ------------------------------------------------------------------------------
@PROPS
@given(filters(), literals, st.randoms(use_true_random=False))
def test_wildcard_transform_agrees_with_regex_groups(source, subject, rnd):
    # destination: the source's wildcards in a shuffled order, then '>' when the source has one
    toks = source.split(".")
    n = toks.count("*")
    order = list(range(1, n + 1))
    rnd.shuffle(order)
    dest_toks = ["out", *(f"${i}" for i in order)]
    fwc = toks[-1] == ">"
    if fwc:
        dest_toks.append(">")
    tr = SubjectTransform(source, ".".join(dest_toks))

    groups = []
    for tok in toks:
        if tok == "*":
            groups.append(r"([^.]+)")
        elif tok == ">":
            groups.append(r"([^.]+(?:\.[^.]+)*)")
        else:
            groups.append(re.escape(tok))
    m = re.fullmatch(r"\.".join(groups), subject)
    out = tr.match(subject)
    if m is None:
        assert out is None
        return
    wild = m.groups()[:n]
    expected = ["out", *(wild[i - 1] for i in order)]
    if fwc:
        expected.append(m.groups()[n])
    assert out == ".".join(expected)


@PROPS
@given(st.text(alphabet="abc-", min_size=1, max_size=12), st.integers(-1, 14))
def test_slicing_functions_keep_every_character(token, k):
    for fn in ("splitfromleft", "splitfromright", "slicefromleft", "slicefromright"):
        out = SubjectTransform("*", f"{{{{{fn}(1,{k})}}}}").transform(token)
        assert out.replace(".", "") == token
        pieces = out.split(".")
        assert all(pieces)
        if fn.startswith("slice") and 0 < k < len(token):
            sized = pieces[:-1] if fn == "slicefromleft" else pieces[1:]
            assert all(len(p) == k for p in sized)
            assert all(0 < len(p) <= k for p in pieces)


@PROPS
@given(st.lists(st.sampled_from(["a", "b", "c", "-", "--"]), min_size=1, max_size=8))
def test_split_drops_empty_parts(chunks):
    token = "".join(chunks)
    out = SubjectTransform("*", "{{split(1,-)}}").transform(token)
    parts = [p for p in token.split("-") if p]
    assert out == (".".join(parts) if parts else token)


@PROPS
@given(literals, st.integers(1, 50))
def test_partition_is_stable_and_in_range(subject, count):
    dest = f"p.{{{{partition({count})}}}}.>"
    tr = SubjectTransform(">", dest)
    out = tr.transform(subject)
    head, number, rest = out.split(".", 2)
    assert head == "p" and 0 <= int(number) < count and rest == subject
    assert SubjectTransform(">", dest).transform(subject) == out
