"""Errors cross msgpack-only wires as documents and come back as the same typed error."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet import errors
from rayjet.errors.documents import from_document, to_document
from rayjet.errors.table import ERRORS


def _through_msgpack(err):
    return from_document(msgpack.unpackb(msgpack.packb(to_document(err)), raw=False))


def test_class_code_description_and_fields_survive():
    err = errors.NotLeaderError("replica r0 is not the leader", group="G", leader="r1",
                                outcome_unknown=True)
    back = _through_msgpack(err)
    assert type(back) is errors.NotLeaderError
    assert (back.code, back.err_code, back.description, back.hint) == (
        err.code, err.err_code, err.description, err.hint)
    assert back.fields == {"group": "G", "leader": "r1", "outcome_unknown": True}
    with pytest.raises(errors.NotLeaderError):
        raise back


def test_fields_msgpack_cannot_carry_are_left_out_and_other_exceptions_are_server_errors():
    err = errors.BadRequestError("bad", thing=object(), n=3)
    assert _through_msgpack(err).fields == {"n": 3}
    back = _through_msgpack(ValueError("boom"))
    assert isinstance(back, errors.ServerError) and "ValueError: boom" in back.description


def test_a_document_naming_no_known_class_falls_back_to_its_err_code():
    doc = to_document(errors.error_for("STREAM_NOT_FOUND"))
    doc["type"] = "SomethingNewer"
    back = from_document(doc)
    assert back.err_code == doc["err_code"] and isinstance(back, errors.APIError)


@settings(max_examples=200, deadline=None)
@given(spec=st.sampled_from(sorted(ERRORS)), description=st.text(max_size=40),
       leader=st.none() | st.text(max_size=8))
def test_every_table_error_round_trips(spec, description, leader):
    err = errors.error_for(spec, description or None, leader=leader)
    back = _through_msgpack(err)
    assert type(back) is type(err)
    assert (back.spec, back.code, back.err_code, back.description, back.fields) == (
        err.spec, err.code, err.err_code, err.description, err.fields)


@settings(max_examples=200, deadline=None)
@given(doc=st.dictionaries(st.sampled_from(["type", "spec", "code", "err_code",
                                            "description", "hint", "fields"]),
                           st.none() | st.integers(-5, 20000) | st.text(max_size=10)
                           | st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)))
def test_any_document_becomes_some_api_error(doc):
    assert isinstance(from_document(doc), errors.APIError)
