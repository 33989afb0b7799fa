"""The ``from_dict``/``to_dict`` machinery shared by every config and info type.

Each dataclass field says how it travels on the wire through :func:`wire_field`: its NATS
JSON name (when it differs from the Python name) and its kind (duration, timestamp, enum,
nested type, list...). :class:`Wire` then converts in both directions and normalises values
given to the constructor: lists become tuples and dicts become :class:`FrozenDict`, so the
frozen dataclasses stay hashable; enum members may be given as their wire strings; durations
as seconds, ``timedelta`` or ``"10s"``.

Unknown JSON fields: ``from_dict`` ignores them, as nats-server's own decoder does, so JSON
from a newer server (or a hand-written definition with extra keys) loads; pass
``strict=True`` to get an ``InvalidConfigError`` naming them instead.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Container, Mapping
from enum import Enum
from functools import cache
from typing import Any, TypeVar

from rayjet.api.duration import as_datetime, as_seconds, from_ns, to_ns, to_rfc3339
from rayjet.errors import InvalidConfigError

PLAIN = "plain"
DURATION = "duration"  # float seconds <-> int ns
DURATIONS = "durations"  # tuple of durations <-> list of ns
TIME = "time"  # aware datetime <-> RFC 3339
ENUM = "enum"
OBJ = "obj"  # a nested Wire type
OBJS = "objs"  # a tuple of a nested Wire type
STRS = "strs"  # tuple of str <-> list
INTS = "ints"  # tuple of int <-> list
MAP = "map"  # FrozenDict <-> object
BYTES = "bytes"  # bytes <-> base64 string
HEADERS = "headers"  # {name: value} <-> {name: [value, ...]} (Go's http.Header shape)


class FrozenDict(dict):
    """A read-only, hashable dict (equal to plain dicts with the same items)."""

    __slots__ = ()

    def _readonly(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("this mapping is read-only; build a new one and use dataclasses.replace")

    __setitem__ = __delitem__ = _readonly  # type: ignore[assignment]
    update = pop = popitem = clear = setdefault = _readonly  # type: ignore[assignment]
    __ior__ = _readonly  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self):
        return (FrozenDict, (dict(self),))

    def __repr__(self) -> str:
        return dict.__repr__(self)

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict) -> FrozenDict:
        return self


def wire_field(
    default: Any = dataclasses.MISSING,
    *,
    kind: str = PLAIN,
    wire: str | None = None,
    type_: Any = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field with its wire name and kind in ``metadata``."""
    meta = {"kind": kind, "wire": wire, "type": type_}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldInfo:
    name: str
    wire: str
    kind: str
    type_: Any
    default: Any


@cache
def _fields(cls: type) -> tuple[_FieldInfo, ...]:
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        out.append(_FieldInfo(f.name, meta.get("wire") or f.name, meta.get("kind", PLAIN),
                              meta.get("type"), default))
    return tuple(out)


@cache
def _normalised_fields(cls: type) -> tuple[_FieldInfo, ...]:
    """The fields :func:`_normalise` may change: a plain one is kept as given."""
    return tuple(f for f in _fields(cls) if f.kind != PLAIN)


W = TypeVar("W", bound="Wire")


class Wire:
    """Mixin for frozen dataclasses that travel as NATS JSON."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for info in _normalised_fields(type(self)):
            value = getattr(self, info.name)
            new = _normalise(info, value)
            if new is not value:
                object.__setattr__(self, info.name, new)

    # -- wire ------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls: type[W], data: Mapping[str, Any], *, strict: bool = False) -> W:
        """Build from NATS JSON (wire names, ns durations, RFC 3339 times)."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise InvalidConfigError(
                f"{cls.__name__} needs a JSON object (a dict), not {type(data).__name__}")
        kwargs: dict[str, Any] = {}
        known: set[str] = set()
        for info in _fields(cls):
            known.add(info.wire)
            known.add(info.name)
            if info.wire in data:
                raw = data[info.wire]
            elif info.name in data:
                raw = data[info.name]
            else:
                continue
            kwargs[info.name] = _decode(info, raw, strict)
        if strict:
            unknown = sorted(k for k in data if k not in known)
            if unknown:
                raise InvalidConfigError(
                    f"unknown {cls.__name__} field(s) {', '.join(map(repr, unknown))}: "
                    "check the spelling against the NATS JSON field names")
        try:
            return cls(**kwargs)
        except TypeError as exc:  # a required field is missing
            raise InvalidConfigError(f"incomplete {cls.__name__}: {exc}") from None

    def to_dict(self, omit: Container[str] = ()) -> dict[str, Any]:
        """NATS JSON: wire names, ns durations, RFC 3339 times; unset fields are left out,
        and those named in ``omit``."""
        out: dict[str, Any] = {}
        for info in _fields(type(self)):
            if info.name in omit:
                continue
            value = getattr(self, info.name)
            if value is None:
                continue
            if isinstance(value, tuple | dict) and not value:
                continue  # Go's omitempty
            # a plain value is written as it is (most fields: spared the call)
            out[info.wire] = value if info.kind == PLAIN else _encode(info, value)
        return out


