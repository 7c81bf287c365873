"""Loaded by every interpreter that ``bench/scale.py --routes`` starts (this directory leads
their ``PYTHONPATH``): in a master's front process, the WSGI app ``det.master.server.front_server``
serves is wrapped to count, per route, the requests and the CPU time of the thread that ran the
app for each (``time.thread_time``: the app's own work, from the environ waitress built to the
answer it returns; waitress's parsing, event loop and writing are not in it). Every second the
process writes ``{route: [cpu_seconds, requests], "": [process_cpu_seconds, 0], "@": [its
time.time(), 0]}`` to
``$DET_BENCH_ROUTES/<pid>.json`` (a new file renamed over the old).

With ``DET_BENCH_WAITS`` too (``bench/scale.py --waits``), each front also appends to
``$DET_BENCH_ROUTES/<pid>.waits``, every second, one JSON line of what came since: each app call
as ``[time.time() at its end, route, wall seconds, CPU seconds]`` and each wait for one of the
pool's connections as ``[time.time() at its end, seconds]``: where a request's time in the app
went when it was not on the CPU. And around the app (``served``): each request as ``[its end,
route, seconds from the read of its first bytes to its queueing for a worker, seconds queued,
seconds of the worker's whole service]``; and the event loop's work between two waits in
``epoll`` (``turns``) as ``[its end, wall seconds, the main thread's CPU seconds, events]``.

PostgreSQL's side is counted too, per route, as ``"pg <route>": [backend_cpu_seconds, uses]``:
the run time (``/proc/<pid>/schedstat``, in nanoseconds) of the server process behind each of
the pool's connections from the moment a thread takes it to the moment it gives it back,
charged to the route the thread was serving (``pg (none)``: taken outside an app call, e.g. by
the control loop). A pooled connection serves one thread at a time, so that is the work of the
statements the route sent (and of any notification the connection received meanwhile). And
per statement, for every connection of the process (the pool's and the control loop's), as
``"sql <its first 100 characters>": [backend_cpu_seconds, executions]``: the backend's run time
across each ``Cursor.execute`` (a round trip: the statement and its answer). Once the master
has run ``DET_BENCH_PLANS_AFTER`` seconds (the tables filled and analysed), each statement's
next execution is also explained, with its parameters, on a connection of this file's own, and a
plan with a sequential scan is appended to ``$DET_BENCH_ROUTES/<pid>.plans`` (a JSON line).

Each front also reports its garbage collections (``gc.callbacks``: per generation the count, the
wall and the CPU time, as ``"gc <generation>"`` and ``"gccpu <generation>"``, and every one over
10 ms appended to ``$DET_BENCH_ROUTES/<pid>.pauses`` as ``[its end, generation, wall]``), each
route's ``getrusage(RUSAGE_THREAD)`` across its app calls (``"ru <route>"``: user and system
seconds, context switches waiting and preempted), and the CPU of its threads alive at each write
by name (``"thread <name>"``). ``DET_BENCH_NO_PG_CPU`` leaves PostgreSQL's accounting out (its
``/proc`` reads give the interpreter's lock up around every statement);
``DET_BENCH_SWITCH_INTERVAL`` and ``DET_BENCH_GC_THRESHOLD`` (``a,b,c``) set the front's
``sys.setswitchinterval`` and ``gc.set_threshold`` (``bench/scale.py --switch-interval``,
``--gc-threshold``).

With ``DET_BENCH_HEAP_AFTER`` (seconds; ``bench/scale.py --heap``), each front writes once, that
long after it starts, a census of the objects its collector tracks to ``<pid>.heap``: the count
in each generation, the frozen ones, its threads, and the old generation's most common types.

Bench-only: nothing in det imports it, and without ``DET_BENCH_ROUTES`` it does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import re
import resource
import sys
import threading
import time
from typing import Any

# A path segment with a digit in it (an id, a UUID, an allocation id, a numbered agent) but the
# API's version: one route for every id.
_ID = re.compile(r"/(?!v\d+(?:/|$))[^/]*\d[^/]*")


def _run_ns(pid: int) -> int:
    """The nanoseconds process ``pid`` has run on a CPU (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


class _Routes:
    def __init__(self, out: str, waits: bool) -> None:
        self.out = out
        self.stats: dict[str, list[float]] = {}
        self.lock = threading.Lock()
        #: With --waits: the app calls and the pool's waits (appended by the threads, atomic;
        #: the writer writes what it has not written yet).
        self.calls: list[tuple[float, str, float, float]] | None = [] if waits else None
        self.pool_waits: list[tuple[float, float]] = []
        self.written = (0, 0, 0, 0)
        self.pauses_written = 0
        self.local = threading.local()
        self.gc_stats: list[list[float]] = []
        self.gc_cpu: list[list[float]] = []
        self.pauses: list[tuple[float, int, float]] = []
        #: With --waits: each request's way through the front, and each turn of the event loop.
        self.served: list[tuple[float, str, float, float, float]] = []
        self.turns: list[tuple[float, float, float, int]] = []

    def wrap(self, app: Any) -> Any:
        def counted(environ: dict[str, Any], start_response: Any) -> Any:
            ru = resource.getrusage(resource.RUSAGE_THREAD)
            began = time.thread_time()
            wall = time.perf_counter()
            route = (
                environ.get("REQUEST_METHOD", "")
                + " "
                + _ID.sub("/:id", environ.get("PATH_INFO", ""))
            )
            self.local.route = route
            try:
                return app(environ, start_response)
            finally:
                self.local.route = None
                spent = time.thread_time() - began
                ru1 = resource.getrusage(resource.RUSAGE_THREAD)
                if self.calls is not None:
                    self.calls.append((time.time(), route, time.perf_counter() - wall, spent))
                with self.lock:
                    s = self.stats.setdefault(route, [0.0, 0])
                    s[0] += spent
                    s[1] += 1
                    r = self.stats.setdefault("ru " + route, [0.0, 0, 0.0, 0.0, 0.0, 0.0])
                    r[0] += ru1.ru_utime - ru.ru_utime
                    r[1] += 1
                    r[2] += ru1.ru_stime - ru.ru_stime
                    r[3] += ru1.ru_nvcsw - ru.ru_nvcsw
                    r[4] += ru1.ru_nivcsw - ru.ru_nivcsw

        return counted

    def timed_pool(self, pool: Any) -> None:
        """Times each wait for one of ``pool``'s connections (the fronts' psycopg pool)."""
        getconn = pool.getconn

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return getconn(*args, **kwargs)
            finally:
                self.pool_waits.append((time.time(), time.perf_counter() - began))

        pool.getconn = timed

    def pg_per_route(self, pool: Any) -> None:
        """Charges the backend CPU of ``pool``'s connections to the routes that held them."""
        getconn, putconn = pool.getconn, pool.putconn

        def taken(*args: Any, **kwargs: Any) -> Any:
            conn = getconn(*args, **kwargs)
            pid = conn.info.backend_pid
            held = self.local.__dict__.setdefault("held", {})
            held[id(conn)] = (pid, _run_ns(pid))
            return conn

        def given(conn: Any, *args: Any, **kwargs: Any) -> Any:
            start = self.local.__dict__.get("held", {}).pop(id(conn), None)
            if start is not None:
                spent = (_run_ns(start[0]) - start[1]) / 1e9
                key = "pg " + (getattr(self.local, "route", None) or "(none)")
                with self.lock:
                    s = self.stats.setdefault(key, [0.0, 0])
                    s[0] += max(0.0, spent)
                    s[1] += 1
            return putconn(conn, *args, **kwargs)

        pool.getconn, pool.putconn = taken, given

    def pg_per_statement(self, conninfo: str) -> None:
        """Charges the backend CPU of each ``Cursor.execute`` to its statement's text (and
        explains each statement once, after ``DET_BENCH_PLANS_AFTER`` seconds)."""
        import psycopg

        execute = psycopg.Cursor.execute
        routes = self
        plans_at = time.monotonic() + float(os.environ.get("DET_BENCH_PLANS_AFTER", "30"))
        explained: set[str] = set()
        explainer: list[Any] = []
        explain_lock = threading.Lock()

        def explain(key: str, query: Any, args: tuple[Any, ...]) -> None:
            with explain_lock:
                if key in explained:
                    return
                explained.add(key)
                try:
                    if not explainer:
                        explainer.append(psycopg.connect(conninfo, autocommit=True))
                    rows = execute(
                        explainer[0].cursor(), "EXPLAIN " + str(query), *args[:1]
                    ).fetchall()
                except psycopg.Error:
                    return  # not a plannable statement (BEGIN, NOTIFY ...)
            plan = "\n".join(str(r[0]) for r in rows)
            if "Seq Scan" in plan:
                with open(os.path.join(routes.out, f"{os.getpid()}.plans"), "a") as f:
                    f.write(json.dumps({"statement": key[4:], "plan": plan}) + "\n")

        def measured(cur: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            text = query if isinstance(query, str) else getattr(query, "_obj", str(query))
            key = "sql " + " ".join(str(text).split())[:100]
            if key not in explained and time.monotonic() > plans_at and isinstance(text, str):
                explain(key, text, args)
            pid = cur.connection.info.backend_pid
            began = _run_ns(pid)
            try:
                return execute(cur, query, *args, **kwargs)
            finally:
                spent = (_run_ns(pid) - began) / 1e9
                with routes.lock:
                    s = routes.stats.setdefault(key, [0.0, 0])
                    s[0] += max(0.0, spent)
                    s[1] += 1

        psycopg.Cursor.execute = measured  # type: ignore[method-assign]

    def time_front(self) -> None:
        """Times each request's way through the front around the app (with --waits): from the
        read that brought its first bytes to its parsed request's queueing for a thread, its
        wait in the queue, and the thread's whole service of it (the app and the writing of the
        answer: waitress sends from the worker thread); and each turn of the event loop: its
        wait in ``epoll``, the work before the wait (asking connections) and after it (reading,
        accepting, writing what workers left), and the main thread's CPU in that work. A request
        whose bytes came while the loop worked waits for the rest of the turn."""
        from waitress.channel import HTTPChannel

        from det.master import dispatch, evloop

        served, turns = self.served, self.turns
        handle_read = HTTPChannel.handle_read

        def read(channel: Any) -> None:
            if channel.request is None and not getattr(channel, "_bench_read", 0.0):
                channel._bench_read = time.perf_counter()
            handle_read(channel)

        add_task = dispatch.PriorityDispatcher.add_task

        def queued(pool: Any, task: Any) -> None:
            task._bench_queued = time.perf_counter()
            add_task(pool, task)

        service = HTTPChannel.service

        def serve(channel: Any) -> None:
            began = time.perf_counter()
            at = getattr(channel, "_bench_queued", began)
            first = getattr(channel, "_bench_read", 0.0) or at
            channel._bench_read = 0.0
            request = channel.requests[0] if channel.requests else None
            route = (
                (request.command or "") + " " + _ID.sub("/:id", request.path or "")
                if request is not None
                else "?"
            )
            try:
                service(channel)
            finally:
                served.append(
                    (time.time(), route, at - first, began - at, time.perf_counter() - began)
                )

        HTTPChannel.handle_read = read  # type: ignore[method-assign]
        dispatch.PriorityDispatcher.add_task = queued  # type: ignore[method-assign]
        HTTPChannel.service = serve  # type: ignore[method-assign]

        class TimedEpoll:
            """The loop's ``epoll``, timing the work between two of its waits."""

            def __init__(self, epoll: Any) -> None:
                self.epoll = epoll
                self.returned = time.perf_counter()
                self.cpu = time.thread_time()
                self.events = 0

            def poll(self, timeout: float) -> Any:
                t0, c0 = time.perf_counter(), time.thread_time()
                # The work since the last wait ended: its events handled (reads, accepts,
                # writes), then the connections asked for this wait. (end, wall, the main
                # thread's CPU in it, the events it handled.)
                turns.append((time.time(), t0 - self.returned, c0 - self.cpu, self.events))
                events = self.epoll.poll(timeout)
                self.returned, self.cpu = time.perf_counter(), time.thread_time()
                self.events = len(events)
                return events

            def __getattr__(self, name: str) -> Any:
                return getattr(self.epoll, name)

        loop_init = evloop.ReadinessLoop.__init__

        def init(loop: Any, *args: Any, **kwargs: Any) -> None:
            loop_init(loop, *args, **kwargs)
            loop.epoll = TimedEpoll(loop.epoll)

        evloop.ReadinessLoop.__init__ = init  # type: ignore[method-assign]

    def time_gc(self) -> None:
        """Counts each collection's wall and CPU time by generation (the collector runs in
        whichever thread allocated past the threshold, inside that thread's CPU time) and
        keeps those over 10 ms."""
        import gc

        self.gc_stats = [[0.0, 0] for _ in range(3)]
        self.gc_cpu = [[0.0, 0] for _ in range(3)]
        began = [0.0, 0.0]  # perf_counter, thread_time

        def callback(phase: str, info: dict[str, int]) -> None:
            # No lock: the collector runs in one thread at a time, and may run inside a
            # ``with self.lock`` of this thread (an allocation there), which would deadlock.
            if phase == "start":
                began[:] = [time.perf_counter(), time.thread_time()]
                return
            wall = time.perf_counter() - began[0]
            generation = info["generation"]
            for stat, spent in (
                (self.gc_stats, wall),
                (self.gc_cpu, time.thread_time() - began[1]),
            ):
                stat[generation][0] += spent
                stat[generation][1] += 1
            if wall > 0.01:
                self.pauses.append((time.time(), generation, wall))

        gc.callbacks.append(callback)

    def census_after(self, seconds: float) -> None:
        """Once, ``seconds`` after the front starts: the objects the collector tracks, by
        generation, and the old generation's (what a full collection scans) by type, to
        ``<pid>.heap``."""
        import collections
        import gc

        time.sleep(seconds)
        sizes = [len(gc.get_objects(g)) for g in range(3)]
        by_type = collections.Counter(type(o).__qualname__ for o in gc.get_objects(2))
        census = {
            "at": time.time(),
            "generations": sizes,
            "frozen": gc.get_freeze_count(),
            "threads": threading.active_count(),
            "old": by_type.most_common(25),
        }
        with open(os.path.join(self.out, f"{os.getpid()}.heap"), "w") as f:
            json.dump(census, f)

    def dump_forever(self) -> None:
        os.makedirs(self.out, exist_ok=True)
        path = os.path.join(self.out, f"{os.getpid()}.json")
        while True:
            time.sleep(1.0)
            with self.lock:
                data = {k: list(v) for k, v in self.stats.items()}
            for generation, (spent, n) in enumerate(self.gc_stats):
                data[f"gc {generation}"] = [spent, n]
            for generation, (spent, n) in enumerate(self.gc_cpu):
                data[f"gccpu {generation}"] = [spent, n]
            # The CPU of the threads alive now, by name without its digits (waitress's
            # workers, det's loops, the main thread: the event loop), from /proc in clock ticks:
            # a thread that ended took its CPU with it, so these are for long-lived threads.
            # (Not pthread_getcpuclockid: a thread that ends meanwhile leaves it reading freed
            # memory, and the front died of it.)
            by_name: dict[str, float] = {}
            tick = os.sysconf("SC_CLK_TCK")
            for t in threading.enumerate():
                try:
                    with open(f"/proc/self/task/{t.native_id}/stat", "rb") as f:
                        fields = f.read().rsplit(b")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                cpu = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
                name = "thread " + re.sub(r"\d+", "N", t.name)
                by_name[name] = by_name.get(name, 0.0) + cpu
            for name, cpu in by_name.items():
                data[name] = [cpu, 0]
            data[""] = [time.process_time(), 0]
            data["@"] = [time.time(), 0]
            with open(path + ".tmp", "w") as f:
                json.dump(data, f)
            os.replace(path + ".tmp", path)
            n_pauses = len(self.pauses)
            if n_pauses > self.pauses_written:
                with open(os.path.join(self.out, f"{os.getpid()}.pauses"), "a") as f:
                    for pause in self.pauses[self.pauses_written : n_pauses]:
                        f.write(json.dumps(pause) + "\n")
                self.pauses_written = n_pauses
            if self.calls is not None:
                n_calls, n_waits = len(self.calls), len(self.pool_waits)
                calls = self.calls[self.written[0] : n_calls]
                pool_waits = self.pool_waits[self.written[1] : n_waits]
                n_served, n_turns = len(self.served), len(self.turns)
                served = self.served[self.written[2] : n_served]
                turns = self.turns[self.written[3] : n_turns]
                self.written = (n_calls, n_waits, n_served, n_turns)
                with open(os.path.join(self.out, f"{os.getpid()}.waits"), "a") as f:
                    line = {"calls": calls, "pool": pool_waits, "served": served, "turns": turns}
                    f.write(json.dumps(line) + "\n")


class _WrapFrontServer(importlib.abc.MetaPathFinder):
    """Patches ``front_server`` right after ``det.master.server`` runs."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "det.master.server":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            original = module.front_server

            def front_server(state: Any, app: Any, sock: Any, handoff: Any) -> Any:
                out = os.environ.get("DET_BENCH_ROUTES")
                if not out:
                    return original(state, app, sock, handoff)
                routes = _Routes(out, waits=bool(os.environ.get("DET_BENCH_WAITS")))
                if routes.calls is not None:
                    routes.timed_pool(state.pool)
                    routes.time_front()
                if not os.environ.get("DET_BENCH_NO_PG_CPU"):
                    routes.pg_per_route(state.pool)
                    routes.pg_per_statement(state.pool.conninfo)
                routes.time_gc()
                if os.environ.get("DET_BENCH_SWITCH_INTERVAL"):
                    sys.setswitchinterval(float(os.environ["DET_BENCH_SWITCH_INTERVAL"]))
                if os.environ.get("DET_BENCH_GC_THRESHOLD"):
                    import gc

                    gc.set_threshold(*map(int, os.environ["DET_BENCH_GC_THRESHOLD"].split(",")))
                threading.Thread(target=routes.dump_forever, daemon=True).start()
                if os.environ.get("DET_BENCH_HEAP_AFTER"):
                    after = float(os.environ["DET_BENCH_HEAP_AFTER"])
                    threading.Thread(target=routes.census_after, args=(after,), daemon=True).start()
                return original(state, routes.wrap(app), sock, handoff)

            module.front_server = front_server

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("DET_BENCH_ROUTES"):
    sys.meta_path.insert(0, _WrapFrontServer())
