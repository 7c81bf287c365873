"""Helpers for the ``det`` CLI tests: a master per test module, SimAgents, and a runner that calls
``det.cli.__main__.main`` in-process with an isolated token cache.

Test modules import the fixtures they use (``cli_master``, ``det``, ``sim_agents``) by name.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import new_database
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.conftest import ADMIN_PASSWORD, Master, MasterClient, start_master

REPO = Path(__file__).resolve().parents[2]

SIM_CONFIG = """
name: {name}
entrypoint: python3 train.py
searcher: {{name: random, metric: validation_loss, max_trials: {trials}, max_concurrent_trials: 2}}
hyperparameters:
  lr: {{type: double, minval: 0.01, maxval: 1.0}}
reproducibility: {{experiment_seed: 7}}
"""


def sim_config(name: str = "cli-sim", trials: int = 2) -> str:
    return SIM_CONFIG.format(name=name, trials=trials)


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Det:
    """Runs ``det ARGS`` in this process against one master, with its own config home."""

    def __init__(
        self, master: MasterClient, home: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.master = master
        self.home = home
        self.capsys = capsys
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
        monkeypatch.setenv("DET_MASTER", master.url)
        for var in ("DET_USER", "DET_PASS", "NO_COLOR"):
            monkeypatch.delenv(var, raising=False)

    def __call__(self, *args: str, stdin: str = "") -> Result:
        from det.cli.__main__ import main

        self.capsys.readouterr()
        self.monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            rc = main(list(args))
        except SystemExit as e:  # argparse errors
            rc = int(e.code or 0)
        out, err = self.capsys.readouterr()
        return Result(rc, out, err)

    def ok(self, *args: str, stdin: str = "") -> Result:
        r = self(*args, stdin=stdin)
        assert r.rc == 0, f"det {' '.join(args)} exited {r.rc}:\n{r.out}\n{r.err}"
        return r

    def login(self, user: str = "admin", password: str = ADMIN_PASSWORD) -> None:
        self.ok("user", "login", user, stdin=password + "\n")

    @property
    def auth_file(self) -> Path:
        return self.home / ".config" / "det" / "auth.json"


def run_subprocess(
    master_url: str, home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m det.cli ARGS`` as a separate process (for exit codes and stderr as users see
    them), with HOME and the config home pointed at ``home``."""
    full_env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "DET_MASTER": master_url,
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "det.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def cli_master(
    pg_server: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Master]:
    """One master (and database) shared by the tests of a module: starting one costs seconds."""
    with new_database(pg_server, "det_cli", template=pg_template) as url:
        m = start_master(tmp_path_factory.mktemp("cli-master"), url)
        try:
            yield m
        finally:
            m.kill()


