"""How ``pytest -n N --dist loadfile`` hands out the suite (tests/conftest.py installs it).

xdist's own loadfile keeps a file on one worker (so module fixtures are built once) and hands the
files out by their number of tests, most first. On this suite that ran the longest files last:
a file of one 9-minute test went out after hundreds of unit files and left the other workers
idle for its last minutes. This scheduler keeps the file as the unit, with three changes:

* units are handed out longest first, by the seconds ``tests/durations.json`` records (a file
  it does not know is estimated from its number of tests), so the run ends on short files that
  even out the workers;
* a file ``durations.json`` lists under ``"spread"`` is cut into parts that any worker may
  take: ``0`` makes each test case a unit (cases that build what they need themselves, like the
  CLI walk's shards), ``N`` cuts the file into N runs of consecutive cases (each part builds the
  module's fixtures once, on whichever worker takes it);
* with ``DET_TEST_WAITING_LANES=K`` (scripts/test.sh sets 1) the last K workers are lanes for
  the files ``durations.json`` lists under ``"waiting"``: files whose tests mostly wait (for a
  scheduled wake-up, a cloud's simulated clock, a timeout), whose CPU is a small share of their
  wall time. A lane takes only those, longest first, and stops when none is left; the other
  workers take every other file first and the waiting ones only when nothing else is left. On
  a CPU-bound run a fifth worker that computes only makes the same work dearer; one that
  mostly waits frees the four others from the waits that left the cores idle.

``python -m tests.xdist_schedule REPORT.xml`` rewrites ``durations.json``'s seconds from a JUnit
report of a whole run (``pytest --junitxml=REPORT.xml``): seconds per file, and per test case in
the spread files. The spread and waiting lists are kept (a file is listed as waiting by hand,
from its CPU and wall seconds alone on a quiet machine: docs/testing.md).
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling

REPO = Path(__file__).resolve().parents[1]
DURATIONS = Path(__file__).with_name("durations.json")

# What durations.json does not know: a unit test takes a fraction of a second, an integration or
# e2e test (a master, a container) a few seconds.
_GUESS_UNIT = 0.2
_GUESS_OTHER = 3.0
# Files and cases shorter than this are left out of durations.json (the guess does for them).
_RECORD_ABOVE = 5.0


def load_durations(
    path: Path | None = None,
) -> tuple[dict[str, float], dict[str, int], frozenset[str]]:
    """``durations.json``'s seconds, spread files and waiting files (empty when it is missing)."""
    path = path or DURATIONS
    if not path.exists():
        return {}, {}, frozenset()
    data = json.loads(path.read_text())
    seconds = {str(k): float(v) for k, v in data.get("seconds", {}).items()}
    spread = {str(k): int(v) for k, v in data.get("spread", {}).items()}
    return seconds, spread, frozenset(str(f) for f in data.get("waiting", []))


def waiting_lanes() -> int:
    """How many workers are lanes for the waiting files (``DET_TEST_WAITING_LANES``, 0 unset)."""
    raw = os.environ.get("DET_TEST_WAITING_LANES", "").strip() or "0"
    if not raw.isdigit():
        raise ValueError(f"DET_TEST_WAITING_LANES must be a whole number, not {raw!r}")
    return int(raw)


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def file_of_unit(unit: str) -> str:
    """The file of a work unit: a file, a part of one (``FILE#partIofN``) or a test case."""
    return file_of(unit).split("#", 1)[0]


def units(
    collection: list[str], spread: dict[str, int], seconds: dict[str, float] | None = None
) -> dict[str, str]:
    """The work unit of each test: its file, a part of a spread file, or the case itself.
    A file cut in N parts is cut where its cases' recorded seconds (guessed where none are)
    add up to about a N-th of its total each."""
    by_file: dict[str, list[str]] = defaultdict(list)
    for nodeid in collection:
        by_file[file_of(nodeid)].append(nodeid)
    out: dict[str, str] = {}
    for path, ids in by_file.items():
        parts = spread.get(path)
        if parts is None:
            out.update(dict.fromkeys(ids, path))
        elif parts == 0 or parts >= len(ids):
            out.update({nodeid: nodeid for nodeid in ids})
        else:
            cost = [(seconds or {}).get(n, guess(n)) for n in ids]
            total, done = sum(cost), 0.0
            for nodeid, c in zip(ids, cost, strict=True):
                # the part whose share of the total this case's middle falls in
                part = min(parts - 1, int((done + c / 2) * parts / total)) if total else 0
                out[nodeid] = f"{path}#part{part + 1}of{parts}"
                done += c
    return out


