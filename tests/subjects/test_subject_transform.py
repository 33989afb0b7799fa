"""Subject transforms; expected values come from nats-server's subject_transform_test.go."""

from __future__ import annotations

import pickle
import random
from dataclasses import dataclass

import pytest

from rayjet.errors import APIError, InvalidSubjectError
from rayjet.subjects import (
    SubjectTransform,
    apply_transforms,
    partition_number,
    validate_transforms,
)

MAX_INT32 = 2**31 - 1


@pytest.mark.parametrize(
    ("source", "destination", "subject", "expected"),
    [
        ("", "prefix.>", "foo", "prefix.foo"),
        ("foo", "", "foo", "foo"),
        ("foo", "bar", "foo", "bar"),
        ("foo.*.bar.*.baz", "req.$2.$1", "foo.A.bar.B.baz", "req.B.A"),
        ("foo.*.bar.*.baz", "req.{{wildcard(2)}}.{{wildcard(1)}}", "foo.A.bar.B.baz", "req.B.A"),
        ("baz.>", "my.pre.>", "baz.1.2.3", "my.pre.1.2.3"),
        ("baz.>", "foo.bar.>", "baz.1.2.3", "foo.bar.1.2.3"),
        ("*", "foo.bar.$1", "foo", "foo.bar.foo"),
        ("*", "{{splitfromleft(1,3)}}", "12345", "123.45"),
        ("*", "{{SplitFromRight(1,3)}}", "12345", "12.345"),
        ("*", "{{SliceFromLeft(1,3)}}", "1234567890", "123.456.789.0"),
        ("*", "{{SliceFromRight(1,3)}}", "1234567890", "1.234.567.890"),
        ("*", "{{split(1,-)}}", "-abc-def--ghi-", "abc.def.ghi"),
        ("*", "{{split(1,-)}}", "abc-def--ghi-", "abc.def.ghi"),
        ("*.*", "{{split(2,-)}}.{{splitfromleft(1,2)}}", "foo.-abc-def--ghij-",
         "abc.def.ghij.fo.o"),
        ("*", "{{right(1,1)}}", "1234", "4"),
        ("*", "{{right(1,3)}}", "1234", "234"),
        ("*", "{{right(1,6)}}", "1234", "1234"),
        ("*", "{{left(1,1)}}", "1234", "1"),
        ("*", "{{left(1,3)}}", "1234", "123"),
        ("*", "{{left(1,6)}}", "1234", "1234"),
        ("*", "bar.{{partition(0)}}", "baz", "bar.0"),
        ("*", "bar.{{partition(10, 0)}}", "foo", "bar.3"),
        ("*.*", "bar.{{partition(10)}}", "foo.bar", "bar.6"),
        ("*", "bar.{{partition(10)}}", "foo", "bar.3"),
        ("*", "bar.{{partition(10)}}", "baz", "bar.0"),
        ("*", "bar.{{partition(10)}}", "qux", "bar.9"),
        ("*", "bar.{{random(0)}}", "qux", "bar.0"),
        ("foo.bar", "baz.{{partition(10)}}", "foo.bar", "baz.6"),
        ("foo.baz", "qux.{{partition(10)}}", "foo.baz", "qux.4"),
        ("test.subject", "result.{{partition(5)}}", "test.subject", "result.0"),
        # the seed's stream: drop the region token
        ("foo.*.>", "foo.>", "foo.west.test", "foo.test"),
        ("foo.*.>", "foo.>", "foo.east.a.b.c", "foo.a.b.c"),
        # more
        (">", ">", "a.b", "a.b"),
        ("foo.>", ">", "foo.a.b", "a.b"),
        ("foo.*.>", "bar.{{wildcard(1)}}.>", "foo.x.y.z", "bar.x.y.z"),
        ("foo.*", "bar.$foo.$1", "foo.x", "bar.$foo.x"),
        ("foo.*", "bar.$0", "foo.x", "bar.foo"),
        ("*", "{{ Wildcard( 1 ) }}", "x", "x"),
        ("*", "{{splitfromleft(1,0)}}", "abc", "abc"),
        ("*", "{{splitfromright(1,-1)}}", "abc", "abc"),
        ("*", "{{slicefromleft(1,5)}}", "abc", "abc"),
        ("*", "{{slicefromleft(1,2)}}", "abcd", "ab.cd"),
        ("*", "{{slicefromright(1,2)}}", "abcd", "ab.cd"),
        ("*", "{{split(1,--)}}", "a--b----c", "a.b.c"),
        ("*", "{{split(1,-)}}", "---", "---"),
        ("*", "{{split(1,x)}}", "abc", "abc"),
    ],
)
def test_transform_results(source, destination, subject, expected):
    tr = SubjectTransform(source, destination)
    assert tr.match(subject) == expected
    assert tr.transform(subject) == expected


