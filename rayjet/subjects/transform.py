"""Subject transforms (NATS 2.10 subject mapping).

A transform has a *source* filter and a *destination* template. A literal subject matching the
source is rewritten by the destination, token by token: literal tokens are copied, ``$n`` and
``{{wildcard(n)}}`` insert the token matched by the n-th ``*`` of the source, and the mapping
functions below derive tokens from it. A trailing ``>`` carries over the tokens matched by the
source's ``>``.

Destination functions (names are case-insensitive at word starts, e.g. ``SplitFromLeft``):

- ``{{wildcard(n)}}`` / ``$n``: the n-th wildcard token
- ``{{partition(p, n...)}}``: ``fnv1a32(tokens n... concatenated) % p``; with only ``p``, the
  hash of the whole subject
- ``{{split(n, d)}}``: split the token on delimiter ``d``, dropping empty parts
- ``{{splitfromleft(n, k)}}`` / ``{{splitfromright(n, k)}}``: one split k characters from an end
- ``{{slicefromleft(n, k)}}`` / ``{{slicefromright(n, k)}}``: cut into k-character pieces
- ``{{left(n, k)}}`` / ``{{right(n, k)}}``: the first / last k characters
- ``{{random(p)}}``: a number in ``[0, p)`` drawn from the transform's ``rng``; pass a seeded
  ``random.Random`` (and apply the transform once, before replication) to stay deterministic

Errors are raised as nats-server reports them on a stream: 10155 for the source, 10156 for the
destination.
"""

from __future__ import annotations

import random as _random
import re
from collections.abc import Iterable, Mapping
from typing import Any

from rayjet.errors import ERRORS, APIError, InvalidSubjectError, error_for
from rayjet.subjects.match import (
    _WHITESPACE,
    FWC,
    PWC,
    SEP,
    _problem,
    is_subset,
    subjects_collide,
)

__all__ = [
    "SubjectTransform",
    "apply_transforms",
    "partition_number",
    "validate_transforms",
]

_MAX_INT32 = 2**31 - 1
_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193

# destination token kinds
_LITERAL = "literal"
_WILDCARD = "wildcard"
_PARTITION = "partition"
_SPLIT = "split"
_SPLIT_LEFT = "splitFromLeft"
_SPLIT_RIGHT = "splitFromRight"
_SLICE_LEFT = "sliceFromLeft"
_SLICE_RIGHT = "sliceFromRight"
_LEFT = "left"
_RIGHT = "right"
_RANDOM = "random"

_FUNCTION_NAMES = (
    _WILDCARD, _PARTITION, _SPLIT_LEFT, _SPLIT_RIGHT, _SLICE_LEFT, _SLICE_RIGHT,
    _SPLIT, _LEFT, _RIGHT, _RANDOM,
)


def _name_pattern(name: str) -> re.Pattern[str]:
    # nats-server accepts either case for the first letter of each word: 'splitFromLeft',
    # 'SplitFromLeft' and 'splitfromleft', but not 'SPLITFROMLEFT'
    parts = [
        f"[{ch.lower()}{ch.upper()}]" if i == 0 or ch.isupper() else re.escape(ch)
        for i, ch in enumerate(name)
    ]
    return re.compile("".join(parts))


_NAMES = {name: _name_pattern(name) for name in _FUNCTION_NAMES}
_MUSTACHE = re.compile(r"\{\{\s*([A-Za-z]+)\s*\((.*)\)\s*\}\}", re.DOTALL)
_DOLLAR = re.compile(r"\$([+-]?[0-9]+)")
_INT = re.compile(r"[+-]?[0-9]+")
_USAGE = (
    "use $n, {{wildcard(n)}}, {{partition(p,n...)}}, {{split(n,d)}}, {{splitfromleft(n,k)}}, "
    "{{splitfromright(n,k)}}, {{slicefromleft(n,k)}}, {{slicefromright(n,k)}}, {{left(n,k)}}, "
    "{{right(n,k)}} or {{random(p)}}"
)


