"""rayjet demo: runs on an embedded local Ray (started for you).

Run with `make demo`. Each part prints what it did; a failure exits non-zero.
"""

from __future__ import annotations

import sys
import tempfile

import rayjet
from rayjet import errors
from rayjet.subjects import subject_matches, subjects_collide, validate_subject


def section(title: str) -> None:
    print(f"\n== {title} ==")


def subjects_demo() -> None:
    section("subjects")
    for subject, filt in [("ORDERS.new", "ORDERS.*"), ("ORDERS.eu.new", "ORDERS.*"),
                          ("ORDERS.eu.new", "ORDERS.>")]:
        print(f"{subject!r:18} matches {filt!r:11}: {subject_matches(subject, filt)}")
    print("'ORDERS.*' and '*.new' overlap:", subjects_collide("ORDERS.*", "*.new"))
    try:
        validate_subject("ORDERS..new")
    except errors.InvalidSubjectError as err:
        print(f"bad subject refused: {err}")


def cluster_demo(data_dir: str) -> None:
    section("Ray")
    with rayjet.connect(data_dir=data_dir, num_cpus=2) as js:
        nodes = js.nodes()
        print(f"connected: {len(nodes)} node(s), {js.cluster_resources().get('CPU')} CPUs, "
              f"data_dir={js.data_dir}")


def main() -> int:
    subjects_demo()
    with tempfile.TemporaryDirectory(prefix="rayjet-demo-") as data_dir:
        cluster_demo(data_dir)
    print("\ndemo finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
