"""The README's runnable examples run: each ```python block right after a
``<!-- test: run -->`` line is executed (a block of ``>>>`` lines as a doctest) against the
test session's Ray, so the examples cannot drift from the code."""

from __future__ import annotations

import contextlib
import doctest
import io
import re
from pathlib import Path

import pytest

from tests.cluster.conftest import js  # noqa: F401 - the session's rayjet connection

README = Path(__file__).resolve().parent.parent / "README.md"
MARK = "<!-- test: run -->"
_BLOCK = re.compile(r"^" + re.escape(MARK) + r"\n```python\n(.*?)^```", re.M | re.S)


def runnable_blocks() -> list[tuple[int, str]]:
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def test_readme_marks_its_runnable_blocks():
    marks = re.findall(r"^" + re.escape(MARK) + r"$", README.read_text(), re.M)
    assert len(runnable_blocks()) == len(marks) >= 2, \
        f"every {MARK!r} line must be followed by a ```python block"


@pytest.mark.parametrize("line,code", runnable_blocks(),
                         ids=[f"README.md:{line}" for line, _ in runnable_blocks()])
def test_readme_block_runs(line, code, js, monkeypatch, tmp_path):  # noqa: F811
    # rayjet.connect() in a block joins the session's Ray (and close() leaves it running);
    # streams it creates keep their data under tmp_path and are deleted afterwards
    monkeypatch.setenv("RAYJET_DATA_DIR", str(tmp_path))
    before = set(js.stream_names())
    try:
        if code.lstrip().startswith(">>>"):
            test = doctest.DocTestParser().get_doctest(code, {}, f"README.md:{line}",
                                                       str(README), line)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
            out = io.StringIO()
            result = runner.run(test, out=out.write)
            assert result.failed == 0, out.getvalue()
        else:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})
            assert out.getvalue().strip(), "the example prints what it did"
        assert js.nodes(), "the session's connection still works: Ray was left running"
    finally:
        for name in set(js.stream_names()) - before:
            js.delete_stream(name)