def _fnv1a32(data: bytes) -> int:
    h = _FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return h


def partition_number(key: str, partitions: int) -> int:
    """The partition nats-server's ``{{partition}}`` gives ``key``: FNV-1a 32 of its UTF-8 bytes."""
    if partitions <= 0:
        return 0
    return _fnv1a32(key.encode()) % partitions


def _source_error(err: str) -> APIError:
    return error_for("STREAM_TRANSFORM_INVALID_SOURCE", err=err)


def _dest_error(err: str) -> APIError:
    return error_for("STREAM_TRANSFORM_INVALID_DESTINATION", err=err)


def _parse_int(token: str, arg: str, what: str, *, low: int, high: int = _MAX_INT32) -> int:
    text = arg.strip()
    if not _INT.fullmatch(text):
        raise _dest_error(f"invalid mapping destination {token!r}: {what} must be an integer, "
                          f"got {text!r}")
    value = int(text)
    if not low <= value <= high:
        raise _dest_error(f"invalid mapping destination {token!r}: {what} must be between "
                          f"{low} and {high}, got {value}")
    return value


def _parse_function(token: str) -> tuple[str, list[str]] | None:
    """``(name, args)`` for a ``{{...}}`` token, None for a literal token."""
    if not (len(token) > 4 and token.startswith("{{") and token.endswith("}}")):
        return None
    m = _MUSTACHE.fullmatch(token)
    name = None
    if m:
        name = next((n for n, pat in _NAMES.items() if pat.fullmatch(m.group(1))), None)
    if name is None:
        raise _dest_error(f"invalid mapping destination {token!r}: unknown mapping function; "
                          f"{_USAGE}")
    raw = m.group(2)  # type: ignore[union-attr]
    args = [a.lstrip() for a in raw.split(",")]
    return name, args


class _Op:
    """One destination token: a literal or a function of source tokens."""

    __slots__ = ("kind", "positions", "number", "text")

    def __init__(self, kind: str, positions: tuple[int, ...] = (), number: int = -1,
                 text: str = "") -> None:
        self.kind = kind
        self.positions = positions  # indexes into the tokens of the subject
        self.number = number
        self.text = text


