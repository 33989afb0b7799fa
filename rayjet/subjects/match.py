"""Subject tokens, validation and wildcard matching.

A subject is a ``.``-separated list of non-empty tokens without whitespace. A filter may use
``*`` (exactly one token) and ``>`` (one or more tokens, last token only).
"""

from __future__ import annotations

from functools import lru_cache

from rayjet.errors import InvalidSubjectError

PWC = "*"  # partial wildcard: one token
FWC = ">"  # full wildcard: the rest, at least one token
SEP = "."
_WHITESPACE = frozenset(" \t\r\n\f\v")
MAX_SUBJECT_LEN = 4096


def tokens(subject: str) -> list[str]:
    return subject.split(SEP)


def _problem(subject: object, *, wildcards: bool) -> str | None:
    """Why ``subject`` is invalid, or None when it is valid."""
    if not isinstance(subject, str):
        return f"a subject must be a string, not {type(subject).__name__}"
    if not subject:
        return "a subject cannot be empty"
    if len(subject) > MAX_SUBJECT_LEN:
        return f"a subject is at most {MAX_SUBJECT_LEN} characters"
    if not _WHITESPACE.isdisjoint(subject):
        return "a subject cannot contain whitespace"
    parts = subject.split(SEP)
    for i, tok in enumerate(parts):
        if not tok:
            return "a subject cannot have empty tokens (no leading, trailing or double '.')"
        if len(tok) > 1:
            # 'a*' and '>b' are ordinary literal tokens, as in NATS
            continue
        if tok == FWC:
            if not wildcards:
                return "a publish subject cannot contain the wildcard '>'"
            if i != len(parts) - 1:
                return "'>' may only be the last token"
        elif tok == PWC and not wildcards:
            return "a publish subject cannot contain the wildcard '*'"
    return None


def is_valid_subject(subject: object) -> bool:
    """A literal subject one can publish to (no wildcard tokens)."""
    return _problem(subject, wildcards=False) is None


def is_valid_filter(subject: object) -> bool:
    """A subject or a filter with ``*``/``>`` wildcards."""
    return _problem(subject, wildcards=True) is None


def validate_subject(subject: object, *, what: str = "subject") -> str:
    problem = _problem(subject, wildcards=False)
    if problem:
        raise InvalidSubjectError(f"invalid {what} {subject!r}: {problem}")
    return subject  # type: ignore[return-value]


def validate_filter(subject: object, *, what: str = "subject filter") -> str:
    problem = _problem(subject, wildcards=True)
    if problem:
        raise InvalidSubjectError(f"invalid {what} {subject!r}: {problem}")
    return subject  # type: ignore[return-value]


def validate_stored_subject(subject: object, *, what: str = "subject") -> str:
    """A subject a stream may store: a publish subject, or one whose ``*`` and ``>`` tokens
    are literal tokens, as nats-server stores a (non-pedantic) client's publish to ``a.*``.
    Filters match such a subject as :func:`subject_matches` says (``a.*`` matches it)."""
    problem = _problem(subject, wildcards=True)
    if problem:
        raise InvalidSubjectError(f"invalid {what} {subject!r}: {problem}")
    return subject  # type: ignore[return-value]


def is_literal(subject: str) -> bool:
    """True when no token is a wildcard (``a*`` or ``>b`` are literal tokens)."""
    if PWC not in subject and FWC not in subject:
        return True
    return all(tok != PWC and tok != FWC for tok in _split(subject))


@lru_cache(maxsize=8192)
def _split(subject: str) -> tuple[str, ...]:
    return tuple(subject.split(SEP))


def subject_matches(subject: str, filter_: str) -> bool:
    """Does the literal ``subject`` match ``filter_`` (which may hold wildcards)?

    A ``subject`` with wildcards matches when every subject it stands for matches
    (``foo.*`` matches ``foo.>`` but ``foo.>`` does not match ``foo.*``), as nats-server's
    ``SubjectMatchesFilter`` does; this equals :func:`is_subset`.
    """
    if filter_ == FWC or subject == filter_:
        return True
    if PWC not in filter_ and FWC not in filter_:
        # a literal filter only matches itself (checked above)
        return False
    # subjects are many and short-lived: split them directly, cache only the filters
    st, ft = subject.split(SEP), _split(filter_)
    n = len(st)
    for i, f in enumerate(ft):
        if f == FWC:
            return n > i
        if i >= n:
            return False
        if f == PWC:
            if st[i] == FWC:
                return False
        elif f != st[i]:
            return False
    return n == len(ft)


def subjects_collide(a: str, b: str) -> bool:
    """Can some literal subject match both filters ``a`` and ``b``?"""
    if a == b:
        return True
    at, bt = _split(a), _split(b)
    for i in range(max(len(at), len(bt))):
        x = at[i] if i < len(at) else None
        y = bt[i] if i < len(bt) else None
        if x == FWC or y == FWC:
            # '>' needs at least one token from here on; the other side has one, or is '>'
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and x != PWC and y != PWC:
            return False
    return True


def is_subset(sub: str, sup: str) -> bool:
    """Is every subject matched by filter ``sub`` also matched by filter ``sup``?"""
    st, pt = _split(sub), _split(sup)
    for i, p in enumerate(pt):
        if p == FWC:
            return len(st) > i
        if i >= len(st):
            return False
        s = st[i]
        if s == FWC:
            return False
        if p == PWC:
            continue
        if s == PWC or s != p:
            return False
    return len(st) == len(pt)


def matches_any(subject: str, filters: list[str] | tuple[str, ...]) -> bool:
    return any(subject_matches(subject, f) for f in filters)
