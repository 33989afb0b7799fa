"""The documentation's runnable examples run and its links lead somewhere.

Each ```python block right after a ``<!-- test: run -->`` line of README.md or of a page
under docs/ is executed (a block of ``>>>`` lines as a doctest) against the test
session's Ray, so the examples cannot drift from the code. Every relative link of those
files must name a file that exists (and, with ``#anchor``, a heading of it), and the
README must link every docs page."""

from __future__ import annotations

import contextlib
import doctest
import io
import re
from pathlib import Path

import pytest

from tests.cluster.conftest import js  # noqa: F401 - the session's rayjet connection

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
FILES = [README, *DOCS]
MARK = "<!-- test: run -->"
_BLOCK = re.compile(r"^" + re.escape(MARK) + r"\n```python\n(.*?)^```", re.M | re.S)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def runnable_blocks(path: Path = README) -> list[tuple[int, str]]:
    text = path.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def all_blocks() -> list[tuple[Path, int, str]]:
    return [(path, line, code) for path in FILES for line, code in runnable_blocks(path)]


def test_readme_marks_its_runnable_blocks():
    for path in FILES:
        marks = re.findall(r"^" + re.escape(MARK) + r"$", path.read_text(), re.M)
        assert len(runnable_blocks(path)) == len(marks), \
            f"{_name(path)}: every {MARK!r} line must be followed by a ```python block"
    assert runnable_blocks(README), "the README's quick start is runnable"
    assert len(all_blocks()) >= 2


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    out = set()
    for title in re.findall(r"^#+ (.+)$", _FENCE.sub("", path.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_docs_links_resolve():
    broken = []
    for path in FILES:
        for target in _LINK.findall(_FENCE.sub("", path.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked here
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{_name(path)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{_name(path)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_links_every_docs_page():
    linked = {(README.parent / t.partition("#")[0]).resolve()
              for t in _LINK.findall(README.read_text()) if not re.match(r"[a-z]+:", t)}
    missing = [_name(p) for p in DOCS if p.resolve() not in linked]
    assert DOCS and not missing, f"README.md links no {missing}"


@pytest.mark.parametrize("path,line,code", all_blocks(),
                         ids=[f"{_name(p)}:{line}" for p, line, _ in all_blocks()])
def test_readme_block_runs(path, line, code, js, monkeypatch, tmp_path):  # noqa: F811
    # rayjet.connect() in a block joins the session's Ray (and close() leaves it running);
    # streams it creates keep their data under tmp_path and are deleted afterwards
    monkeypatch.setenv("RAYJET_DATA_DIR", str(tmp_path))
    where = f"{_name(path)}:{line}"
    before = set(js.stream_names())
    try:
        if code.lstrip().startswith(">>>"):
            test = doctest.DocTestParser().get_doctest(code, {}, where, str(path), line)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
            out = io.StringIO()
            result = runner.run(test, out=out.write)
            assert result.failed == 0, out.getvalue()
        else:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, where, "exec"), {"__name__": "__readme__"})
            assert out.getvalue().strip(), "the example prints what it did"
        assert js.nodes(), "the session's connection still works: Ray was left running"
    finally:
        for name in set(js.stream_names()) - before:
            js.delete_stream(name)
