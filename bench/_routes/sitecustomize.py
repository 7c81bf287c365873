"""Loaded by every interpreter that ``bench/scale.py --routes`` starts (this directory leads
their ``PYTHONPATH``): in a master's front process, the WSGI app ``det.master.server.front_server``
serves is wrapped to count, per route, the requests and the CPU time of the thread that ran the
app for each (``time.thread_time``: the app's own work, from the environ waitress built to the
answer it returns; waitress's parsing, event loop and writing are not in it). Every second the
process writes ``{route: [cpu_seconds, requests], "": [process_cpu_seconds, 0], "@": [its
time.time(), 0]}`` to
``$DET_BENCH_ROUTES/<pid>.json`` (a new file renamed over the old).

Bench-only: nothing in det imports it, and without ``DET_BENCH_ROUTES`` it does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import threading
import time
from typing import Any

# A path segment with a digit in it (an id, a UUID, an allocation id, a numbered agent) but the
# API's version: one route for every id.
_ID = re.compile(r"/(?!v\d+(?:/|$))[^/]*\d[^/]*")


class _Routes:
    def __init__(self, out: str) -> None:
        self.out = out
        self.stats: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def wrap(self, app: Any) -> Any:
        def counted(environ: dict[str, Any], start_response: Any) -> Any:
            began = time.thread_time()
            route = (
                environ.get("REQUEST_METHOD", "")
                + " "
                + _ID.sub("/:id", environ.get("PATH_INFO", ""))
            )
            try:
                return app(environ, start_response)
            finally:
                spent = time.thread_time() - began
                with self.lock:
                    s = self.stats.setdefault(route, [0.0, 0])
                    s[0] += spent
                    s[1] += 1

        return counted

    def dump_forever(self) -> None:
        os.makedirs(self.out, exist_ok=True)
        path = os.path.join(self.out, f"{os.getpid()}.json")
        while True:
            time.sleep(1.0)
            with self.lock:
                data = {k: list(v) for k, v in self.stats.items()}
            data[""] = [time.process_time(), 0]
            data["@"] = [time.time(), 0]
            with open(path + ".tmp", "w") as f:
                json.dump(data, f)
            os.replace(path + ".tmp", path)


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
                routes = _Routes(out)
                threading.Thread(target=routes.dump_forever, daemon=True).start()
                return original(state, routes.wrap(app), sock, handoff)

            module.front_server = front_server

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("DET_BENCH_ROUTES"):
    sys.meta_path.insert(0, _WrapFrontServer())
