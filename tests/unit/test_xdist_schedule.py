"""The suite's xdist scheduler (tests/xdist_schedule.py): which tests travel together and which
unit goes out first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

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