class SubjectTransform:
    """A validated subject transform from ``source`` (a filter) to ``destination``.

    ``source=""`` means ``>``; ``destination=""`` keeps matching subjects unchanged (a pure
    filter, as for stream sources). Invalid configurations raise ``APIError`` 10155 (source) or
    10156 (destination) naming what is wrong.
    """

    __slots__ = ("source", "destination", "_stoks", "_ops", "_fwc", "_identity", "_rng",
                 "uses_random")

    def __init__(self, source: str, destination: str, *,
                 rng: _random.Random | None = None) -> None:
        if not isinstance(source, str):
            raise _source_error(f"the source must be a string, not {type(source).__name__}")
        if not isinstance(destination, str):
            raise _dest_error(
                f"the destination must be a string, not {type(destination).__name__}")
        source = source or FWC
        problem = _problem(source, wildcards=True)
        if problem:
            raise _source_error(f"invalid subject {source!r}: {problem}")
        self.source = source
        self.destination = destination
        self._stoks = tuple(source.split(SEP))
        self._fwc = self._stoks[-1] == FWC
        self._rng = rng
        self.uses_random = False
        self._ops: tuple[_Op, ...] = ()
        self._identity = destination == "" or (source == FWC and destination == FWC)
        if destination:
            self._ops = self._compile(destination)

    # -- construction ---------------------------------------------------------------------
    def _compile(self, dest: str) -> tuple[_Op, ...]:
        dtoks = dest.split(SEP)
        for i, tok in enumerate(dtoks):
            if not tok:
                raise _dest_error(f"invalid mapping destination {dest!r}: empty token "
                                  "(no leading, trailing or double '.')")
            if tok == FWC and i != len(dtoks) - 1:
                raise _dest_error(f"invalid mapping destination {dest!r}: '>' may only be the "
                                  "last token")
            if tok == PWC:
                raise _dest_error(f"invalid mapping destination {dest!r}: '*' is not allowed in "
                                  "a destination; refer to the source wildcards with $n or "
                                  "{{wildcard(n)}}")
            is_function = len(tok) > 4 and tok.startswith("{{") and tok.endswith("}}")
            if not is_function and not _WHITESPACE.isdisjoint(tok):
                raise _dest_error(f"invalid mapping destination {dest!r}: token {tok!r} "
                                  "contains whitespace")
        dest_fwc = dtoks[-1] == FWC
        if dest_fwc != self._fwc:
            if self._fwc:
                why = f"must end with '>' because the source {self.source!r} does"
            else:
                why = f"can only use '>' when the source ends with '>' ({self.source!r} does not)"
            raise _dest_error(f"invalid mapping destination {dest!r}: it {why}")

        # wildcard n (1-based) -> its position in the source tokens
        wildcard_pos = [i for i, t in enumerate(self._stoks) if t == PWC]
        has_wildcards = bool(wildcard_pos) or self._fwc
        ops = []
        for tok in dtoks[:-1] if dest_fwc else dtoks:
            ops.append(self._compile_token(tok, wildcard_pos, has_wildcards))
        return tuple(ops)

    def _position(self, token: str, arg: str, wildcard_pos: list[int],
                  has_wildcards: bool) -> int:
        n = _parse_int(token, arg, "a wildcard index", low=0, high=2**63)
        if n > len(wildcard_pos) or not has_wildcards:
            have = len(wildcard_pos)
            raise _dest_error(
                f"invalid mapping destination {token!r}: wildcard index {n} is out of range, the "
                f"source {self.source!r} has {have} '*' wildcard{'s' if have != 1 else ''}")
        # as in nats-server, index 0 designates the first token of the subject
        return wildcard_pos[n - 1] if n > 0 else 0

    def _compile_token(self, tok: str, wildcard_pos: list[int], has_wildcards: bool) -> _Op:
        m = _DOLLAR.fullmatch(tok)
        if m:
            return _Op(_WILDCARD, (self._position(tok, m.group(1), wildcard_pos,
                                                  has_wildcards),))
        parsed = _parse_function(tok)
        if parsed is None:
            return _Op(_LITERAL, text=tok)  # includes '$foo': other features rely on '$' tokens
        name, args = parsed

        def need(count: int) -> None:
            if len(args) < count or (count and args == [""]):
                raise _dest_error(f"invalid mapping destination {tok!r}: not enough arguments, "
                                  f"{name} takes {count}")
            if len(args) > count:
                raise _dest_error(f"invalid mapping destination {tok!r}: too many arguments, "
                                  f"{name} takes {count}")

        if name == _WILDCARD:
            need(1)
            return _Op(_WILDCARD, (self._position(tok, args[0], wildcard_pos, has_wildcards),))
        if name == _RANDOM:
            need(1)
            self.uses_random = True
            return _Op(_RANDOM, number=_parse_int(tok, args[0], "the number of values", low=0))
        if name == _PARTITION:
            if args == [""]:
                raise _dest_error(f"invalid mapping destination {tok!r}: not enough arguments, "
                                  "partition takes the number of partitions and optional "
                                  "wildcard indexes")
            count = _parse_int(tok, args[0], "the number of partitions", low=0)
            if not has_wildcards:
                # nats-server hashes the whole subject when the source has no wildcards
                return _Op(_PARTITION, (), count)
            positions = tuple(self._position(tok, a, wildcard_pos, has_wildcards)
                              for a in args[1:])
            return _Op(_PARTITION, positions, count)
        if not has_wildcards:
            raise _dest_error(f"invalid mapping destination {tok!r}: {name} needs a wildcard, "
                              f"and the source {self.source!r} has none")
        need(2)
        position = self._position(tok, args[0], wildcard_pos, has_wildcards)
        if name == _SPLIT:
            delim = args[1]
            if not delim or SEP in delim or not _WHITESPACE.isdisjoint(delim):
                raise _dest_error(f"invalid mapping destination {tok!r}: the split delimiter "
                                  "must be non-empty, without '.' or whitespace")
            return _Op(_SPLIT, (position,), text=delim)
        size = _parse_int(tok, args[1], "the size", low=-_MAX_INT32 - 1)
        return _Op(name, (position,), size)

    # -- use ------------------------------------------------------------------------------
    def _matches(self, toks: list[str]) -> bool:
        stoks = self._stoks
        n = len(toks)
        for i, s in enumerate(stoks):
            if s == FWC:
                return n > i
            if i >= n:
                return False
            if s != PWC and s != toks[i]:
                return False
        return n == len(stoks)

    def match(self, subject: str) -> str | None:
        """The transformed subject, or None when ``subject`` does not match the source.

        Raises ``InvalidSubjectError`` when ``subject`` is not a literal subject.
        """
        toks = subject.split(SEP) if isinstance(subject, str) else None
        if not toks or any(not t or t == PWC or t == FWC for t in toks):
            raise InvalidSubjectError(
                f"invalid subject {subject!r}: a transform applies to literal subjects "
                "(non-empty tokens, no '*' or '>')")
        if not self._matches(toks):
            return None
        if self._identity:
            return subject
        return self._apply(toks)

    def transform(self, subject: str) -> str:
        """The transformed subject; raises ``InvalidSubjectError`` when it does not match."""
        out = self.match(subject)
        if out is None:
            raise InvalidSubjectError(
                f"subject {subject!r} does not match the transform source {self.source!r}")
        return out

    def _apply(self, toks: list[str]) -> str:
        out: list[str] = []
        for op in self._ops:
            kind = op.kind
            if kind == _LITERAL:
                out.append(op.text)
            elif kind == _WILDCARD:
                out.append(toks[op.positions[0]])
            elif kind == _PARTITION:
                # selected tokens are concatenated without separator, as nats-server hashes them
                key = "".join(toks[p] for p in op.positions) if op.positions else SEP.join(toks)
                out.append(str(partition_number(key, op.number)))
            elif kind == _RANDOM:
                if op.number <= 0:
                    out.append("0")
                else:
                    rng = self._rng if self._rng is not None else _random
                    out.append(str(rng.randrange(op.number)))
            else:
                out.append(_apply_function(kind, toks[op.positions[0]], op))
        if self._fwc:  # the destination ends with '>' too (checked when built)
            out.extend(toks[len(self._stoks) - 1:])
        return SEP.join(out)

    # -- value semantics ------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SubjectTransform):
            return NotImplemented
        return (self.source, self.destination) == (other.source, other.destination)

    def __hash__(self) -> int:
        return hash((self.source, self.destination))

    def __repr__(self) -> str:
        return f"SubjectTransform({self.source!r}, {self.destination!r})"