# -- conversions ------------------------------------------------------------------------------
def _normalise(info: _FieldInfo, value: Any) -> Any:
    kind = info.kind
    if value is None:
        return None
    if kind == DURATION:
        return as_seconds(value, field=info.name)
    if kind == TIME:
        return as_datetime(value, field=info.name)
    if kind == ENUM:
        if value == "" and isinstance(info.default, Enum):
            return info.default
        return info.type_.parse(value, field=info.name)
    if kind == OBJ:
        if isinstance(value, info.type_):
            return value
        if isinstance(value, Mapping):
            try:
                return info.type_(**value)
            except TypeError as exc:
                raise InvalidConfigError(
                    f"{info.name}: {exc}; give the fields of {info.type_.__name__} by their "
                    "Python names") from None
        raise InvalidConfigError(
            f"{info.name} must be a {info.type_.__name__} (or a dict of its fields), "
            f"not {type(value).__name__}")
    if kind in (OBJS, STRS, INTS, DURATIONS):
        if isinstance(value, str | bytes) or not _iterable(value):
            raise InvalidConfigError(f"{info.name} must be a list, not {value!r}")
        items = tuple(value)
        if kind == OBJS:
            items = tuple(v if isinstance(v, info.type_) else _normalise(
                _FieldInfo(info.name, info.wire, OBJ, info.type_, None), v) for v in items)
        elif kind == DURATIONS:
            items = tuple(as_seconds(v, field=info.name) for v in items)
        if isinstance(value, tuple) and all(a is b for a, b in zip(items, value)):
            return value
        return items
    if kind in (MAP, HEADERS):
        if isinstance(value, FrozenDict):
            return value
        if not isinstance(value, Mapping):
            raise InvalidConfigError(f"{info.name} must be a mapping, not {type(value).__name__}")
        return FrozenDict(value)
    if kind == BYTES:
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        return value
    return value


def _iterable(value: Any) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


def _decode(info: _FieldInfo, raw: Any, strict: bool) -> Any:
    kind = info.kind
    if raw is None:
        return None
    if kind == DURATION:
        return from_ns(raw) if isinstance(raw, int | float) else raw
    if kind == DURATIONS:
        return tuple(from_ns(v) if isinstance(v, int | float) else v for v in raw)
    if kind == OBJ:
        return info.type_.from_dict(raw, strict=strict)
    if kind == OBJS:
        return tuple(info.type_.from_dict(v, strict=strict) for v in raw)
    if kind == BYTES:
        if isinstance(raw, str):
            return base64.b64decode(raw)
        return raw
    if kind == HEADERS:
        # Go sends {name: [values]}; rayjet keeps the last value of each name
        out = {}
        for key, value in raw.items():
            if isinstance(value, list):
                value = value[-1] if value else ""
            out[key] = value
        return out
    return raw


def _encode(info: _FieldInfo, value: Any) -> Any:
    kind = info.kind
    if kind == DURATION:
        return to_ns(value)
    if kind == DURATIONS:
        return [to_ns(v) for v in value]
    if kind == TIME:
        return to_rfc3339(value)
    if kind == ENUM:
        return value.value
    if kind == OBJ:
        return value.to_dict()
    if kind == OBJS:
        return [v.to_dict() for v in value]
    if kind in (STRS, INTS):
        return list(value)
    if kind == MAP:
        return dict(value)
    if kind == HEADERS:
        return {k: [v] for k, v in value.items()}
    if kind == BYTES:
        return base64.b64encode(value).decode("ascii")
    return value
