"""Cron patterns of message schedules: the grammar nats-server accepts and the next time it
computes, in UTC and in IANA zones across DST changes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rayjet.engine.cron import (
    STAR,
    CronError,
    cron_next,
    format_in_zone,
    load_zone,
    parse_cron,
    wall_to_unix,
)

NS = 1_000_000_000


def _ns(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp()) * NS


def _bits(values) -> int:
    out = 0
    for v in values:
        out |= 1 << v
    return out


def _run(pattern: str, zone: str | None, start: str, n: int) -> list[str]:
    """The next ``n`` fire times from ``start``, each computed from the previous one, as
    RFC 3339 in the zone (the form of Nats-Schedule-Next)."""
    z = load_zone(zone) if zone else None
    cron, t, out = parse_cron(pattern), _ns(start), []
    for _ in range(n):
        t = cron_next(cron, z, t)
        assert t is not None
        out.append(format_in_zone(t, z))
    return out


# -- grammar -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("pattern", "fields"), [
    ("* * * * * *", (range(60), range(60), range(24), range(1, 32), range(1, 13), range(7))),
    ("0 0 0 1 1 0", ({0}, {0}, {0}, {1}, {1}, {0})),
    ("1,2,,3 5-7 */6 10/10 jan-MAR SUN,sat", ({1, 2, 3}, {5, 6, 7}, {0, 6, 12, 18},
                                              {10, 20, 30}, {1, 2, 3}, {0, 6})),
    ("0-59/15 1-10/3 ? ? Dec ?", ({0, 15, 30, 45}, {1, 4, 7, 10}, range(24), range(1, 32),
                                  {12}, range(7))),
    ("+5 05 *-3 * * mon-fri", ({5}, {5}, range(24), range(1, 32), range(1, 13), range(1, 6))),
    ("0 0 0 * * mon/2", ({0}, {0}, {0}, range(1, 32), range(1, 13), {1, 3, 5})),
    ("  0   0  12  *  *  *  ", ({0}, {0}, {12}, range(1, 32), range(1, 13), range(7))),
])
def test_fields(pattern, fields):
    cron = parse_cron(pattern)
    assert [b & ~STAR for b in cron] == [_bits(f) for f in fields]


def test_star_marks_unrestricted_day_fields_only_without_a_step():
    assert parse_cron("0 0 0 * * 1").dom & STAR and not parse_cron("0 0 0 * * 1").dow & STAR
    assert parse_cron("0 0 0 ? * 1").dom & STAR
    assert parse_cron("0 0 0 */1 * 1").dom & STAR  # step 1 keeps "every day"
    assert not parse_cron("0 0 0 */2 * 1").dom & STAR


def test_predefined_patterns():
    assert parse_cron("@yearly") == parse_cron("@annually") == parse_cron("0 0 0 1 1 *")
    assert parse_cron("@monthly") == parse_cron("0 0 0 1 * *")
    assert parse_cron("@weekly") == parse_cron("0 0 0 * * 0")
    assert parse_cron("@daily") == parse_cron("@midnight") == parse_cron("0 0 0 * * *")
    assert parse_cron("@hourly") == parse_cron("0 0 * * * *")


@pytest.mark.parametrize("pattern", [
    "", "* * * * *", "* * * * * * *", "@DAILY", "@reboot", "@every", "60 * * * * *",
    "* 60 * * * *", "* * 24 * * *", "* * * 0 * *", "* * * 32 * *", "* * * * 0 *",
    "* * * * 13 *", "* * * * * 7", "5-1 * * * * *", "1-2-3 * * * * *", "1/2/3 * * * * *",
    "1/0 * * * * *", "*/0 * * * * *", "/5 * * * * *", "-1 * * * * *", "a * * * * *",
    "1_0 * * * * *", "\u0663 * * * * *", "1/x * * * * *", "* * * * jan/feb *",
    "* * * * * monday", ", * * * * *", "* ,, * * * *", "* * , * * *", "* * * * , *",
    "99999999999999999999 * * * * *",
])
def test_invalid_patterns(pattern):
    with pytest.raises(CronError):
        parse_cron(pattern)


def test_patterns_without_a_time_within_five_years():
    start = _ns("2025-01-01T00:00:00+00:00")
    assert cron_next(parse_cron("0 0 0 30 2 *"), None, start) is None
    assert cron_next(parse_cron("0 0 0 ,, * *"), None, start) is None  # no day matches
    leap = parse_cron("0 0 0 29 2 *")
    assert format_in_zone(cron_next(leap, None, start), None) == "2028-02-29T00:00:00Z"
    assert cron_next(leap, None, _ns("2096-03-01T00:00:00+00:00")) is None  # 2100: no leap


# -- next time -------------------------------------------------------------------------------------
def test_next_second_as_nats_server_tests_it():
    every = parse_cron("* * * * * *")
    now = _ns("2031-05-06T07:08:09+00:00")
    assert cron_next(every, None, now) == now + NS
    assert cron_next(every, None, now + NS - 1) == now + NS  # the earliest next second
    loc = load_zone("Europe/Amsterdam")
    assert format_in_zone(cron_next(every, loc, now), loc) == "2031-05-06T09:08:10+02:00"


@pytest.mark.parametrize(("pattern", "after"), [
    ("@yearly", "2028-01-01T00:00:00Z"), ("@annually", "2028-01-01T00:00:00Z"),
    ("@monthly", "2027-02-01T00:00:00Z"), ("@weekly", "2027-01-10T00:00:00Z"),
    ("@daily", "2027-01-02T00:00:00Z"), ("@midnight", "2027-01-02T00:00:00Z"),
    ("@hourly", "2027-01-01T01:00:00Z"),
])
def test_predefined_next(pattern, after):
    # nats-server's test: from a 1st of January (for @weekly, its first Sunday) the next
    # time is one year / month / week / day / hour later
    start = "2027-01-03T00:00:00+00:00" if pattern == "@weekly" else "2027-01-01T00:00:00+00:00"
    assert _run(pattern, None, start, 1) == [after]


def test_day_of_month_or_day_of_week():
    # both restricted: either matches; one unrestricted: both must
    assert _run("0 0 0 1-7 * mon", None, "2025-01-01T00:00:00+00:00", 3) == [
        "2025-01-02T00:00:00Z", "2025-01-03T00:00:00Z", "2025-01-04T00:00:00Z"]
    assert _run("0 0 0 * * mon", None, "2025-01-01T00:00:00+00:00", 2) == [
        "2025-01-06T00:00:00Z", "2025-01-13T00:00:00Z"]
    assert _run("0 0 0 */2 * mon", None, "2025-01-04T00:00:00+00:00", 3) == [
        "2025-01-05T00:00:00Z", "2025-01-06T00:00:00Z", "2025-01-07T00:00:00Z"]


def test_zone_offsets_and_formats():
    assert _run("*/15 * * * * *", "Asia/Kolkata", "2025-01-01T00:00:00+00:00", 2) == [
        "2025-01-01T05:30:15+05:30", "2025-01-01T05:30:30+05:30"]
    assert _run("0 0 9 * * *", "Europe/London", "2025-01-01T00:00:00+00:00", 1) == [
        "2025-01-01T09:00:00Z"]  # a zero offset is written Z, as Go does
    assert _run("0 0 9 * * *", "America/St_Johns", "2025-07-01T00:00:00+00:00", 1) == [
        "2025-07-01T09:00:00-02:30"]
    assert format_in_zone(1_500_000_000 * NS + 120_000_000, None) \
        == "2017-07-14T02:40:00.12Z"


# DST changes. nats-server walks days and months through the calendar and hours, minutes and
# seconds through real time, so a wall time skipped when clocks go forward does not fire that
# day and one repeated when they go back fires twice.
@pytest.mark.parametrize(("pattern", "zone", "start", "times"), [
    # Amsterdam: 02:00 CET -> 03:00 CEST on 2025-03-30, 03:00 CEST -> 02:00 CET on 2025-10-26
    ("0 30 2 * * *", "Europe/Amsterdam", "2025-03-29T12:00:00+00:00",
     ["2025-03-31T02:30:00+02:00", "2025-04-01T02:30:00+02:00"]),
    ("0 30 2 * * *", "Europe/Amsterdam", "2025-10-25T12:00:00+00:00",
     ["2025-10-26T02:30:00+02:00", "2025-10-26T02:30:00+01:00", "2025-10-27T02:30:00+01:00"]),
    ("@hourly", "Europe/Amsterdam", "2025-10-25T23:30:00+00:00",
     ["2025-10-26T02:00:00+02:00", "2025-10-26T02:00:00+01:00", "2025-10-26T03:00:00+01:00"]),
    ("@hourly", "Europe/Amsterdam", "2025-03-30T00:30:00+00:00",
     ["2025-03-30T03:00:00+02:00", "2025-03-30T04:00:00+02:00"]),
    ("@daily", "Europe/Amsterdam", "2025-03-29T12:00:00+00:00",
     ["2025-03-30T00:00:00+01:00", "2025-03-31T00:00:00+02:00"]),
    # New York: 02:00 EST -> 03:00 EDT on 2025-03-09, 02:00 EDT -> 01:00 EST on 2025-11-02
    ("0 0 2 * * *", "America/New_York", "2025-03-08T12:00:00+00:00",
     ["2025-03-10T02:00:00-04:00", "2025-03-11T02:00:00-04:00"]),
    ("0 30 1 * * *", "America/New_York", "2025-11-01T12:00:00+00:00",
     ["2025-11-02T01:30:00-04:00", "2025-11-02T01:30:00-05:00", "2025-11-03T01:30:00-05:00"]),
    ("0 0 9 * * mon", "America/New_York", "2025-03-01T00:00:00+00:00",
     ["2025-03-03T09:00:00-05:00", "2025-03-10T09:00:00-04:00"]),
    # Santiago: midnight is skipped (00:00 -04 -> 01:00 -03) on 2025-09-07
    ("@daily", "America/Santiago", "2025-09-05T12:00:00+00:00",
     ["2025-09-06T00:00:00-04:00", "2025-09-08T00:00:00-03:00"]),
    # Lord Howe: half-hour DST; 02:00 +11 -> 01:30 +10:30 on 2025-04-06, and stepping an hour
    # from 01:30 lands at 02:30, so 02:00 does not fire that day
    ("0 0 2 * * *", "Australia/Lord_Howe", "2025-04-05T00:00:00+00:00",
     ["2025-04-07T02:00:00+10:30"]),
])
def test_dst_changes(pattern, zone, start, times):
    assert _run(pattern, zone, start, len(times)) == times


def test_wall_time_in_a_gap_or_overlap_resolves_as_go_does():
    ams, ny = load_zone("Europe/Amsterdam"), load_zone("America/New_York")
    # in the gap: the offset from before the change, so the time lands after the gap
    assert wall_to_unix(ams, 2025, 3, 30, 2, 30) == _ns("2025-03-30T01:30:00+00:00") // NS
    # repeated: the zone's offset at the wall time read as UTC decides (later CET here,
    # earlier EDT in New York)
    assert wall_to_unix(ams, 2025, 10, 26, 2, 30) == _ns("2025-10-26T01:30:00+00:00") // NS
    assert wall_to_unix(ny, 2025, 11, 2, 1, 30) == _ns("2025-11-02T05:30:00+00:00") // NS
    # months and days carry over
    assert wall_to_unix(UTC, 2024, 14, 32) \
        == _ns("2025-03-04T00:00:00+00:00") // NS


def test_zones():
    assert load_zone("UTC") is UTC and load_zone("Local") is UTC
    assert load_zone("Europe/Amsterdam") is not None
    for bad in ("", "Not/A/Zone", "europe/amsterdam", "Europe", "../etc/passwd",
                "/usr/share/zoneinfo/UTC", "Europe/Amsterdam\0"):
        assert load_zone(bad) is None, bad


# -- properties ------------------------------------------------------------------------------------
_ZONES = ["UTC", "Europe/Amsterdam", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe",
          "America/Santiago"]
_BOUNDS = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]
# around DST changes, and anywhere in 2020-2035
_DST = [_ns(t) for t in ("2025-03-30T01:00:00+00:00", "2025-10-26T01:00:00+00:00",
                         "2025-03-09T07:00:00+00:00", "2025-11-02T06:00:00+00:00",
                         "2025-04-05T15:00:00+00:00", "2025-09-07T04:00:00+00:00")]
_ts = st.one_of(
    st.integers(_ns("2020-01-01T00:00:00+00:00"), _ns("2035-01-01T00:00:00+00:00")),
    st.builds(lambda base, d: base + d, st.sampled_from(_DST),
              st.integers(-2 * 86400 * NS, 2 * 86400 * NS)))


@st.composite
def _item(draw, lo: int, hi: int) -> tuple[str, set[int]]:
    """One comma item of a field and the values it stands for (computed independently)."""
    kind = draw(st.sampled_from(["star", "one", "range", "step", "range_step"]))
    step = draw(st.integers(1, hi - lo + 2))
    a = draw(st.integers(lo, hi))
    b = draw(st.integers(a, hi))
    if kind == "star":
        return draw(st.sampled_from(["*", "?"])), set(range(lo, hi + 1))
    if kind == "one":
        return str(a), {a}
    if kind == "range":
        return f"{a}-{b}", set(range(a, b + 1))
    if kind == "step":
        return f"{a}/{step}", set(range(a, hi + 1, step))
    return f"{a}-{b}/{step}", set(range(a, b + 1, step))


@st.composite
def _pattern(draw, fixed: dict[int, str] | None = None):
    fields, allowed = [], []
    for i, (lo, hi) in enumerate(_BOUNDS):
        if fixed and i in fixed:
            text = fixed[i]
            values = set(range(lo, hi + 1)) if text == "*" else {int(v) for v in text.split(",")}
        else:
            items = draw(st.lists(_item(lo, hi), min_size=1, max_size=3))
            text = ",".join(t for t, _v in items)
            values = set().union(*(v for _t, v in items))
        fields.append(text)
        allowed.append(values)
    return " ".join(fields), allowed


def _matches(allowed, pattern: str, secs: int, zone) -> bool:
    d = datetime.fromtimestamp(secs, zone)
    dom_field, dow_field = pattern.split()[3], pattern.split()[5]
    dom, dow = d.day in allowed[3], (d.weekday() + 1) % 7 in allowed[5]
    unrestricted = any(t in ("*", "?", "*/1", "?/1")
                       for f in (dom_field, dow_field) for t in f.split(","))
    day = (dom and dow) if unrestricted else (dom or dow)
    return (d.second in allowed[0] and d.minute in allowed[1] and d.hour in allowed[2]
            and d.month in allowed[4] and day)


@settings(max_examples=150, deadline=None)
@given(_pattern(), _ts, st.sampled_from(_ZONES))
def test_next_is_later_and_matches_the_pattern_in_the_zone(pat, ts, zone_name):
    pattern, allowed = pat
    zone = load_zone(zone_name)
    nxt = cron_next(parse_cron(pattern), zone, ts)
    assume(nxt is not None)
    assert nxt > ts and nxt % NS == 0
    assert _matches(allowed, pattern, nxt // NS, zone)


@settings(max_examples=60, deadline=None)
@given(_pattern(fixed={2: "*", 3: "*", 4: "*", 5: "*"}), _ts,
       st.sampled_from(["UTC", "Europe/Amsterdam", "America/New_York"]))
def test_no_earlier_second_matches(pat, ts, zone_name):
    """Seconds and minutes only: every second up to the next time is checked."""
    pattern, allowed = pat
    zone = load_zone(zone_name)
    nxt = cron_next(parse_cron(pattern), zone, ts)
    assert nxt is not None and nxt - ts <= 3600 * NS
    for secs in range(ts // NS + 1, nxt // NS):
        assert not _matches(allowed, pattern, secs, zone), secs


@settings(max_examples=40, deadline=None)
@given(_pattern(fixed={0: "0", 3: "*", 4: "*", 5: "*"}), _ts,
       st.sampled_from(["UTC", "Europe/Amsterdam", "America/New_York"]))
def test_no_earlier_minute_matches(pat, ts, zone_name):
    """Minutes and hours (second 0): every whole minute up to the next time is checked,
    across DST changes of zones that move by whole hours."""
    pattern, allowed = pat
    zone = load_zone(zone_name)
    nxt = cron_next(parse_cron(pattern), zone, ts)
    assert nxt is not None and nxt - ts <= 2 * 86400 * NS
    for secs in range((ts // NS // 60 + 1) * 60, nxt // NS, 60):
        assert not _matches(allowed, pattern, secs, zone), secs


@settings(max_examples=100, deadline=None)
@given(_pattern(), _ts)
def test_utc_no_earlier_day_matches(pat, ts):
    """Any pattern in UTC: no earlier day than the next time's holds a matching second."""
    pattern, allowed = pat
    nxt = cron_next(parse_cron(pattern), None, ts)
    assume(nxt is not None)
    every_time = [set(range(60)), set(range(60)), set(range(24)), *allowed[3:]]
    first_day = (ts // NS + 1) // 86400 * 86400 + 86400
    for day in range(first_day, nxt // NS // 86400 * 86400, 86400):
        assert not _matches(every_time, pattern, day, UTC), datetime.fromtimestamp(day, UTC)