@pytest.mark.parametrize(
    ("source", "destination"),
    [
        ("foo.*.*", "bar.$2"),  # not every wildcard needs to be used
        ("foo.*.*", "bar.{{wildcard(1)}}"),
        ("foo.*.*", "bar.{{partition(1)}}"),
        ("foo.*.*", "bar.{{random(5)}}"),
        ("foo", "bar"),
        ("foo.*.bar.*.baz", "req.$2.$1"),
        ("baz.>", "mybaz.>"),
        ("*", "{{splitfromleft(1,1)}}"),
        ("", "prefix.>"),
        ("*.*", "{{partition(10,1,2)}}"),
        ("foo.*.*", "foo.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(5,1,2)}}"),
        ("foo.*", f"foo.{{{{partition({MAX_INT32})}}}}"),
        ("foo.*", f"foo.{{{{random({MAX_INT32})}}}}"),
        ("foo.bar", f"foo.{{{{random({MAX_INT32})}}}}"),
        ("bar", "foo"),
        ("foo", "foo.bar"),
        ("*", "{{wildcard(1)}}"),
        ("foo.>", ">"),
        ("foo.*", "bar.{{wildcard(1)}}"),
        ("foo.*.>", "bar.{{wildcard(1)}}.>"),
        ("foo.*.bar", "bar.{{wildcard(1)}}.foo"),
        ("foo.bar.>", "foo.bar.foo.>"),
        ("*", "foo.{{ wildcard(1) }}"),
        ("*", "foo.{{wildcard( 1 )}}"),
        ("*", "foo.{{partition(2,1)}}"),
        ("*.*", "foo.{{SplitFromLeft(2,1)}}"),
        ("*.*", "foo.{{SplitFromRight(2,1)}}"),
        ("*", "{{ Partition (10,1) }}"),
        ("foo", "{{partition(3,1)}}"),  # no wildcard: nats-server ignores the indexes
    ],
)
def test_valid_transforms(source, destination):
    tr = SubjectTransform(source, destination)
    assert tr.source == (source or ">") and tr.destination == destination


