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
import itertools
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

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
        if script:
            return f"python {os.path.basename(script)}"
        module = next((b for a, b in itertools.pairwise(cmdline) if a == "-m"), None)
        if module:
            return f"python -m {module}"
        code = next((b for a, b in itertools.pairwise(cmdline) if a == "-c"), None)
        if code:  # the first words of the code, which say what it is
            return "python -c " + " ".join(code.split())[:40]
        return "python " + " ".join(cmdline[1:3])[:40] if len(cmdline) > 1 else "python"
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


_URL_PORT = re.compile(r"https?://[^/\s:]+:(\d+)")


def _tags(pid: str, args: list[str]) -> tuple[str, str]:
    """What a process's environment says of its origin: the test file that started it (pytest's
    ``PYTEST_CURRENT_TEST``, which a test's subprocesses inherit) and the port of the master it
    talks to (``DET_MASTER`` or ``DET_MASTER_URL``, else the first ``http://host:port`` of its
    command line, as an agent's ``--master-url``: task containers have no test, but a master)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return "", ""
    test = port = ""
    for item in raw.split(b"\0"):
        if item.startswith(b"PYTEST_CURRENT_TEST="):
            test = item[20:].decode(errors="replace").split("::")[0]
        elif item.startswith((b"DET_MASTER=", b"DET_MASTER_URL=")):
            url = item.split(b"=", 1)[1].decode(errors="replace").rstrip("/")
            port = url.rsplit(":", 1)[-1] if url.count(":") >= 2 else ""
    if not port:
        found = _URL_PORT.search(" ".join(args))
        port = found.group(1) if found else ""
    return test, port


def sample(folder: Path) -> None:
    """Once a second until SIGTERM: pid, start, kind, CPU at first and last sight, test file and
    master port (``_tags``), to ``folder/pids.tsv`` (rewritten every 10 s and at the end)."""
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
                seen[(pid, start)] = [kind(args, comm), cpu, cpu, *_tags(pid, args)]
            else:
                entry[2] = cpu
        if stop[0] or time.monotonic() - written > 10:
            tmp = folder / "pids.tsv.tmp"
            with tmp.open("w") as f:
                for (pid, start), (k, first, last, test, port) in seen.items():
                    f.write(f"{pid}\t{start}\t{k}\t{first}\t{last}\t{test}\t{port}\n")
            tmp.replace(folder / "pids.tsv")
            written = time.monotonic()
        if stop[0]:
            return
        time.sleep(1.0)


def _comp(v: int) -> float:
    return ((v & 0x1FFF) << (3 * (v >> 13))) / 100  # comp_t, in AHZ (100) ticks


class _Sampled(NamedTuple):
    started: float  # seconds since the epoch
    kind: str
    first: float  # CPU seconds at first and last sight
    last: float
    test: str  # the test file that started it, if its environment says
    port: str  # the port of the master it talks to, if its environment says


def _load_sampled(folder: Path, boot: int) -> dict[int, list[_Sampled]]:
    sampled: dict[int, list[_Sampled]] = collections.defaultdict(list)
    for line in (folder / "pids.tsv").read_text().splitlines():
        pid, start, k, first, last, *tags = line.split("\t")
        test, port = [*tags, "", ""][:2]
        sampled[int(pid)].append(
            _Sampled(boot + int(start) / HZ, k, float(first), float(last), test, port)
        )
    return sampled


def report(folder: Path, top: int = 40) -> None:
    """Three tables: CPU by kind of process, then (when the sampler saw test files) by test file,
    then by test file and kind (what of a file's CPU is its masters, its containers' ...).
    A process is charged to its own test file, else to its nearest sampled ancestor's, else (a
    task container's, started by dockerd) to the test whose processes talked to the same master
    port nearest in time; the worker processes' own CPU per test is in ``worker-*.tsv`` when the
    tests ran with ``DET_TEST_CPU_LOG`` set to ``folder`` (tests/conftest.py)."""
    stat = Path("/proc/stat").read_text().splitlines()
    boot = next(int(line.split()[1]) for line in stat if line.startswith("btime"))
    sampled = _load_sampled(folder, boot)
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
    # master port -> (time, test file) of the processes that carried both
    ports: dict[str, list[tuple[float, str]]] = collections.defaultdict(list)
    for entries in sampled.values():
        for e in entries:
            if e.port and e.test:
                ports[e.port].append((e.started, e.test))

    def seen_as(pid: int, started: float) -> _Sampled | None:
        return next((e for e in sampled.get(pid, ()) if abs(e.started - started) <= 2), None)

    def test_of(e: _Sampled) -> str:
        if e.test or not e.port or not ports.get(e.port):
            return e.test
        return min(ports[e.port], key=lambda tt: abs(tt[0] - e.started))[1]

    def parent(ppid: int, at: float, depth: int = 0) -> tuple[str, str]:
        """(kind, test file) of the nearest sampled ancestor."""
        for rec in by_pid.get(ppid, ()):
            if rec[2] <= at + 1 and rec[2] + rec[3] >= at - 1:
                own = seen_as(rec[0], rec[2])
                if own or depth > 10:
                    return (own.kind, test_of(own)) if own else (rec[6], "")
                kind_, test = parent(rec[1], rec[2], depth + 1)
                return f"{kind_} > {rec[6]}", test
        alive = [e for e in sampled.get(ppid, ()) if e.started <= at + 2]
        return (alive[-1].kind, test_of(alive[-1])) if alive else ("?", "")

    table: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    tests: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    both: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])

    worker_logs = sorted(folder.glob("worker-*.tsv"))

    def charge(name: str, test: str, user: float, system: float, into_kinds: bool = True) -> None:
        charged = [(name, table)] if into_kinds else []
        if not (worker_logs and name == "pytest worker"):  # else the logs say it test by test
            charged.append((test or f"(no test) {name.split(' > ')[0]}", tests))
            charged.append((f"{test or '(no test)'} | {name}", both))
        for key, into in charged:
            row = into[key]
            row[0] += user
            row[1] += system
            row[2] += 1

    for pid, ppid, started, _, user, system, comm in records:
        own = seen_as(pid, started)
        if own is not None:
            charge(own.kind, test_of(own), user, system)
            continue
        kind_, test = parent(ppid, started)
        chain = f"{kind_} > {comm}".split(" > ")
        charge(" > ".join(chain[:1] + chain[-1:]), test, user, system)
    for pid, entries in sampled.items():  # still running at the end: the sampler's CPU
        for e in entries:
            if not any(abs(rec[2] - e.started) <= 2 for rec in by_pid.get(pid, ())):
                charge(e.kind, test_of(e), e.last - e.first, 0.0)
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    ends: list[tuple[float, float, str, str]] = []  # (end, start, worker, its last file)
    for log in worker_logs:  # the workers' own CPU, test by test (already in the kinds' table)
        version = log.name.split("-")[1]
        start = end = 0.0
        test = ""
        for line in log.read_text().splitlines():
            test, cpu, *timing = line.split("\t")
            test = test if version == mine else f"[{version}] {test}"
            charge("pytest worker (in-process)", test, float(cpu), 0.0, into_kinds=False)
            if timing:  # wall seconds, wall clock at the end
                end = float(timing[1])
                start = start or end - float(timing[0])
        if end:
            ends.append((end, start, log.stem, test))
    _print(table, top)
    if ends:  # the tail: a process out of work while others still run leaves cores idle
        last = max(e for e, _, _, _ in ends)
        print("\ntest processes: started after the first, ended before the last (s), last file")
        first = min(s for _, s, _, _ in ends)
        for end, start, name, test in sorted(ends):
            print(f"  {start - first:6.0f} {last - end:6.0f}  {name}  {test}")
    if any(k and not k.startswith("(no test)") for k in tests):
        print()
        _print(tests, top, "test file (or, with no test, the kind)")
        print()
        _print(both, top * 2, "test file | kind")


def _print(table: dict[str, list[float]], top: int, what: str = "kind") -> None:
    total = sum(u + s for u, s, _ in table.values())
    print(f"{total:.0f} CPU-s in {sum(int(n) for _, _, n in table.values())} processes")
    print(f"{'CPU-s':>8} {'user':>8} {'system':>8} {'procs':>6}  {what}")
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