@pytest.fixture(scope="module")
def threaded_cli_master(
    pg_server: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """``cli_master`` served by a thread of this process on a port of its own, with its control
    loop (tests/integration/threaded.py): for a client in another process (Determined's CLI);
    a module takes it as its ``cli_master``: ``cli_master = cli_support.threaded_cli_master``."""
    # threaded imports tests.integration.conftest, as this module does: no cycle; the master's
    # imports are paid only by the modules that use it
    from tests.integration.threaded import threaded_master

    with (
        new_database(pg_server, "det_cli", template=pg_template) as url,
        threaded_master(tmp_path_factory.mktemp("cli-master"), url, loop=True) as m,
    ):
        yield m


@pytest.fixture(scope="module")
def in_process_cli_master(
    pg_server: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """``cli_master`` in this process: one in-process master (and database) for the module's
    tests, with every ``requests`` call to its URL, the ``det`` CLI's included, answered by its
    app (tests/integration/inproc.py ``routed``). For CLI tests of the API alone (no agents,
    streams or control loop on a timer); a module takes it as its ``cli_master``:
    ``cli_master = cli_support.in_process_cli_master``."""
    # inproc imports tests.integration.conftest, as this module does: no cycle, but the
    # in-process master's imports (the master's app) are paid only by the modules that use it
    from tests.integration.inproc import in_process_master, routed

    with (
        new_database(pg_server, "det_cli", template=pg_template) as url,
        in_process_master(tmp_path_factory.mktemp("cli-master"), url) as m,
        routed(m),
    ):
        yield m


@pytest.fixture(scope="module")
def loop_cli_master(
    pg_server: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """``in_process_cli_master`` with the master's control loop running in a thread of this
    process (inproc.control_loop): for CLI tests with SimAgents (``sim_agents``), which call
    the master's URL; a module takes it as its ``cli_master``."""
    # the master's app and loop: paid only by the modules that use them
    from tests.integration.inproc import control_loop, in_process_master, routed

    with (
        new_database(pg_server, "det_cli", template=pg_template) as url,
        in_process_master(tmp_path_factory.mktemp("cli-master"), url) as m,
        routed(m),
        control_loop(m),
    ):
        yield m


def logging_training(agent_token: str) -> Any:
    """SimAgent training that also ships a log line per step, as a real agent would."""
    import threading

    from tests.fakes.sim_agent import default_training

    def train(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        env = spec["env"]
        code = default_training(master, spec, killed, steps=4, validate_every=2)
        lines = [f"trial {env['DET_TRIAL_ID']} step {i}" for i in range(1, 5)]
        _post_logs(master, agent_token, env["DET_TASK_ID"], env["DET_ALLOCATION_ID"], lines)
        return code

    return train


@contextlib.contextmanager
def running_sim_agents(master: Master) -> Iterator[list[SimAgent]]:
    """Two simulated agents of 2 slots; each trial trains 4 batches, validates and checkpoints
    every 2, and logs one line per batch."""
    train = logging_training(master.agent_token)
    agents = [
        SimAgent(master.url, master.agent_token, f"sim-{i}", slots=2, train=train).start()
        for i in range(2)
    ]
    try:
        wait(lambda: len(master.get("/api/v1/agents")["agents"]) == 2, 30, "agents to register")
        yield agents
    finally:
        for a in agents:
            a.stop()


@pytest.fixture(scope="module")
def sim_agents(cli_master: Master) -> Iterator[list[SimAgent]]:
    """:func:`running_sim_agents` for the module's master."""
    with running_sim_agents(cli_master) as agents:
        yield agents


@pytest.fixture
def det(cli_master: Master, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> Det:
    home = tmp_path / "home"
    home.mkdir()
    return Det(cli_master, home, capsys, monkeypatch)


def context_dir(root: Path) -> Path:
    ctx = root / "ctx"
    ctx.mkdir(exist_ok=True)
    (ctx / "train.py").write_text("print('training')\n")
    return ctx


def write_config(root: Path, text: str, name: str = "exp.yaml") -> Path:
    path = root / name
    path.write_text(text)
    return path


def exp_state(master: MasterClient, eid: int) -> str:
    return str(master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"])


def until(master: MasterClient, predicate: Any, timeout: float, what: str) -> Any:
    """``predicate()``'s first true value: a live master's loop is waited for (polling), and so
    is an in-process or threaded master's whose loop runs in a thread (inproc.control_loop);
    otherwise an in-process master's loop passes run in this thread until then."""
    from tests.integration import inproc  # imports tests.integration.conftest only: no cycle

    state = getattr(master, "state", None)  # an InProcessMaster's MasterState
    if state is None or id(state) in inproc.LOOPING:
        return wait(predicate, timeout, what)
    from det.master.loop import run_passes_until  # the master's imports: in-process tests only

    try:
        run_passes_until(state, lambda: bool(predicate()), timeout)
    except TimeoutError:
        raise TimeoutError(f"timed out waiting for {what}") from None
    return predicate()


def wait_state(master: MasterClient, eid: int, state: str, timeout: float = 30) -> None:
    """Waits for an experiment state; on timeout the error shows where it and its trials are."""
    try:
        until(
            master, lambda: exp_state(master, eid) == state, timeout, f"experiment {eid}: {state}"
        )
    except TimeoutError as e:
        seen = [(t["id"], t["state"]) for t in trials(master, eid)]
        raise AssertionError(f"{e}; it is {exp_state(master, eid)}, trials {seen}") from None


def trials(master: MasterClient, eid: int) -> list[dict[str, Any]]:
    return list(master.get(f"/api/v1/experiments/{eid}/trials")["trials"])


def post_task_logs(master: Master, task_id: str, lines: list[str], rank: int | None = 0) -> None:
    """Ships log lines for a task as an agent would."""
    _post_logs(master.url, master.agent_token, task_id, f"{task_id}.1", lines, rank)


def _post_logs(
    url: str,
    token: str,
    task_id: str,
    allocation_id: str,
    lines: list[str],
    rank: int | None = 0,
) -> None:
    import requests

    r = requests.post(
        f"{url}/api/v1/task/logs",
        json={
            "logs": [
                {
                    "taskId": task_id,
                    "allocationId": allocation_id,
                    "agentId": "sim-0",
                    "containerId": "sim",
                    "rankId": rank,
                    "log": line + "\n",
                    "stdtype": "stdout",
                    "source": "container",
                    "level": "LOG_LEVEL_INFO",
                }
                for line in lines
            ]
        },
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text


def create_via_api(master: MasterClient, config: str, activate: bool = True) -> int:
    body = {
        "config": config,
        "modelDefinition": [
            {
                "path": "train.py",
                "type": 48,
                "content": base64.b64encode(b"print(1)\n").decode(),
                "mode": 0o644,
            }
        ],
        "activate": activate,
    }
    return int(master.post("/api/v1/experiments", body)["experiment"]["id"])


def det_cli_has(leaf: str) -> bool:
    """Whether det's own ``det`` parser has the official CLI's leaf command ``leaf`` (its words
    after ``det``, as the conformance walk names them): each word a sub-command, or a choice of
    a positional argument (det's ``experiment set gc-policy``); ``help`` is argparse's ``-h``."""
    # The parser is det's CLI itself: imported here, as the Det runner does, so that collecting
    # these tests does not import the whole CLI.
    from det.cli.__main__ import build_parser

    parser = build_parser(leaf.split()[:1])
    for word in leaf.split():
        if word == "help":
            return True
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is not None and word in sub.choices:
            parser = sub.choices[word]
            continue
        return any(
            not a.option_strings and a.choices is not None and word in a.choices
            for a in parser._actions
            if not isinstance(a, argparse._SubParsersAction)
        )
    return True


def unmanaged_trial(session: Any, url: str, name: str) -> tuple[int, int]:
    """An unmanaged experiment of one trial, made as Determined's core_v2 makes it (PUT by a
    new external id, then POST a trial): its experiment and trial ids."""
    r = session.put(
        f"{url}/api/v1/experiments/by-external-id/{uuid.uuid4().hex}",
        json={"config": f"name: {name}\nsearcher: {{name: single, metric: loss}}\n",
              "unmanaged": True},
        timeout=30,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    eid = int(r.json()["experiment"]["id"])
    r = session.post(
        f"{url}/api/v1/trials", json={"experimentId": eid, "unmanaged": True}, timeout=30
    )
    assert r.status_code == 200, r.text
    return eid, int(r.json()["trial"]["id"])
