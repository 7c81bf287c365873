"""The suite's xdist scheduler (tests/xdist_schedule.py): which tests travel together and which
unit goes out first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests import xdist_schedule as xs

COLLECTION = [
    "tests/unit/test_a.py::test_1",
    "tests/unit/test_a.py::test_2",
    "tests/integration/test_walk.py::test_walk[one]",
    "tests/integration/test_walk.py::test_walk[two]",
    "tests/integration/test_fuzz.py::test_f[1]",
    "tests/integration/test_fuzz.py::test_f[2]",
    "tests/integration/test_fuzz.py::test_f[3]",
    "tests/integration/test_fuzz.py::test_f[4]",
    "tests/integration/test_long.py::test_x",
]
SPREAD = {"tests/integration/test_walk.py": 0, "tests/integration/test_fuzz.py": 2}


def test_a_file_is_one_unit_unless_spread() -> None:
    u = xs.units(COLLECTION, SPREAD)
    assert u["tests/unit/test_a.py::test_1"] == u["tests/unit/test_a.py::test_2"]
    assert u["tests/unit/test_a.py::test_1"] == "tests/unit/test_a.py"
    # 0: every case on its own
    assert u["tests/integration/test_walk.py::test_walk[one]"] == (
        "tests/integration/test_walk.py::test_walk[one]"
    )
    # 2: two runs of consecutive cases, so a module fixture is built once per part
    parts = [u[f"tests/integration/test_fuzz.py::test_f[{i}]"] for i in range(1, 5)]
    assert parts[0] == parts[1] != parts[2] == parts[3]


def test_parts_are_cut_by_recorded_seconds() -> None:
    ids = [f"tests/integration/test_fuzz.py::test_f[{i}]" for i in range(1, 7)]
    # the first two cases are as long as the four others together
    seconds = {ids[0]: 40.0, ids[1]: 40.0, **{n: 20.0 for n in ids[2:]}}
    u = xs.units(ids, {"tests/integration/test_fuzz.py": 2}, seconds)
    assert [u[n].rpartition("#")[2] for n in ids] == ["part1of2"] * 2 + ["part2of2"] * 4


def test_estimates_use_recorded_seconds_and_guess_the_rest() -> None:
    seconds = {
        "tests/integration/test_long.py": 500.0,
        "tests/integration/test_walk.py::test_walk[one]": 90.0,
    }
    assert xs.estimate("tests/integration/test_long.py", ["x"], seconds) == 500.0
    walk = "tests/integration/test_walk.py::test_walk[one]"
    assert xs.estimate(walk, [walk], seconds) == 90.0
    # unknown: per case, cheaper for unit tests
    unit_ids = ["tests/unit/test_a.py::test_1", "tests/unit/test_a.py::test_2"]
    other = ["tests/integration/test_new.py::test_1"]
    assert xs.estimate("tests/unit/test_a.py", unit_ids, seconds) < xs.estimate(
        "tests/integration/test_new.py", other, seconds
    )


class _Node:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[list[int]] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_the_longest_units_go_out_first(tmp_path: Path, monkeypatch: Any) -> None:
    durations = tmp_path / "durations.json"
    durations.write_text(
        '{"spread": {"tests/integration/test_walk.py": 0},'
        ' "seconds": {"tests/integration/test_long.py": 500,'
        ' "tests/integration/test_walk.py::test_walk[two]": 200}}'
    )
    monkeypatch.setattr(xs, "DURATIONS", durations)
    config = SimpleNamespace(
        option=SimpleNamespace(loadscopereorder=True, maxschedchunk=None),
        getvalue={"tx": ["2*popen"], "dist": "loadfile"}.get,
    )
    sched = xs.CostScheduling(config)  # type: ignore[arg-type]
    nodes = [_Node("gw0"), _Node("gw1")]
    for n in nodes:
        sched.add_node(n)  # type: ignore[arg-type]
    for n in nodes:
        sched.add_node_collection(n, COLLECTION)  # type: ignore[arg-type]
    sched.schedule()
    handed = [[[COLLECTION[i] for i in batch] for batch in n.sent] for n in nodes]
    # longest first: the 500 s file, then the walk case of 200 s on the other worker; then each
    # worker takes one more unit (xdist's start of two units each): the 4-case file (12 s
    # guessed) and the walk's other case, on its own.
    assert handed == [
        [["tests/integration/test_long.py::test_x"], COLLECTION[4:8]],
        [
            ["tests/integration/test_walk.py::test_walk[two]"],
            ["tests/integration/test_walk.py::test_walk[one]"],
        ],
    ]


def test_durations_are_read_from_a_junit_report(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.unit.test_layers" name="test_a" time="1.5"/>'
        '<testcase classname="tests.unit.test_layers" name="test_b" time="2.0"/>'
        '<testcase classname="tests.integration.test_official_cli_tree"'
        ' name="test_every_leaf_of_the_official_cli_works_or_refuses_clearly[rest]" time="80"/>'
        "</testsuite></testsuites>"
    )
    spread = {"tests/integration/test_official_cli_tree.py": 0}
    totals = xs.durations_from_junit(report, spread)
    assert totals["tests/unit/test_layers.py"] == 3.5
    case = (
        "tests/integration/test_official_cli_tree.py::"
        "test_every_leaf_of_the_official_cli_works_or_refuses_clearly[rest]"
    )
    assert totals[case] == 80.0
    assert totals["tests/integration/test_official_cli_tree.py"] == 80.0
    assert not any(k.startswith("tests/unit/test_layers.py::") for k in totals)


def _scheduler(
    tmp_path: Path, monkeypatch: Any, durations: str, workers: int, lanes: str
) -> xs.CostScheduling:
    (tmp_path / "durations.json").write_text(durations)
    monkeypatch.setattr(xs, "DURATIONS", tmp_path / "durations.json")
    monkeypatch.setenv("DET_TEST_WAITING_LANES", lanes)
    config = SimpleNamespace(
        option=SimpleNamespace(loadscopereorder=True, maxschedchunk=None),
        getvalue={"tx": [f"{workers}*popen"], "dist": "loadfile"}.get,
    )
    return xs.CostScheduling(config)  # type: ignore[arg-type]


LANE_COLLECTION = [
    "tests/e2e/test_sim.py::test_wake",  # waits, 300 s
    "tests/integration/test_scale.py::test_a",  # waits, 100 s
    "tests/e2e/test_big.py::test_x",  # computes, 400 s
    "tests/integration/test_mid.py::test_y",  # computes, 200 s
    "tests/unit/test_small.py::test_z",  # computes, guessed
]
LANE_DURATIONS = (
    '{"waiting": ["tests/e2e/test_sim.py", "tests/integration/test_scale.py"%s],'
    ' "seconds": {"tests/e2e/test_sim.py": 300, "tests/integration/test_scale.py": 100,'
    ' "tests/e2e/test_big.py": 400, "tests/integration/test_mid.py": 200}}'
)


class _Run:
    """The scheduler's start on ``names`` workers that all collected ``collection``."""

    def __init__(self, sched: xs.CostScheduling, names: list[str], collection: list[str]):
        self.sched, self.collection = sched, collection
        self.nodes = [_Node(n) for n in names]
        for n in self.nodes:
            sched.add_node(n)  # type: ignore[arg-type]
        for n in self.nodes:
            sched.add_node_collection(n, collection)  # type: ignore[arg-type]
        sched.schedule()

    def cases(self, node: _Node) -> list[str]:
        return [self.collection[i] for batch in node.sent for i in batch]

    def files(self, node: _Node) -> list[str]:
        return [xs.file_of(c) for c in self.cases(node)]

    def complete(self, node: _Node, case: str) -> None:
        self.sched.mark_test_complete(node, self.collection.index(case))  # type: ignore[arg-type]


