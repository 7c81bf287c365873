"""The machine's CPU use over a window (the tests' phase of `.ci/run` and `scripts/test.sh`),
to tell a CPU-bound run (more pytest workers would not help) from a wait-bound one (they may).

    before="$(python3 scripts/cpu_share.py snap)"
    ...
    python3 scripts/cpu_share.py since "$before"

`snap` prints one line: the time, /proc/stat's aggregate `cpu` counters and /proc/pressure/cpu's
`some` stall total. `since` prints the deltas from such a line to now:

- busy share: (user + nice + system + irq + softirq + steal) / all of those + idle + iowait,
  a delta of the whole machine's ticks (guest time is already inside user and nice);
- iowait share (an idle CPU with a task blocked on disk);
- CPU pressure: the share of the window in which some runnable task waited for a CPU (a
  machine at 100 % busy with no pressure has exactly enough work; high pressure: too much);
- the load averages at the end (1, 5, 15 min) beside the number of CPUs.

Needs only the standard library (runs before the venv exists). Without /proc (not Linux) it
prints nothing and exits 0: a summary line is not worth failing a run for.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

BUSY = ("user", "nice", "system", "irq", "softirq", "steal")
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class Snap:
    wall: float
    ticks: dict[str, int]
    pressure_us: int | None  # /proc/pressure/cpu "some" total (microseconds); None: no PSI

    def line(self) -> str:
        p = "-" if self.pressure_us is None else str(self.pressure_us)
        return " ".join([f"{self.wall:.3f}", *(str(self.ticks[f]) for f in FIELDS), p])

    @classmethod
    def parse(cls, line: str) -> Snap:
        parts = line.split()
        if len(parts) != 2 + len(FIELDS):
            raise ValueError(f"not a snapshot of scripts/cpu_share.py: {line!r}")
        ticks = {f: int(v) for f, v in zip(FIELDS, parts[1:-1], strict=True)}
        return cls(float(parts[0]), ticks, None if parts[-1] == "-" else int(parts[-1]))


def parse_stat(text: str) -> dict[str, int]:
    """/proc/stat's aggregate ``cpu`` line as named counters (absent fields: 0, old kernels)."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1:]]
            values += [0] * (len(FIELDS) - len(values))
            return dict(zip(FIELDS, values[: len(FIELDS)], strict=True))
    raise ValueError("no aggregate cpu line in /proc/stat")


def parse_pressure(text: str) -> int | None:
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "some":
            for kv in parts[1:]:
                if kv.startswith("total="):
                    return int(kv.removeprefix("total="))
    return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return None


def snap() -> Snap | None:
    stat = _read("/proc/stat")
    if stat is None:
        return None
    pressure = _read("/proc/pressure/cpu")
    return Snap(
        time.time(), parse_stat(stat), None if pressure is None else parse_pressure(pressure)
    )


def report(before: Snap, after: Snap, loadavg: str, cpus: int) -> str:
    """One line: busy and iowait shares of the window, CPU pressure, load averages."""
    delta = {f: after.ticks[f] - before.ticks[f] for f in FIELDS}
    total = sum(delta.values())
    wall = max(after.wall - before.wall, 0.0)
    if total <= 0:
        return f"CPU over {wall:.0f} s: no ticks counted"
    busy = sum(delta[f] for f in BUSY)
    parts = [
        f"CPU busy {100 * busy / total:.0f}% of {cpus} CPUs over {wall:.0f} s"
        f" (user+nice {100 * (delta['user'] + delta['nice']) / total:.0f}%,"
        f" system+irq {100 * (delta['system'] + delta['irq'] + delta['softirq']) / total:.0f}%,"
        f" steal {100 * delta['steal'] / total:.0f}%),"
        f" iowait {100 * delta['iowait'] / total:.0f}%"
    ]
    if before.pressure_us is not None and after.pressure_us is not None and wall > 0:
        stalled = (after.pressure_us - before.pressure_us) / 1e6
        parts.append(f"tasks waiting for a CPU {100 * stalled / wall:.0f}% of the time")
    load = " ".join(loadavg.split()[:3])
    parts.append(f"load average {load} (1/5/15 min) on {cpus} CPUs")
    return "; ".join(parts)


def main(argv: list[str]) -> int:
    now = snap()
    if now is None:
        return 0
    if argv[:1] == ["snap"] and len(argv) == 1:
        print(now.line())
        return 0
    if argv[:1] == ["since"] and len(argv) == 2:
        if not argv[1].strip():
            return 0
        print(report(Snap.parse(argv[1]), now, _read("/proc/loadavg") or "", os.cpu_count() or 1))
        return 0
    print("usage: cpu_share.py snap | since SNAPSHOT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
