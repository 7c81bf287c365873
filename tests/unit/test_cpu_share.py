"""scripts/cpu_share.py (the CPU line of .ci/run's timings and scripts/test.sh's end): the
busy share is a delta of /proc/stat's counters over the window, iowait and idle not busy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import cpu_share  # noqa: E402

STAT = "cpu  {u} {n} {s} {i} {w} {q} {sq} {st} 7 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1 2\n"
PSI = "some avg10=1.00 avg60=2.00 avg300=3.00 total={t}\nfull avg10=0 avg60=0 avg300=0 total=0\n"


def snap(wall: float, psi: int | None = None, **ticks: int) -> cpu_share.Snap:
    values = {"u": 0, "n": 0, "s": 0, "i": 0, "w": 0, "q": 0, "sq": 0, "st": 0, **ticks}
    return cpu_share.Snap(
        wall,
        cpu_share.parse_stat(STAT.format(**values)),
        None if psi is None else cpu_share.parse_pressure(PSI.format(t=psi)),
    )


def test_busy_share_is_a_delta_and_iowait_is_not_busy() -> None:
    # Before: a long history of idle time, which must not dilute the window's share.
    before = snap(1000.0, psi=5_000_000, u=100, i=100_000, w=50)
    # The window: 600 user, 100 nice, 150 system, 50 softirq, 50 steal, 30 idle, 20 iowait.
    after = snap(1100.0, psi=65_000_000, u=700, n=100, s=150, i=100_030, w=70, sq=50, st=50)
    line = cpu_share.report(before, after, "3.10 2.50 2.00 3/200 999\n", 2)
    assert line.startswith("CPU busy 95% of 2 CPUs over 100 s")  # 950 of 1000 ticks
    assert "user+nice 70%" in line and "system+irq 20%" in line and "steal 5%" in line
    assert "iowait 2%" in line
    assert "tasks waiting for a CPU 60% of the time" in line  # 60 s stalled in 100 s
    assert line.endswith("load average 3.10 2.50 2.00 (1/5/15 min) on 2 CPUs")


def test_a_snapshot_line_round_trips_and_no_psi_is_left_out() -> None:
    s = snap(12.5, u=1, n=2, s=3, i=4, w=5, q=6, sq=7, st=8)
    assert cpu_share.Snap.parse(s.line()) == s
    after = snap(22.5, u=11, n=2, s=3, i=4, w=5, q=6, sq=7, st=8)
    line = cpu_share.report(s, after, "1.00 1.00 1.00", 4)
    assert "waiting for a CPU" not in line and line.startswith("CPU busy 100% of 4 CPUs")


def test_cli_prints_nothing_for_an_empty_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    assert cpu_share.main(["since", ""]) == 0
    assert capsys.readouterr().out == ""
    assert cpu_share.main(["snap"]) == 0
    line = capsys.readouterr().out.strip()
    assert cpu_share.main(["since", line]) == 0
    assert capsys.readouterr().out.startswith(("CPU busy ", "CPU over "))  # a tick or none