@pytest.mark.parametrize(
    ("source", "destination", "reason"),
    [
        ("foo.*", "bar.*", "'\\*' is not allowed"),
        ("foo.*", "bar.$2", "out of range"),
        ("foo.*", "bar.$1.>", "only use '>'"),
        ("foo.>", "bar.baz", "must end with '>'"),
        ("foo.*", "foo.{{wildcard(2)}}", "out of range"),
        ("foo.*", "foo.{{unimplemented(1)}}", "unknown mapping function"),
        ("foo.*", "foo.{{partition()}}", "not enough arguments"),
        ("foo.*", "foo.{{random()}}", "must be an integer|not enough"),
        ("foo.*", "foo.{{wildcard(foo)}}", "must be an integer"),
        ("foo.*", "foo.{{wildcard()}}", "not enough arguments"),
        ("foo.*", "foo.{{wildcard(1,2)}}", "too many arguments"),
        ("foo.*", "foo.{{ wildcard5) }}", "unknown mapping function"),
        ("foo.*", "foo.{{splitLeft(2,2}}", "unknown mapping function"),
        ("foo", "bla.{{wildcard(1)}}", "out of range"),
        ("foo.*", f"foo.{{{{partition({MAX_INT32 + 1})}}}}", "between"),
        ("foo.*", f"foo.{{{{random({MAX_INT32 + 1})}}}}", "between"),
        ("*", "foo.{{unknown(1)}}", "unknown mapping function"),
        ("foo", "foo..}", "empty token"),
        ("foo", "foo. bar}", "whitespace"),
        ("foo.>", "foo.>.bar", "last token"),
        ("foo.>", ".>", "empty token"),
        ("foo.*", "{{split(1)}}", "not enough arguments"),
        ("foo.*", "{{split(1,-,x)}}", "too many arguments"),
        ("foo.*", "{{split(1,- )}}", "delimiter"),
        ("foo.*", "{{split(1,)}}", "delimiter"),
        ("foo.*", "{{splitfromleft(1)}}", "not enough arguments"),
        ("foo.*", "{{slicefromright(1,2,3)}}", "too many arguments"),
        ("foo.*", "{{slicefromleft(1,x)}}", "must be an integer"),
        ("foo", "{{splitfromleft(1,2)}}", "needs a wildcard"),
        ("foo.*", "{{partition(-1)}}", "between"),
        ("foo.*", "$-1", "between"),
        ("foo.*", "{{SPLIT(1,-)}}", "unknown mapping function"),
    ],
)
def test_invalid_destinations(source, destination, reason):
    with pytest.raises(APIError, match=reason) as exc:
        SubjectTransform(source, destination)
    assert exc.value.err_code == 10156
    assert exc.value.code == 400
    assert "stream transform" in str(exc.value)


@pytest.mark.parametrize("source", ["foo..", "foo.>.bar", "foo bar", ".", "a..b.*"])
def test_invalid_sources(source):
    with pytest.raises(APIError, match="invalid subject") as exc:
        SubjectTransform(source, "bar")
    assert exc.value.err_code == 10155
    assert repr(source) in str(exc.value)


def test_non_string_arguments():
    with pytest.raises(APIError) as exc:
        SubjectTransform(None, "bar")  # type: ignore[arg-type]
    assert exc.value.err_code == 10155
    with pytest.raises(APIError) as exc:
        SubjectTransform("foo", 3)  # type: ignore[arg-type]
    assert exc.value.err_code == 10156


def test_errors_survive_pickling():
    with pytest.raises(APIError) as exc:
        SubjectTransform("foo.*", "bar.$2")
    again = pickle.loads(pickle.dumps(exc.value))
    assert again.err_code == 10156 and again.description == exc.value.description


def test_match_returns_none_when_source_does_not_match():
    tr = SubjectTransform("foo.*.>", "foo.>")
    assert tr.match("bar.west.x") is None
    assert tr.match("foo.west") is None
    assert SubjectTransform("foo.*", "x.$1").match("foo.a.b") is None
    assert SubjectTransform("foo", "").match("bar") is None
    with pytest.raises(InvalidSubjectError, match="does not match"):
        tr.transform("bar.x.y")


@pytest.mark.parametrize("subject", ["foo.*.x", "foo.>", "foo..x", "", "*"])
def test_match_refuses_non_literal_subjects(subject):
    with pytest.raises(InvalidSubjectError):
        SubjectTransform("foo.*.>", "foo.>").match(subject)


def test_partition_numbers_are_fnv1a_32():
    # reference values of FNV-1a 32-bit
    assert partition_number("", 2**32 - 1) == 0x811C9DC5
    assert partition_number("a", 2**32 - 1) == 0xE40C292C
    assert partition_number("foobar", 2**32 - 1) == 0xBF9CF968
    assert partition_number("foo", 0) == 0
    # indexes hash the chosen tokens concatenated without separator
    tr = SubjectTransform("*.*", "p.{{partition(7,2,1)}}")
    assert tr.transform("ab.cd") == f"p.{partition_number('cdab', 7)}"
    # the shorthand hashes the whole subject, literal tokens included
    tr = SubjectTransform("orders.*", "{{partition(3)}}")
    assert tr.transform("orders.42") == str(partition_number("orders.42", 3))
    # non-ASCII tokens hash their UTF-8 bytes
    tr = SubjectTransform("*", "{{partition(1000)}}")
    assert tr.transform("é") == str(partition_number("é", 1000))


