from datetime import UTC, datetime, timedelta, timezone

import pytest

from rayjet.api import (
    format_duration,
    from_ns,
    parse_duration,
    parse_rfc3339,
    parse_ttl,
    to_ns,
    to_rfc3339,
)
from rayjet.api.duration import as_datetime, as_seconds
from rayjet.errors import InvalidConfigError, MessageTTLInvalidError


def test_ns_round_trip():
    assert to_ns(1.5) == 1_500_000_000
    assert to_ns(None) is None
    assert from_ns(120_000_000_000) == 120.0
    for ns in (1, 999, 123_456_789, 3_600_000_000_000, 31_536_000_000_000_000):
        assert to_ns(from_ns(ns)) == ns


@pytest.mark.parametrize("text, seconds", [
    ("10s", 10.0), ("1m", 60.0), ("1h30m", 5400.0), ("250ms", 0.25), ("1.5s", 1.5),
    ("100us", 1e-4), ("0", 0.0), ("-2s", -2.0), ("2h45m10.5s", 9910.5),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "s", "1x", "1.2.3s", "1s "])
def test_parse_duration_rejects(text):
    if text == "1s ":  # surrounding space is tolerated
        assert parse_duration(text) == 1.0
        return
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_duration():
    assert format_duration(120) == "2m"
    assert format_duration(0.1) == "100ms"
    assert format_duration(0) == "0s"


@pytest.mark.parametrize("value, seconds", [
    ("never", -1), ("NEVER", -1), ("10s", 10), ("1m", 60), ("5", 5), ("1h", 3600),
])
def test_parse_ttl(value, seconds):
    assert parse_ttl(value) == seconds


@pytest.mark.parametrize("value", ["500ms", "abc", "-5", "1.5", "", "0"])
def test_parse_ttl_rejects(value):
    with pytest.raises(MessageTTLInvalidError) as exc:
        parse_ttl(value)
    assert exc.value.err_code == 10165


def test_as_seconds_forms():
    assert as_seconds(3, field="x") == 3.0
    assert as_seconds(timedelta(minutes=2), field="x") == 120.0
    assert as_seconds("2m", field="x") == 120.0
    assert as_seconds(None, field="x") is None
    for bad in (True, "soon", [1]):
        with pytest.raises(InvalidConfigError):
            as_seconds(bad, field="x")


def test_rfc3339():
    dt = parse_rfc3339("2024-03-01T10:00:00.123456789Z")
    assert dt == datetime(2024, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)
    assert parse_rfc3339("2024-03-01T12:00:00+02:00") == datetime(2024, 3, 1, 10, tzinfo=UTC)
    assert parse_rfc3339("0001-01-01T00:00:00Z") is None  # Go's zero time
    assert to_rfc3339(datetime(2024, 3, 1, 10, 0, 0, 500000, tzinfo=UTC)) == \
        "2024-03-01T10:00:00.5Z"
    east = timezone(timedelta(hours=2))
    assert to_rfc3339(datetime(2024, 3, 1, 12, tzinfo=east)) == "2024-03-01T10:00:00Z"
    with pytest.raises(InvalidConfigError):
        parse_rfc3339("yesterday")


def test_naive_datetime_is_utc():
    assert as_datetime(datetime(2024, 1, 1), field="t").tzinfo is UTC