def _apply_function(kind: str, token: str, op: _Op) -> str:
    n = len(token)
    k = op.number
    if kind == _SPLIT:
        parts = [p for p in token.split(op.text) if p]
        # a token made only of delimiters would leave an empty token: keep it as is
        return SEP.join(parts) if parts else token
    if not 0 < k < n:
        return token  # too short to cut at k: unchanged, as in nats-server
    if kind == _SPLIT_LEFT:
        return f"{token[:k]}{SEP}{token[k:]}"
    if kind == _SPLIT_RIGHT:
        return f"{token[:n - k]}{SEP}{token[n - k:]}"
    if kind == _SLICE_LEFT:
        return SEP.join(token[i:i + k] for i in range(0, n, k))
    if kind == _SLICE_RIGHT:
        head = n % k
        pieces = [token[:head]] if head else []
        pieces.extend(token[i:i + k] for i in range(head, n, k))
        return SEP.join(pieces)
    if kind == _LEFT:
        return token[:k]
    if kind == _RIGHT:
        return token[n - k:]
    raise AssertionError(kind)  # pragma: no cover - every kind is handled above


# -- lists of transforms (stream sources and mirrors) ----------------------------------------
_SPECS = {
    # (invalid source, invalid destination, overlapping sources); rows missing from the error
    # table fall back to the stream transform errors
    "stream": ("STREAM_TRANSFORM_INVALID_SOURCE", "STREAM_TRANSFORM_INVALID_DESTINATION", None),
    "source": ("SOURCE_INVALID_SUBJECT_FILTER", "SOURCE_INVALID_TRANSFORM_DESTINATION",
               "SOURCE_OVERLAPPING_FILTERS"),
    "mirror": ("MIRROR_INVALID_SUBJECT_FILTER", "MIRROR_INVALID_TRANSFORM_DESTINATION",
               "MIRROR_OVERLAPPING_FILTERS"),
}


