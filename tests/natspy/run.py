"""Run nats.py's own tests (of the nats-py sdist on PyPI: its JetStream suite
``tests/test_js.py`` and its core tests that need one server, see FILES) against a rayjet
gateway, and report them per test class.

The sdist is fetched with pip (nothing of it is kept in this repository), unpacked, given
our harness as its ``tests/utils.py`` (tests/natspy/harness.py) and run from its root with
its own copy of the client (``src/``) first on the path, so the nats-py under test is the
one the tests were written for. The tests' assertions are untouched.

Exit status: 0 when every test passes except those listed in known_failures.txt (each with
its reason); 1 when any other test fails, and fails again when run once more on its own (a
test that passes the second time is reported as flaky). Listed tests that pass are
reported, so the list shrinks as the gateway grows. A listed test whose reason starts with
``[nats-server]`` fails against nats-server too (a test of an older nats.py expecting an
older server): each run checks it against nats-server (the harness in its nats-server
mode), and one that passes there is a regression of the gateway.

    python tests/natspy/run.py [--version 2.14.0] [--report FILE] [-k EXPR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
# outside the repository: pytest must take the sdist's root, not ours, for its rootdir
CACHE = Path(os.environ.get("RAYJET_NATSPY_CACHE",
                            Path(tempfile.gettempdir()) / "rayjet-natspy"))


def fetch_sdist(version: str) -> Path:
    """The unpacked sdist (downloaded once into the cache)."""
    root = CACHE / f"nats_py-{version}"
    if (root / "tests" / "test_js.py").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", f"nats-py=={version}", "-d", tmp], check=True)
        (archive,) = Path(tmp).glob("nats_py-*.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(CACHE, filter="data")
    return root


# the sdist's test files that talk to a server; test cases needing set-ups a gateway cannot
# give (several servers, TLS certificates the sdist does not ship) skip, saying why
FILES = ["tests/test_js.py", "tests/test_client.py", "tests/test_client_async_await.py",
         "tests/test_client_v2.py", "tests/test_micro_service.py",
         "tests/test_client_nkeys.py"]
DESELECT = "not ClientUtilsTest"  # the client's URL parsing: no server involved


SERVER_TOO = "[nats-server]"  # a known failure's reason: it fails on nats-server too


def known_failures() -> dict[str, str]:
    out = {}
    for line in (HERE / "known_failures.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, why = line.partition(" ")
            out[name] = why.strip()
    return out


def node_id(name: str, xml_path: Path) -> str:
    """The pytest node id of ``Class::test`` from a results file."""
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        module, _, cls = case.get("classname", "").rpartition(".")
        if f"{cls}::{case.get('name')}" == name:
            return f"{module.replace('.', '/')}.py::{name}"
    raise KeyError(name)


def results(xml_path: Path) -> dict[str, str]:
    """``Class::test`` -> passed | failed | skipped."""
    out = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            out[name] = "failed"
        elif case.find("skipped") is not None:
            out[name] = "skipped"
        else:
            out[name] = "passed"
    return out


def report(res: dict[str, str], known: dict[str, str]) -> tuple[str, list[str]]:
    by_class: dict[str, Counter] = defaultdict(Counter)
    for name, outcome in res.items():
        by_class[name.split("::")[0]][outcome] += 1
    lines = ["| class | passed | failed | skipped |", "|---|---|---|---|"]
    for cls in sorted(by_class):
        c = by_class[cls]
        lines.append(f"| {cls} | {c['passed']} | {c['failed']} | {c['skipped']} |")
    total = Counter(res.values())
    lines.append(f"| **all** | {total['passed']} | {total['failed']} | {total['skipped']} |")
    failed = sorted(n for n, o in res.items() if o == "failed")
    lines.append("")
    for name in failed:
        lines.append(f"- failed: `{name}`: {known.get(name, 'NOT A KNOWN FAILURE')}")
    fixed = sorted(n for n in known if res.get(n) == "passed")
    for name in fixed:
        lines.append(f"- passes now, drop it from known_failures.txt: `{name}`")
    regressions = [n for n in failed if n not in known]
    return "\n".join(lines), regressions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="2.14.0")
    ap.add_argument("--report", type=Path)
    ap.add_argument("-k", default=None)
    args = ap.parse_args()
    root = fetch_sdist(args.version)
    shutil.copy(HERE / "harness.py", root / "tests" / "utils.py")
    # the harness's TLS certificates for the nkeys server case
    shutil.copy(HERE.parent / "tls_certs.py", root / "tests" / "rayjet_tls_certs.py")
    (root / "tests" / "__init__.py").touch()
    xml_path = root / "results.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["src", "."]),
           "RAY_ADDRESS": "local"}
    # --tb=native: pytest's own traceback formatting parses source with ast, which on
    # Python 3.11 can crash the whole session ("AST constructor recursion depth mismatch")
    # when it formats a deep failure; the interpreter's formatting does not
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", ".",
           "--tb=native", "--durations", "10", "-o",
           "junit_family=xunit1", f"--junitxml={xml_path}", *FILES]
    cmd += ["-k", f"({args.k}) and {DESELECT}" if args.k else DESELECT]
    subprocess.run(cmd, cwd=root, env=env, check=False)
    res = results(xml_path)
    known = known_failures()
    retry = [n for n, o in res.items() if o == "failed" and n not in known]
    flaky = []
    if retry:
        # an unlisted failure gets one more run on its own: one that passes then is timing
        # under load (reported as flaky), one that fails again is a regression
        again_xml = root / "results-again.xml"
        again = cmd[:cmd.index(f"--junitxml={xml_path}")]
        again += [f"--junitxml={again_xml}", *(node_id(n, xml_path) for n in retry)]
        subprocess.run(again, cwd=root, env=env, check=False)
        for name, outcome in results(again_xml).items():
            if outcome == "passed":
                res[name] = "passed"
                flaky.append(name)
    text, regressions = report(res, known)
    listed_for_server = sorted(n for n, why in known.items()
                               if why.startswith(SERVER_TOO) and res.get(n) == "failed")
    if listed_for_server:
        server_xml = root / "results-nats-server.xml"
        checked = cmd[:cmd.index(f"--junitxml={xml_path}")]
        checked += [f"--junitxml={server_xml}", *(node_id(n, xml_path)
                                                   for n in listed_for_server)]
        subprocess.run(checked, cwd=root, env={**env, "RAYJET_NATSPY_SERVER": "nats-server"},
                       check=False)
        on_server = results(server_xml)
        for name in listed_for_server:
            if on_server.get(name) == "failed":
                text += f"\n- fails on nats-server too (checked in this run): `{name}`"
            else:
                text += (f"\n- passes on nats-server ({on_server.get(name, 'not run')}): "
                         f"`{name}` is the gateway's failure")
                regressions.append(name)
    if flaky:
        text += "\n" + "\n".join(f"- flaky: `{n}` failed, then passed when run again"
                                  for n in flaky)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    if regressions:
        print(f"\n{len(regressions)} test(s) failed that are not known failures",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