def guess(nodeid: str) -> float:
    return _GUESS_UNIT if nodeid.startswith("tests/unit/") else _GUESS_OTHER


def estimate(unit: str, nodeids: list[str], seconds: dict[str, float]) -> float:
    """A unit's expected seconds: the file's as recorded, else the sum of its cases' (recorded
    for the spread files' cases, else guessed)."""
    if unit in seconds and "::" not in unit:
        return seconds[unit]
    return sum(seconds.get(n, guess(n)) for n in nodeids)


class CostScheduling(LoadScopeScheduling):
    """Longest unit first; units are files, parts of the spread files, or single cases. The last
    ``DET_TEST_WAITING_LANES`` workers take only the waiting files."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self._seconds, self._spread, self._waiting = load_durations()
        self._units: dict[str, str] = {}
        lanes = min(waiting_lanes(), self.numnodes - 1) if self._waiting else 0
        # xdist names its workers gw0 .. gw{N-1}
        self._lanes = {f"gw{i}" for i in range(self.numnodes - lanes, self.numnodes)}

    def is_lane(self, node: Any) -> bool:
        return str(node.gateway.id) in self._lanes

    def waits(self, unit: str) -> bool:
        return file_of_unit(unit) in self._waiting

    def schedule(self) -> None:
        if self.collection is None and self.registered_collections:
            collection = list(next(iter(self.registered_collections.values())))
            self._units = units(collection, self._spread, self._seconds)
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        return self._units.get(nodeid) or file_of(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        # The queue is filled in collection order (or by count); put the longest unit first.
        # A few hundred units: sorting on each hand-out costs nothing.
        ordered = sorted(
            self.workqueue.items(),
            key=lambda kv: -estimate(kv[0], list(kv[1]), self._seconds),
        )
        lane = self.is_lane(node)
        # a lane: the longest waiting unit; a worker: the longest other one, else a waiting one
        # (with no lane, the longest of all)
        pick = (
            next((i for i, (unit, _) in enumerate(ordered) if self.waits(unit) == lane), None)
            if self._lanes
            else 0
        )
        if pick is None and lane:
            if not self._pending_of(self.assigned_work[node]):
                node.shutdown()  # nothing left it may take
            return
        ordered.insert(0, ordered.pop(pick or 0))
        self.workqueue.clear()
        self.workqueue.update(ordered)
        super()._assign_work_unit(node)


def durations_from_junit(report: Path, spread: dict[str, int]) -> dict[str, float]:
    """Seconds (setup, call and teardown) per file, and per case of the spread files, from a
    JUnit XML report."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        # JUnit's classname is the dotted module (and class): find the file it names.
        cut = next(
            (
                i
                for i in range(len(parts), 0, -1)
                if (REPO / ("/".join(parts[:i]) + ".py")).exists()
            ),
            len(parts),
        )
        path = "/".join(parts[:cut]) + ".py"
        nodeid = "::".join([path, *parts[cut:], case.get("name", "")])
        seconds = float(case.get("time", "0") or 0)
        totals[path] += seconds
        if path in spread:
            totals[nodeid] += seconds
    return dict(totals)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.xdist_schedule REPORT.xml", file=sys.stderr)
        return 2
    _, spread, waiting = load_durations()
    totals = durations_from_junit(Path(argv[0]), spread)
    kept = {
        k: round(v, 1)
        for k, v in sorted(totals.items(), key=lambda kv: -kv[1])
        if v >= _RECORD_ABOVE
    }
    data = {
        "about": "seconds per file (and per case of the spread files) of a whole run, the"
        " files cut into parts and the files that mostly wait: tests/xdist_schedule.py",
        "spread": dict(sorted(spread.items())),
        "waiting": sorted(waiting),
        "seconds": kept,
    }
    DURATIONS.write_text(json.dumps(data, indent=1) + "\n")
    files = sum(v for k, v in totals.items() if "::" not in k)
    print(f"{len(kept)} files and cases over {_RECORD_ABOVE} s; {files:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
