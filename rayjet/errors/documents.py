"""Typed errors as plain documents and back, for wires that carry msgpack only.

``to_document(err)`` keeps what a caller acts on: the exception's class (by name, among
rayjet's error classes), its table row (``spec``), ``code``, ``err_code``, ``description``,
``hint`` and its ``fields`` (a leader hint, ``outcome_unknown``; fields msgpack could not
carry are left out). ``from_document(doc)`` rebuilds the same class with the same state;
a document naming no known class becomes the error its ``err_code`` or ``code`` names
(:func:`rayjet.errors.from_wire`). Anything that is not an APIError travels as a server
error carrying its text.
"""

from __future__ import annotations

from typing import Any

from rayjet.errors.exceptions import (
    APIError,
    ServerError,
    error_classes,
    from_wire,
    rebuild_error,
)
from rayjet.errors.table import ERRORS

_PLAIN = (type(None), bool, int, float, str, bytes)


def _plain(value: Any, depth: int = 0) -> bool:
    if isinstance(value, _PLAIN):
        return not isinstance(value, int) or -2**63 <= value < 2**64
    if depth > 4:
        return False
    if isinstance(value, list | tuple):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def to_document(err: BaseException) -> dict[str, Any]:
    if not isinstance(err, APIError):
        err = ServerError(f"{type(err).__name__}: {err}")
    return {"type": type(err).__name__, "spec": err.spec, "code": err.code,
            "err_code": err.err_code, "description": err.description, "hint": err.hint,
            "fields": {k: v for k, v in err.fields.items() if _plain(v)}}


def _fallback(doc: dict[str, Any]) -> APIError:
    try:
        return from_wire(doc)
    except (TypeError, ValueError):  # a document from nobody rayjet knows
        return ServerError(f"an error answer rayjet cannot read: {str(doc)[:200]}")


def from_document(doc: dict[str, Any]) -> APIError:
    kind, spec, fields = doc.get("type"), doc.get("spec"), doc.get("fields")
    cls = {c.__name__: c for c in error_classes()}.get(kind) if isinstance(kind, str) else None
    if (cls is None or not isinstance(spec, str) or spec not in ERRORS
            or not isinstance(fields, dict)):
        return _fallback(doc)
    try:
        state = {"spec": spec, "code": int(doc["code"]), "err_code": int(doc["err_code"]),
                 "description": str(doc["description"]),
                 "hint": None if doc.get("hint") is None else str(doc["hint"]),
                 "fields": dict(fields)}
    except (KeyError, TypeError, ValueError):
        return _fallback(doc)
    return rebuild_error(cls, state)
