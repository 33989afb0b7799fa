"""The order test files run in: the longest first, so that with two workers the last file to
finish is a short one (a long file started last keeps one worker busy while the other idles).

``tests/file_seconds.json`` holds each file's measured time (setup, calls, teardown). Files it
does not list count as average. Tests inside a file keep their order. Regenerate it from a
JUnit report of a whole run::

    pytest -n 2 --dist loadfile --junitxml=report.xml
    python -m tests.file_order report.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

SECONDS = Path(__file__).with_name("file_seconds.json")


def load() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(SECONDS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def longest_first(items: list, seconds: dict[str, float]) -> list:
    """``items`` (pytest items) regrouped by file, longest file first, stable otherwise."""
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    default = sum(seconds.values()) / len(seconds) if seconds else 0.0
    files = sorted(by_file, key=lambda f: -seconds.get(f, default))  # sorted() is stable
    return [item for f in files for item in by_file[f]]


def from_junit(report: str) -> dict[str, float]:
    """File -> seconds from a JUnit XML report (pytest's ``classname`` is the dotted path)."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).iter("testcase"):
        module = case.get("classname", "")
        path = module.replace(".", "/")
        # a class inside the module: drop trailing parts until a file matches
        parts = path.split("/")
        while parts and not Path(*parts).with_suffix(".py").exists():
            parts.pop()
        if parts:
            totals[str(Path(*parts).with_suffix(".py"))] += float(case.get("time", 0.0))
    return {f: round(t, 1) for f, t in sorted(totals.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    SECONDS.write_text(json.dumps(from_junit(sys.argv[1]), indent=1) + "\n")
