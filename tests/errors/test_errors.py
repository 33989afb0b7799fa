import pickle

import pytest

from rayjet import errors
from rayjet.errors import (
    ERRORS,
    APIError,
    BadRequestError,
    ConsumerNotFoundError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyValueError,
    KeyWrongLastSequenceError,
    NoMessagesError,
    NotFoundError,
    StreamNotFoundError,
    error_for,
    from_wire,
)

# err_code numbers nats-server uses; clients match on them, so they must never drift
NATS_CODES = {
    "STREAM_NAME_EXISTS": 10058,
    "STREAM_NOT_FOUND": 10059,
    "CONSUMER_NOT_FOUND": 10014,
    "NO_MESSAGE_FOUND": 10037,
    "STREAM_SUBJECT_OVERLAP": 10065,
    "STREAM_WRONG_LAST_SEQUENCE": 10071,
    "STREAM_WRONG_LAST_MSG_ID": 10070,
    "STREAM_NOT_MATCH": 10060,
    "STREAM_INVALID_CONFIG": 10052,
    "STREAM_STORE_FAILED": 10077,
    "STREAM_MSG_TOO_BIG": 10054,
    "STREAM_SEALED": 10109,
    "STREAM_ROLLUP_FAILED": 10111,
    "CONSUMER_ALREADY_EXISTS": 10148,
    "CONSUMER_DOES_NOT_EXIST": 10149,
    "CONSUMER_WQ_REQUIRES_EXPLICIT_ACK": 10098,
    "CONSUMER_WQ_MULTIPLE_UNFILTERED": 10099,
    "CONSUMER_WQ_NOT_UNIQUE": 10100,
    "CONSUMER_WQ_NOT_DELIVER_ALL": 10101,
    "STREAM_DUPLICATE_IN_PROCESS": 10158,
    "MESSAGE_TTL_INVALID": 10165,
    "MESSAGE_TTL_DISABLED": 10166,
}


@pytest.mark.parametrize(("name", "err_code"), sorted(NATS_CODES.items()))
def test_table_carries_nats_err_codes(name, err_code):
    assert ERRORS[name].err_code == err_code
    assert error_for(name).err_code == err_code


def test_every_row_says_how_to_fix():
    for row in ERRORS.values():
        assert row.hint, f"{row.name} has no hint"
        assert row.description


def test_typed_classes_from_table():
    assert isinstance(error_for("STREAM_NOT_FOUND"), StreamNotFoundError)
    assert isinstance(error_for("STREAM_NOT_FOUND"), NotFoundError)
    assert isinstance(error_for("CONSUMER_NOT_FOUND"), ConsumerNotFoundError)
    # a row without its own class falls back to the family of its HTTP-like code
    assert type(error_for("CONSUMER_WQ_NOT_UNIQUE")) is BadRequestError


def test_description_fields_and_str():
    err = error_for("STREAM_WRONG_LAST_SEQUENCE", seq=41)
    assert err.description == "wrong last sequence: 41"
    text = str(err)
    assert "10071" in text and "read it again" in text


def test_missing_field_leaves_a_clean_sentence():
    assert error_for("STREAM_WRONG_LAST_SEQUENCE").description == "wrong last sequence"


def test_hierarchy_matches_nats_py():
    assert issubclass(KeyNotFoundError, KeyValueError)
    assert issubclass(KeyNotFoundError, NotFoundError)
    assert issubclass(KeyDeletedError, KeyNotFoundError)
    assert issubclass(KeyWrongLastSequenceError, BadRequestError)
    assert issubclass(NoMessagesError, errors.TimeoutError)
    assert issubclass(errors.TimeoutError, TimeoutError)  # the builtin, for plain except clauses


def test_errors_survive_pickling():
    # Ray ships exceptions between processes by pickling them
    err = error_for("STREAM_WRONG_LAST_SEQUENCE", seq=3)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert (back.code, back.err_code, back.description) == (err.code, err.err_code, err.description)


def test_from_wire_picks_the_class_by_err_code():
    err = from_wire({"code": 404, "err_code": 10059, "description": "stream not found"})
    assert isinstance(err, StreamNotFoundError)
    other = from_wire({"code": 503, "err_code": 99999, "description": "odd"})
    assert isinstance(other, errors.ServiceUnavailableError) and other.err_code == 99999


def test_unknown_row_is_a_key_error():
    with pytest.raises(KeyError):
        error_for("NO_SUCH_ERROR")


def test_explicit_description_wins():
    err = StreamNotFoundError("stream 'X' not found")
    assert err.description == "stream 'X' not found" and err.err_code == 10059
    assert isinstance(err, APIError)
