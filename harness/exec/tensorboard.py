"""A TensorBoard task (``det tensorboard start``): ``python3 -m det.exec.tensorboard``.

1. Fetches the trials' TensorBoard files from checkpoint storage (``DET_TENSORBOARD_SOURCES``:
   a JSON list of ``{"storage": checkpoint_storage, "experimentId", "trialId"}``; the files of
   trial T of experiment E are under ``<cluster id>/tensorboard/experiment/E/trial/T``, see
   ``det.core._tensorboard``) into ``<logdir>/experiment/E/trial/T`` (TensorBoard's run name),
   and again every few seconds while it runs (new and grown files).
2. Runs TensorBoard (the task image's package) in this process with ``--path_prefix
   /proxy/<task id>``, the URL the master's proxy serves it under, and serves it on
   ``DET_TASK_PORT`` (where the agent and the master's proxy look for the service) once its app
   is built. Every request must carry the master's credential for this task
   (``Authorization: token $DET_SERVICE_TOKEN``, which the proxy adds): TensorBoard has no
   authentication of its own, and tasks share the agent's network (host networking), loopback
   included, so TensorBoard gets no port of its own.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any, Iterable, TypedDict

from det import storage
from det.core._tensorboard import sync_path

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from det.common.jsontypes import JSONObject

logger = logging.getLogger("det.exec.tensorboard")

FETCH_INTERVAL = 5.0


class TensorBoardSource(TypedDict):
    """A trial the TensorBoard serves (the master's ``rows.tasks.TensorBoardSource``): its ids
    and its experiment's ``checkpoint_storage``."""

    experimentId: int
    trialId: int
    storage: JSONObject


class Fetcher:
    """Copies each source's files that are new or changed (by size) into ``logdir``."""

    def __init__(self, cluster_id: str, sources: list[TensorBoardSource], logdir: pathlib.Path):
        self.logdir = logdir
        self._sizes: dict[str, int] = {}
        self._sources = []
        for src in sources:
            cfg = src["storage"]
            manager = storage.from_config(cfg, container_path=storage.in_container_path(cfg))
            path = sync_path(cluster_id, int(src["experimentId"]), int(src["trialId"]))
            parent, _, leaf = path.rpartition("/")
            local = logdir / "experiment" / str(src["experimentId"]) / "trial" / str(src["trialId"])
            self._sources.append((manager.under(parent), leaf, local))

    def fetch(self) -> int:
        """One pass over every source; how many files were copied."""
        copied = 0
        for manager, leaf, local in self._sources:
            try:
                listing = manager.list_files(leaf)
            except Exception as e:  # storage unreachable for now: the next pass tries again
                logger.warning("cannot list %s: %s", leaf, e)
                continue
            key = str(local)
            changed = {
                rel
                for rel, size in listing.items()
                if not rel.endswith("/") and self._sizes.get(f"{key}/{rel}") != size
            }
            if not changed:
                continue
            with tempfile.TemporaryDirectory(prefix="det-tb-fetch-") as tmp:
                try:
                    manager.download(leaf, tmp, lambda rel, c=changed: rel in c)  # type: ignore[misc]
                except storage.CheckpointNotFoundError:
                    continue
                for rel in sorted(changed):
                    src = pathlib.Path(tmp, rel)
                    if not src.is_file():
                        continue
                    dst = local / rel
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    # In place (same inode): TensorBoard keeps reading a file it has open.
                    with open(src, "rb") as fin, open(dst, "wb") as fout:
                        shutil.copyfileobj(fin, fout)
                    self._sizes[f"{key}/{rel}"] = listing[rel]
                    copied += 1
        return copied


def authorized(value: str, token: str) -> bool:
    """Whether an ``Authorization`` header's value is ``token <token>`` (pure)."""
    scheme, _, given = value.strip().partition(" ")
    return scheme.lower() == "token" and hmac.compare_digest(given.strip(), token)


_REFUSED = b"this TensorBoard is reached through the master's proxy\n"


def guarded(app: WSGIApplication, token: str) -> WSGIApplication:
    """TensorBoard's WSGI app behind the master's credential: every request without it gets
    403 and never reaches TensorBoard."""

    def wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if authorized(str(environ.get("HTTP_AUTHORIZATION") or ""), token):
            return app(environ, start_response)
        start_response(
            "403 Forbidden",
            [("Content-Type", "text/plain"), ("Content-Length", str(len(_REFUSED)))],
        )
        return [_REFUSED]

    return wsgi


class Gate:
    """TensorBoard's server (its ``server_class``): serves the app, guarded, on the task port
    itself, so TensorBoard has no port of its own that another task on the agent could reach
    (the agent runs tasks with host networking: they share its loopback)."""

    port = 0
    token = ""

    def __init__(self, wsgi_app: Any, flags: Any) -> None:
        # TensorBoard's own dependency, in every image that has TensorBoard (not det's).
        from werkzeug import serving

        self._prefix = str(getattr(flags, "path_prefix", "") or "")
        self._server = serving.make_server(
            "0.0.0.0", self.port, guarded(wsgi_app, self.token), threaded=True
        )

    def serve_forever(self) -> None:
        print(f"det tensorboard: serving on port {self.port}", flush=True)
        self._server.serve_forever()

    def get_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self._prefix}/"

    def print_serving_message(self) -> None:
        pass


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    task_id = os.environ["DET_TASK_ID"]
    sources = json.loads(os.environ.get("DET_TENSORBOARD_SOURCES") or "[]")
    extra_args = json.loads(os.environ.get("DET_TENSORBOARD_ARGS") or "[]")
    try:
        # The task image's TensorBoard, run in this process (see Gate); not a det dependency.
        from tensorboard import default, program
    except ImportError:
        print(
            "det tensorboard: this task image has no 'tensorboard' package; use an image with"
            " it (det's default det-task image has it)",
            file=sys.stderr,
        )
        return 1
    Gate.port = int(os.environ["DET_TASK_PORT"])
    Gate.token = os.environ["DET_SERVICE_TOKEN"]
    logdir = pathlib.Path(tempfile.mkdtemp(prefix="det-tensorboard-"))
    fetcher = Fetcher(os.environ["DET_CLUSTER_ID"], sources, logdir)
    print(f"det tensorboard: fetched {fetcher.fetch()} files of {len(sources)} trials", flush=True)

    def refresh() -> None:
        while True:
            time.sleep(FETCH_INTERVAL)
            try:
                n = fetcher.fetch()
            except Exception as e:
                logger.warning("fetching TensorBoard files failed: %s", e)
                continue
            if n:
                print(f"det tensorboard: fetched {n} new or changed files", flush=True)

    board = program.TensorBoard(plugins=default.get_plugins(), server_class=Gate)
    board.configure(
        argv=[
            "",
            f"--logdir={logdir}",
            f"--path_prefix=/proxy/{task_id}",
            "--load_fast=false",
            *[str(a) for a in extra_args],
        ]
    )
    threading.Thread(target=refresh, daemon=True, name="det-tb-fetch").start()
    return int(board.main() or 0)


if __name__ == "__main__":
    sys.exit(main())