def _pair(item: Any) -> tuple[str, str]:
    if isinstance(item, SubjectTransform):
        return item.source, item.destination
    if isinstance(item, Mapping):
        src = item.get("src", item.get("source", ""))
        dest = item.get("dest", item.get("destination", ""))
        return src or "", dest or ""
    if isinstance(item, tuple | list) and len(item) == 2:
        return item[0] or "", item[1] or ""
    for s_attr, d_attr in (("source", "destination"), ("src", "dest")):
        if hasattr(item, s_attr) and hasattr(item, d_attr):
            return getattr(item, s_attr) or "", getattr(item, d_attr) or ""
    raise TypeError(f"not a subject transform: {item!r} (expected (source, destination), a "
                    "mapping with 'src'/'dest' or an object with source/destination)")


def _reraise(err: APIError, spec: str) -> APIError:
    if spec not in ERRORS or err.spec == spec:
        return err
    return error_for(spec, err=err.fields.get("err", err.description))


def validate_transforms(transforms: Iterable[Any], *,
                        origin: str = "source") -> list[SubjectTransform]:
    """Build and check the subject transforms of a stream source or mirror.

    ``transforms`` holds ``(source, destination)`` pairs, ``{"src", "dest"}`` mappings or
    objects with ``source``/``destination`` (or ``src``/``dest``). Each must be valid and no
    two sources may overlap: for a mirror no subject may match two sources; for a source
    neither source may contain the other (nats-server's rules). Raises the first problem.
    """
    if origin not in _SPECS:
        raise ValueError(f"origin must be one of {sorted(_SPECS)}, not {origin!r}")
    src_spec, dest_spec, overlap_spec = _SPECS[origin]
    built: list[SubjectTransform] = []
    for item in transforms:
        source, destination = _pair(item)
        try:
            built.append(SubjectTransform(source, destination))
        except APIError as err:
            bad_source = err.spec == "STREAM_TRANSFORM_INVALID_SOURCE"
            raise _reraise(err, src_spec if bad_source else dest_spec) from None
    for i, a in enumerate(built):
        for b in built[i + 1:]:
            if origin == "mirror":
                clash = subjects_collide(a.source, b.source)
            else:
                clash = is_subset(a.source, b.source) or is_subset(b.source, a.source)
            if clash:
                what = f"transform sources {a.source!r} and {b.source!r} overlap"
                if overlap_spec and overlap_spec in ERRORS:
                    raise error_for(overlap_spec, f"{ERRORS[overlap_spec].description}: {what}")
                raise _dest_error(what)
    return built


def apply_transforms(transforms: Iterable[SubjectTransform], subject: str) -> str | None:
    """The subject given by the first transform whose source matches, or None."""
    for tr in transforms:
        out = tr.match(subject)
        if out is not None:
            return out
    return None