def test_a_waiting_lane_takes_only_the_waiting_files_and_the_others_take_them_last(
    tmp_path: Path, monkeypatch: Any
) -> None:
    sched = _scheduler(tmp_path, monkeypatch, LANE_DURATIONS % "", workers=2, lanes="1")
    run = _Run(sched, ["gw0", "gw1"], LANE_COLLECTION)
    gw0, lane = run.nodes
    # the lane: the longest waiting file, then the other (xdist starts a worker on two units)
    assert run.files(lane) == ["tests/e2e/test_sim.py", "tests/integration/test_scale.py"]
    # the worker: the files that compute, longest first, never a waiting one while they last
    assert run.files(gw0) == ["tests/e2e/test_big.py", "tests/integration/test_mid.py"]
    # the lane runs out: it finishes what it holds and then stops, with work still queued
    for case in run.cases(lane):
        run.complete(lane, case)
    assert lane.shutting_down
    assert list(sched.workqueue) == ["tests/unit/test_small.py"]


def test_a_worker_takes_waiting_files_when_nothing_else_is_left(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # no lane: the waiting files are files like the others, longest first
    sched = _scheduler(tmp_path, monkeypatch, LANE_DURATIONS % "", workers=2, lanes="0")
    run = _Run(sched, ["gw0", "gw1"], LANE_COLLECTION)
    assert [run.files(n)[0] for n in run.nodes] == [
        "tests/e2e/test_big.py",
        "tests/e2e/test_sim.py",
    ]
    # a lane busy with two waiting files; the third is left to the worker, after all the rest
    third = "tests/e2e/test_third.py"
    durations = LANE_DURATIONS % f', "{third}"'
    sched = _scheduler(tmp_path, monkeypatch, durations, workers=2, lanes="1")
    run = _Run(sched, ["gw0", "gw1"], [*LANE_COLLECTION, f"{third}::test_w"])
    gw0, lane = run.nodes
    assert run.files(lane) == ["tests/e2e/test_sim.py", "tests/integration/test_scale.py"]
    for step in range(3):  # gw0 finishes what it holds, one test after the other
        run.complete(gw0, run.cases(gw0)[step])
    assert run.files(gw0) == [
        "tests/e2e/test_big.py",
        "tests/integration/test_mid.py",
        "tests/unit/test_small.py",
        third,
    ]
    assert not lane.shutting_down  # it still holds its two files


def test_a_bad_lane_count_is_named(tmp_path: Path, monkeypatch: Any) -> None:
    with pytest.raises(ValueError, match="DET_TEST_WAITING_LANES must be a whole number"):
        _scheduler(tmp_path, monkeypatch, LANE_DURATIONS % "", workers=2, lanes="one")


def test_the_listed_files_exist() -> None:
    """A spread or waiting entry that names no file would be ignored without a word."""
    import json

    data = json.loads(xs.DURATIONS.read_text())
    for path in [*data["spread"], *data["waiting"]]:
        assert (xs.REPO / path).is_file(), f"tests/durations.json names {path}, which is gone"
