"""The task container's command: ``python3 -m det.exec.run -- <entrypoint…>``.

0. With ``DET_CONTEXT_READY`` set (the agent copies the context in after the start), wait for
   that marker: the context is then in place (:mod:`det.common.context_ready`); if it never
   comes, fail with one line and run nothing. SIGTERM/SIGINT end the wait (128+N).
1. ``cd`` to the workdir: ``$DET_WORKDIR``, else ``/run/determined/workdir`` if it exists.
2. Write the task info files the official ``determined`` package reads (best effort;
   ``$DET_INFO_DIR`` overrides the directory) and remove them when the task ends.
3. If ``startup-hook.sh`` exists there, source it with ``sh`` (``set -e``): variables it exports
   reach the entrypoint, as in Determined. If it fails, the task fails with its exit code.
4. A trial in an image with the official package loads its checkpoints as torch < 2.6 did
   (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` unless set: :func:`with_official_torch_loads`).
5. Run the entrypoint: a single argument is a shell command (``sh -c``); several are an argv.
   Determined's legacy trial-class form (``model_def:MyTrial``) runs the official package's
   harness (``python3 -m determined.exec.harness model_def:MyTrial``), which the image must
   carry, and gets a copy of the context at ``/run/determined/train/model`` as in Determined;
   on more than one slot (all the task's containers counted) it runs under det's torch launcher
   (``det.launch.torch_distributed --trial``), one chief for all slots, as Determined does.
   Every entrypoint gets this allocation's launcher ports (``C10D_PORT``…: det.launch.ports).
   SIGTERM/SIGINT are forwarded to the entrypoint's whole process group (so the training
   process gets them even under ``sh -c``); we exit with its code (128+N if killed by N).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

from ..common import context_ready, startup
from ..common.info import (
    OFFICIAL_INFO_DIR,
    get_cluster_info,
    remove_files,
    write_official_info_files,
)
from ..common.proc import exit_code, forward_signals, run_forwarding
from ..launch import ports
from . import allocation_watch

logger = logging.getLogger("det.exec.run")

DEFAULT_WORKDIR = "/run/determined/workdir"
# Where the official harness expects a clean copy of the context (it saves it with checkpoints).
MODEL_COPY = "/run/determined/train/model"
STARTUP_HOOK = "startup-hook.sh"

# Sources the hook in a POSIX shell, then dumps the resulting environment as JSON.
_HOOK_SCRIPT = (
    'set -e; . "./$1"; set +e; '
    'exec "$2" -c \'import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], "w"))\' "$3"'
)


# ``package.module:TrialClass``: Determined's legacy entrypoint for trial classes.
_TRIAL_CLASS = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def is_trial_class(entrypoint: list[str]) -> bool:
    return len(entrypoint) == 1 and bool(_TRIAL_CLASS.match(entrypoint[0].strip()))


def entrypoint_argv(
    entrypoint: list[str], python: str = "python3", total_slots: int = 1
) -> list[str]:
    """One string → ``sh -c``; a list → as is; a trial class → the official harness, under
    det's torch launcher when the task has more than one slot (all its containers' slots), as
    Determined runs trial classes: one chief for every slot (pure)."""
    if not entrypoint:
        raise ValueError("empty entrypoint")
    if is_trial_class(entrypoint):
        trial = entrypoint[0].strip()
        if total_slots > 1:
            return [python, "-m", "det.launch.torch_distributed", "--trial", trial]
        return [python, "-m", "determined.exec.harness", trial]
    if len(entrypoint) == 1:
        return ["sh", "-c", entrypoint[0]]
    return list(entrypoint)


def trial_class_problem(env: dict[str, str], have_official: bool) -> str | None:
    """Why a trial-class entrypoint cannot run here, or None (pure)."""
    if not have_official:
        return (
            "a trial-class entrypoint (module:Class) needs the official determined package in"
            " the task image (pip install determined==0.38.1); or use a script entrypoint"
        )
    return None


def total_slots(env: dict[str, str]) -> int:
    """The task's slots, every container's (the master's ``DET_CONTAINER_SLOT_COUNTS``), else
    this container's (pure)."""
    try:
        counts = json.loads(env.get("DET_CONTAINER_SLOT_COUNTS") or "[]")
        if counts:
            return sum(int(n) for n in counts)
        return max(1, len(json.loads(env.get("DET_SLOT_IDS") or "[]")))
    except (ValueError, TypeError):
        return 1


#: torch >= 2.6 loads with ``weights_only=True`` unless told otherwise; this variable tells it.
TORCH_NO_WEIGHTS_ONLY = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


def with_official_torch_loads(env: dict[str, str], have_official: bool) -> dict[str, str]:
    """The environment a trial runs with (pure). The official package (0.38.1) restores a
    ``PyTorchTrial``'s or ``Trainer``'s state with ``torch.load`` and no ``weights_only``, which
    torch >= 2.6 refuses for its pickled optimizer and RNG state (``Weights only load failed``):
    a paused, continued or restarted trial ended in ERROR. Trials in an image that has the
    official package load their own checkpoints as torch < 2.6 did; a value the user set
    (config or startup hook) wins, and commands, notebooks and images without the package are
    left as torch made them."""
    if env.get("DET_TASK_TYPE") != "TRIAL" or not have_official or TORCH_NO_WEIGHTS_ONLY in env:
        return env
    return {**env, TORCH_NO_WEIGHTS_ONLY: "1"}


def choose_workdir(env: dict[str, str], exists: bool) -> str | None:
    """The directory to run in, or None to stay where we are (pure)."""
    if env.get("DET_WORKDIR"):
        return env["DET_WORKDIR"]
    return DEFAULT_WORKDIR if exists else None


def run_startup_hook(env: dict[str, str]) -> tuple[int, dict[str, str]]:
    """Source ``startup-hook.sh`` if present; returns (exit code, environment after it)."""
    if not os.path.isfile(STARTUP_HOOK):
        return 0, env
    logger.info("running %s", STARTUP_HOOK)
    with tempfile.NamedTemporaryFile("r", suffix=".json", prefix="det-hook-env-") as out:
        cmd = ["sh", "-c", _HOOK_SCRIPT, "sh", STARTUP_HOOK, sys.executable, out.name]
        proc = subprocess.Popen(cmd, env=env)
        with forward_signals(proc):
            code = exit_code(proc.wait())
        if code != 0:
            return code, env
        new_env = json.load(out)
    return 0, {str(k): str(v) for k, v in new_env.items()}


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python3 -m det.exec.run -- ENTRYPOINT...", file=sys.stderr)
        return 2
    startup.mark_process_start()
    startup.mark("imports done")
    env = dict(os.environ)
    if env.get(context_ready.ENV):
        problem = wait_for_context(env)
        if problem is not None:
            print(f"det.exec.run: {problem}", file=sys.stderr)
            return 1
        startup.mark("context in place")
    workdir = choose_workdir(env, os.path.isdir(DEFAULT_WORKDIR))
    if workdir is not None:
        os.chdir(workdir)
    info = get_cluster_info()
    written = []
    if info is not None:
        written = write_official_info_files(info, env.get("DET_INFO_DIR", OFFICIAL_INFO_DIR))
    copied = None
    if info is not None and is_trial_class(argv):
        copied = copy_model_definition(".", env.get("DET_MODEL_COPY", MODEL_COPY))
    try:
        return _run(argv, env)
    finally:
        remove_files(written)
        if copied is not None:
            shutil.rmtree(copied, ignore_errors=True)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def wait_for_context(env: dict[str, str]) -> str | None:
    """Wait for the agent's copy of the context; None when it is in place, else why not. As
    the container's PID 1 we would ignore SIGTERM by default: a kill during the copy ends us."""
    previous = {sig: signal.signal(sig, _exit_on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    startup.mark("waiting for the context")
    try:
        return context_ready.wait_for(env[context_ready.ENV], context_ready.wait_seconds(env))
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def copy_model_definition(source: str, target: str) -> str | None:
    """A copy of the context before the entrypoint runs (best effort); the path, if we made it."""
    if os.path.exists(target):
        return None
    try:
        shutil.copytree(source, target, symlinks=True)
    except OSError as e:
        logger.warning("could not copy the model definition to %s: %s", target, e)
        return None
    return target


def _run(argv: list[str], env: dict[str, str]) -> int:
    code, env = run_startup_hook(env)
    if code != 0:
        print(f"det.exec.run: {STARTUP_HOOK} failed with exit code {code}", file=sys.stderr)
        return code
    if is_trial_class(argv):
        have_official = importlib.util.find_spec("determined") is not None
        problem = trial_class_problem(env, have_official)
        if problem is not None:
            print(f"det.exec.run: {problem}", file=sys.stderr)
            return 2
    env = with_official_torch_loads(env, importlib.util.find_spec("determined") is not None)
    # This allocation's own launcher and Core API ports (two tasks of one host never share one).
    env = ports.with_ports(env)
    gang = ports.gang_line(env)
    if gang is not None:  # where this container runs and meets the others, in the trial's log
        print(f"det.exec.run: {gang}", file=sys.stderr, flush=True)
    cmd = entrypoint_argv(argv, sys.executable, total_slots(env))
    startup.mark("entrypoint started")
    try:
        # A gang's container stops once the master ended its allocation (a peer's machine
        # died: nobody else would tell it).
        watch = functools.partial(allocation_watch.watch, env)
        return run_forwarding(cmd, group=True, on_start=watch, env=env)
    except FileNotFoundError as e:
        print(f"det.exec.run: cannot run {cmd[0]!r}: {e}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