def test_partitions_spread_over_the_range():
    tr = SubjectTransform("orders.*", "orders.{{partition(4,1)}}.$1")
    seen = {tr.transform(f"orders.{i}").split(".")[1] for i in range(200)}
    assert seen == {"0", "1", "2", "3"}


def test_random_is_deterministic_with_a_seeded_rng():
    a = SubjectTransform("*", "bar.{{random(6)}}", rng=random.Random(7))
    b = SubjectTransform("*", "bar.{{random(6)}}", rng=random.Random(7))
    outs = [a.transform("qux") for _ in range(50)]
    assert outs == [b.transform("qux") for _ in range(50)]
    assert set(outs) <= {f"bar.{i}" for i in range(6)} and len(set(outs)) > 1
    assert a.uses_random
    assert not SubjectTransform("*", "bar.$1").uses_random
    unseeded = SubjectTransform("*", "bar.{{random(6)}}")
    assert unseeded.transform("x") in {f"bar.{i}" for i in range(6)}


def test_value_semantics():
    a = SubjectTransform("foo.*", "bar.$1")
    assert a == SubjectTransform("foo.*", "bar.$1")
    assert a != SubjectTransform("foo.*", "baz.$1")
    assert len({a, SubjectTransform("foo.*", "bar.$1")}) == 1
    assert repr(a) == "SubjectTransform('foo.*', 'bar.$1')"
    assert SubjectTransform("", "x.>").source == ">"


# -- lists of transforms ---------------------------------------------------------------------
@dataclass
class _Cfg:
    src: str
    dest: str


def test_validate_transforms_accepts_the_usual_shapes():
    built = validate_transforms(
        [("foo.*", "bar.$1"), {"src": "baz.>", "dest": "q.>"}, _Cfg("a", ""),
         SubjectTransform("b.*", "")],
        origin="source",
    )
    assert [t.source for t in built] == ["foo.*", "baz.>", "a", "b.*"]
    assert apply_transforms(built, "foo.x") == "bar.x"
    assert apply_transforms(built, "baz.1.2") == "q.1.2"
    assert apply_transforms(built, "a") == "a"
    assert apply_transforms(built, "zzz") is None
    assert validate_transforms([]) == []
    with pytest.raises(TypeError):
        validate_transforms([42])
    with pytest.raises(ValueError):
        validate_transforms([], origin="nope")


def test_source_transforms_may_not_contain_each_other():
    with pytest.raises(APIError) as exc:
        validate_transforms([("foo.>", ""), ("foo.bar", "x")], origin="source")
    assert exc.value.err_code == 10147 and "'foo.>'" in str(exc.value)
    # nats-server only refuses subsets for sources: colliding but not nested is accepted
    validate_transforms([("foo.*", "a.$1"), ("*.bar", "b.$1")], origin="source")


def test_mirror_transforms_may_not_collide():
    with pytest.raises(APIError) as exc:
        validate_transforms([("foo.*", "a.$1"), ("*.bar", "b.$1")], origin="mirror")
    assert exc.value.err_code == 10152
    validate_transforms([("foo.*", "a.$1"), ("bar.*", "b.$1")], origin="mirror")


def test_list_errors_name_the_bad_entry():
    with pytest.raises(APIError, match="out of range") as exc:
        validate_transforms([("foo.*", "a.$1"), ("bar.*", "b.$2")], origin="stream")
    assert exc.value.err_code == 10156
    with pytest.raises(APIError, match="invalid subject") as exc:
        validate_transforms([("foo..", "a")], origin="mirror")
    assert exc.value.err_code in (10151, 10155)
    with pytest.raises(APIError) as exc:
        validate_transforms([("foo.*", "a.$3")], origin="source")
    assert exc.value.err_code in (10146, 10156)
