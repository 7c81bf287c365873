"""Where a window's CPU went, by kind of process: every process that ran in it, however briefly.

    sudo python3 scripts/cpu_by_process.py start DIR   # accounting on, the sampler started
    bash .ci/run                                       # (or anything else)
    sudo python3 scripts/cpu_by_process.py stop DIR    # both off; prints the table

Two sources, joined:

- the kernel's process accounting (``accton``, Debian's ``acct`` package) writes a record when a
  process exits, with its CPU time, pid, parent pid and start time: nothing is missed, however
  short-lived (a ``docker`` CLI call, a PostgreSQL backend, a CLI test's interpreter); but it
  names a process by its ``comm`` alone (``python3`` for all of det);
- a sampler (this script, ``sample``, once a second) reads each live process's command line and
  CPU from /proc: it names what lives a second or more, and gives the CPU of what is still
  running at ``stop`` (dockerd, containerd).

A process that ran before ``start`` and exits before ``stop`` counts its whole life. An exited
process is named by its own command line when the sampler saw it, else by its nearest
sampled ancestor's kind and its ``comm`` (``pytest worker > docker``). CPU is user + system.
Needs root (accounting is the whole machine's) and the standard library only.
"""

from __future__ import annotations

import collections
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")
# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime (s),
# etime (float, ticks), then comp_t utime, stime, mem, io, rw, minflt, majflt, swaps; comm[16].
ACCT_V3 = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")
# (kind, what a command line holds): the first match names the process.
KINDS = (
    ("pytest worker", "exec(eval(sys.stdin.readline()))"),  # execnet: pytest-xdist's workers
    ("master", "det.master"),
    ("agent", "det.agent"),
    ("det CLI", "det.cli"),
    ("pytest", "pytest"),
    ("moto", "moto_server"),
    ("harness", "det.exec."),
    ("Determined harness", "determined.exec."),
    ("chromium", "chrom"),
    ("jupyter", "jupyter"),
    ("pulumi", "pulumi"),
    ("pip", " -m pip "),
    ("mypy", "mypy"),
)


def kind(cmdline: list[str], comm: str) -> str:
    if not cmdline:
        return f"kernel {comm}"
    line = " " + " ".join(cmdline) + " "
    for name, part in KINDS:
        if part in line:
            return name
    exe = os.path.basename(cmdline[0])
    if exe.startswith("python"):
        script = next((a for a in cmdline[1:] if a.endswith(".py")), None)
        return f"python {os.path.basename(script)}" if script else "python"
    return os.path.basename(exe) or comm


def _stat(pid: str) -> tuple[str, float, int] | None:
    """comm, CPU seconds, start (ticks since boot) of a live process."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    end = data.rfind(")")
    fields = data[end + 2 :].split()
    return data[data.find("(") + 1 : end], (int(fields[11]) + int(fields[12])) / HZ, int(fields[19])


def sample(folder: Path) -> None:
    """Once a second until SIGTERM: pid, start, kind, CPU at first and last sight, to
    ``folder/pids.tsv`` (rewritten every 10 s and at the end)."""
    seen: dict[tuple[str, int], list[object]] = {}
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    written = 0.0
    while True:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            st = _stat(pid)
            if st is None:
                continue
            comm, cpu, start = st
            entry = seen.get((pid, start))
            if entry is None:
                try:
                    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    raw = b""
                args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
                seen[(pid, start)] = [kind(args, comm), cpu, cpu]
            else:
                entry[2] = cpu
        if stop[0] or time.monotonic() - written > 10:
            tmp = folder / "pids.tsv.tmp"
            with tmp.open("w") as f:
                for (pid, start), (k, first, last) in seen.items():
                    f.write(f"{pid}\t{start}\t{k}\t{first}\t{last}\n")
            tmp.replace(folder / "pids.tsv")
            written = time.monotonic()
        if stop[0]:
            return
        time.sleep(1.0)


def _comp(v: int) -> float:
    return ((v & 0x1FFF) << (3 * (v >> 13))) / 100  # comp_t, in AHZ (100) ticks


def report(folder: Path, top: int = 40) -> None:
    stat = Path("/proc/stat").read_text().splitlines()
    boot = next(int(line.split()[1]) for line in stat if line.startswith("btime"))
    sampled: dict[int, list[tuple[float, str, float, float]]] = collections.defaultdict(list)
    for line in (folder / "pids.tsv").read_text().splitlines():
        pid, start, k, first, last = line.split("\t")
        sampled[int(pid)].append((boot + int(start) / HZ, k, float(first), float(last)))
    data = (folder / "pacct").read_bytes()
    records = []
    for i in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        r = ACCT_V3.unpack_from(data, i)
        comm = r[18].split(b"\0")[0].decode(errors="replace")
        records.append((r[6], r[7], float(r[8]), r[9] / 100, _comp(r[10]), _comp(r[11]), comm))
    by_pid: dict[int, list[tuple[int, int, float, float, float, float, str]]] = (
        collections.defaultdict(list)
    )
    for rec in records:
        by_pid[rec[0]].append(rec)

    def seen_as(pid: int, started: float) -> str | None:
        return next((k for t, k, _, _ in sampled.get(pid, ()) if abs(t - started) <= 2), None)

    def parent(ppid: int, at: float, depth: int = 0) -> str:
        for rec in by_pid.get(ppid, ()):
            if rec[2] <= at + 1 and rec[2] + rec[3] >= at - 1:
                own = seen_as(rec[0], rec[2])
                if own or depth > 10:
                    return own or rec[6]
                return f"{parent(rec[1], rec[2], depth + 1)} > {rec[6]}"
        alive = [k for t, k, _, _ in sampled.get(ppid, ()) if t <= at + 2]
        return alive[-1] if alive else "?"

    table: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for pid, ppid, started, _, user, system, comm in records:
        name = seen_as(pid, started)
        if name is None:
            chain = f"{parent(ppid, started)} > {comm}".split(" > ")
            name = " > ".join(chain[:1] + chain[-1:])
        row = table[name]
        row[0] += user
        row[1] += system
        row[2] += 1
    for pid, entries in sampled.items():  # still running at the end: the sampler's CPU
        for started, name, first, last in entries:
            if not any(abs(rec[2] - started) <= 2 for rec in by_pid.get(pid, ())):
                table[name][0] += last - first
                table[name][2] += 1
    total = sum(u + s for u, s, _ in table.values())
    print(f"{total:.0f} CPU-s in {sum(int(n) for _, _, n in table.values())} processes")
    print(f"{'CPU-s':>8} {'user':>8} {'system':>8} {'procs':>6}  kind")
    for name, (u, s, n) in sorted(table.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]:
        print(f"{u + s:8.1f} {u:8.1f} {s:8.1f} {int(n):6d}  {name}")


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop", "sample", "report"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    verb, folder = sys.argv[1], Path(sys.argv[2])
    if verb == "sample":
        sample(folder)
    elif verb == "report":
        report(folder)
    elif verb == "start":
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "pacct").write_bytes(b"")
        subprocess.run(["accton", str(folder / "pacct")], check=True, capture_output=True)
        proc = subprocess.Popen(
            [sys.executable, __file__, "sample", str(folder)],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        (folder / "sampler.pid").write_text(str(proc.pid))
    else:
        subprocess.run(["accton", "off"], check=True, capture_output=True)
        pid = int((folder / "sampler.pid").read_text())
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        report(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
