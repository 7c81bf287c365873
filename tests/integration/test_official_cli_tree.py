"""The conformance walk (issue 12): every leaf command of the official ``determined==0.38.1`` CLI,
enumerated from its own argparse tree, runs against a live det master with real arguments (a
finished simulated experiment, its trials and checkpoints, a model, an agent, a user…).

Each outcome is one of:

* **works**: exit 0, and where the command changes something, the change is seen in the master;
* **refused**: non-zero exit with one readable line (det does not build it, or the request is
  wrong for this object), no traceback;
* **broken**: a traceback, a bare 404/405 body, exit 0 without its effect, or arguments argparse
  refuses (the walk's own mistake). The test fails on any broken leaf.

The walk is cut into shards by the leaves' first word (``SHARDS``), one test case each with a
master, database, simulated agents and world of its own: xdist runs them on different workers
(tests/durations.json spreads this file's cases), and one shard's leaves (a workspace quota, a
drained agent, a deleted experiment) cannot change what another shard's leaves see, whichever
worker runs it. Within a shard the leaves run in the order the whole walk used. A shard's master
is served on a real port by a thread of the test's process with its control loop
(``threaded_master_factory``, tests/integration/threaded.py): the official client is the process
of its own, and no leaf needs a master process.

The outcome table is written to docs/compatibility.md by the shard that finishes a whole walk.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.compat.official import ensure_official_venv
from tests.compat.official_cli import OfficialDet
from tests.integration import cli_support
from tests.integration.cli_support import det_cli_has, exp_state, sim_config, trials
from tests.integration.conftest import ADMIN_PASSWORD
from tests.integration.threaded import ThreadedMaster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "compatibility.md"

# Leaves the walk does not run, and why.
NOT_RUN = {
    "deploy": "needs cloud credentials or a Docker engine of its own (det deploy is our own CLI's)",
    "notebook open": "opens a browser on a running notebook (test_task_origin::"
    "test_the_links_determineds_cli_opens_open_the_task follows the link it opens)",
    "shell open": "opens an interactive ssh session",
    "shell show-ssh-command": "needs a running shell (tests/e2e/test_shells.py runs it and the"
    " ssh command it prints)",
    "shell show_ssh_command": "needs a running shell (tests/e2e/test_shells.py runs it and the"
    " ssh command it prints)",
    "tensorboard open": "opens a browser on a running TensorBoard",
    "auth login": "an SSO browser flow (Enterprise)",
    "user logout": "would end the walk's session (covered by test_cli_users_master)",
}

# Refusals that are the official client's own doing, whatever the master answers: the table
# says so beside the message.
CLIENT_BUGS = {
    "trial download": "the official 0.38.1 CLI's own: it takes the checkpoint from the end of"
    " the sorted list (for --latest, the oldest) and fails when it is the list's only"
    " downloadable one; --uuid fails its own argument check. Use det's CLI or the SDK",
}

# Leaves that end an object other leaves use: run after the rest, the deletes last of all.
LAST = {
    "experiment kill",
    "experiment cancel",
    "token revoke",
    "command kill",
    "notebook kill",
    "shell kill",
    "tensorboard kill",
    "master cluster-message clear",
    "resource-pool bindings remove",  # leaves the default pool everyone's again
}
FINAL = {"experiment delete", "model delete", "project delete", "workspace delete"}


# A single-trial search: what Determined's continue takes.
SINGLE = """
name: {name}
entrypoint: python3 train.py
searcher: {{name: single, metric: validation_loss}}
hyperparameters: {{lr: 0.1}}
"""


def run_order(leaf: str) -> int:
    return 2 if leaf in FINAL else 1 if leaf in LAST else 0


# The walk's shards, by a leaf's first word; "rest" also takes every word not listed (a noun a
# later client adds is walked, not dropped). Nouns whose leaves touch the same objects share a
# shard: experiments with the config policies they are created under, workspaces with their
# projects, pools and quota, users with groups, roles and tokens, the four interactive kinds.
SHARDS: dict[str, tuple[str, ...]] = {
    "experiments": ("experiment", "config-policies", "preview-search"),
    "workspaces": ("workspace", "project", "resource-pool", "resources", "job"),
    "users": ("user", "user-group", "rbac", "token", "oauth"),
    "tasks": ("command", "notebook", "shell", "tensorboard"),
    "trials": ("trial", "task", "checkpoint", "model", "master"),
    "rest": ("template", "dev", "agent", "slot", "auth", "help", "deploy", "version"),
}


def shard_of(leaf: str) -> str:
    noun = leaf.split()[0]
    return next((name for name, nouns in SHARDS.items() if noun in nouns), "rest")


_TREE_SCRIPT = """
import argparse, json
from determined import cli
from determined.cli import cli as c
parser = c.make_parser()
cli.add_args(parser, c.all_args_description)
out = []
def walk(p, path):
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        out.append(" ".join(path))
        return
    seen = set()
    for a in subs:
        for name, sp in a.choices.items():
            if id(sp) not in seen:
                seen.add(id(sp))
                walk(sp, path + [name])
walk(parser, [])
print(json.dumps(out))
"""


@dataclass
class World:
    """The objects the walk's arguments name."""

    eid: int  # a finished experiment
    spare: int  # a finished experiment the walk may delete, archive, move…
    tid: int
    task: str  # the trial's task id
    job: str  # the spare experiment's job
    token: str  # an access token of ``user``
    admin_token: str  # an access token of admin (its secret: ``det token login`` takes it)
    paused: int  # a long search created paused (activate, then pause)
    single: int  # a finished single-trial experiment, never archived (continue)
    single_ended: str  # its end time before the walk
    uuid: str  # a completed checkpoint of ``eid``, registered as model ``model`` version 1
    doomed: str  # a completed checkpoint of ``spare``, deleted by the walk
    trim: str  # a completed checkpoint of ``eid``'s other trial: ``checkpoint rm`` re-reads it
    model: str
    agent: str
    user: str
    cfg: Path
    ctx: Path
    out: Path
    # Interactive tasks launched for the walk (ids: the official CLI takes full ones or prefixes)
    ntsc: dict[str, str] = field(default_factory=dict)


def args_for(w: World) -> dict[str, list[str]]:
    e, s, t = str(w.eid), str(w.spare), str(w.tid)
    return {
        "agent disable": ["--drain", w.agent],
        "agent enable": [w.agent],
        "command config": [w.ntsc["command"]],
        "command describe": [w.ntsc["command"]],
        "command kill": [w.ntsc["command"]],
        "command logs": [w.ntsc["command"]],
        "command run": ["--context", str(w.ctx), "true"],
        "command set priority": [w.ntsc["command"], "5"],
        "config-policies delete": ["--workspace", "Uncategorized", "experiment"],
        "config-policies describe": ["--workspace", "Uncategorized", "experiment"],
        "config-policies set": ["--workspace", "Uncategorized", "experiment", str(w.cfg)],
        "checkpoint delete": [w.doomed, "--yes"],
        "checkpoint describe": [w.uuid],
        "checkpoint download": [w.uuid, "--mode", "master", "-o", str(w.out / "ckpt")],
        "checkpoint rm": [w.trim, "--glob", "no-such-file", "--yes"],
        "dev auth-token": [],
        "dev bindings call": ["get_GetMaster"],
        "dev curl": ["/api/v1/me"],
        "experiment activate": [str(w.paused)],
        "experiment archive": [s],
        "experiment cancel": [s],
        "experiment config": [e],
        "experiment continue": [str(w.single)],
        "experiment create": [str(w.cfg), str(w.ctx), "--paused"],
        "experiment delete": [s, "--yes"],
        "experiment delete-tb-files": [s],
        "experiment describe": [e],
        "experiment download": [e, "--top-n", "1", "-o", str(w.out / "exp-dl")],
        "experiment download-model-def": [e],
        "experiment kill": [s],
        "experiment label add": [s, "walked"],
        "experiment label remove": [s, "walked"],
        "experiment list": [],
        "experiment list-checkpoints": [e],
        "experiment list-trials": [e],
        "experiment logs": [e],
        "experiment move": [s, "Uncategorized", "Uncategorized"],
        "experiment pause": [str(w.paused)],
        "experiment set description": [s, "walked"],
        "experiment set gc-policy": [
            s,
            "--save-experiment-best",
            "1",
            "--save-trial-best",
            "1",
            "--save-trial-latest",
            "1",
            "--yes",
        ],
        "experiment set log-retention": [s, "--days", "30"],
        "experiment set max-slots": [s, "2"],
        "experiment set name": [s, "walked-name"],
        "experiment set priority": [s, "10"],
        "experiment set weight": [s, "2"],
        "experiment unarchive": [s],
        "experiment wait": [e],
        "job update": [w.job, "--priority", "5"],
        "job update-batch": [f"{w.job}.priority=5"],
        "master cluster-message set": ["-m", "hello"],
        "master config set": ["--log.level", "INFO"],
        "master logs": ["--tail", "5"],
        "model create": ["walker-model"],
        "model delete": ["walker-model"],
        "model describe": [w.model],
        "model list-versions": [w.model],
        "model move": [w.model, "-w", "Uncategorized"],
        "model register-version": [w.model, w.uuid],
        "notebook config": [w.ntsc["notebook"]],
        "notebook kill": [w.ntsc["notebook"]],
        "notebook logs": [w.ntsc["notebook"]],
        "notebook set priority": [w.ntsc["notebook"], "5"],
        "notebook start": ["--context", str(w.ctx), "--detach"],
        "oauth client add": ["c", "example.com"],
        "oauth client remove": ["1"],
        "preview-search": [str(w.cfg)],
        "project archive": ["walker-ws", "walker-project"],
        "project create": ["walker-ws", "walker-new-project"],
        "project delete": ["walker-ws", "walker-new-project", "--yes"],
        "project describe": ["walker-ws", "walker-project"],
        "project edit": ["walker-ws", "walker-project", "--description", "d"],
        "project list": ["walker-ws"],
        "project list-experiments": ["walker-ws", "walker-project"],
        "project unarchive": ["walker-ws", "walker-project"],
        "rbac assign-role": ["Viewer", "--username-to-assign", w.user],
        "rbac describe-role": ["Viewer"],
        "rbac list-groups-roles": ["walk-group"],
        "rbac list-users-roles": [w.user],
        "rbac unassign-role": ["Viewer", "--username-to-assign", w.user],
        "resource-pool bindings add": ["default", "Uncategorized"],
        "resource-pool bindings list-workspaces": ["default"],
        "resource-pool bindings remove": ["default", "Uncategorized"],
        "resource-pool bindings replace": ["default", "Uncategorized"],
        "resources aggregated": ["2024-01-01", "2024-01-02"],
        "resources allocations": ["2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"],
        "resources raw": ["2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"],
        "shell config": [w.ntsc["shell"]],
        "shell kill": [w.ntsc["shell"]],
        "shell logs": [w.ntsc["shell"]],
        "shell set priority": [w.ntsc["shell"], "5"],
        "shell start": ["--context", str(w.ctx), "--detach"],
        "slot disable": [w.agent, "1"],
        "slot enable": [w.agent, "1"],
        "task config": ["1"],
        "task create": [str(w.cfg)],
        "task fork": ["1"],
        "task kill": ["1"],
        "task logs": [w.task],
        "task pause": ["1"],
        "task unpause": ["1"],
        "template create": ["walker-template", str(w.cfg)],
        "template describe": ["walker-template"],
        "template remove": ["walker-template"],
        "template set": ["walker-template", str(w.cfg)],
        "template set-value config": ["walker-template", str(w.cfg)],
        "tensorboard config": [w.ntsc["tensorboard"]],
        "tensorboard kill": [w.ntsc["tensorboard"]],
        "tensorboard logs": [w.ntsc["tensorboard"]],
        "tensorboard set priority": [w.ntsc["tensorboard"], "5"],
        "tensorboard start": [e, "--context", str(w.ctx), "--detach"],
        "token create": [w.user, "-d", "walker", "-e", "2"],
        "token describe": [w.token],
        "token edit": [w.token, "-d", "edited"],
        "token list": [],
        "token login": [w.admin_token],
        "token revoke": [w.token],
        "trial describe": [t],
        "trial download": [t, "--latest", "-o", str(w.out / "trial-dl")],
        "trial kill": [t],
        "trial logs": [t],
        "trial set log-retention": [t, "--days", "30"],
        "trial support-bundle": [t, "-o", str(w.out)],
        "user activate": [w.user],
        "user change-password": [w.user],
        "user create": ["walker2", "--password", "Walker2-pw-1"],
        "user deactivate": ["walker2"],
        "user edit": [w.user, "--display-name", "Walker"],
        "user link-with-agent-user": [
            w.user,
            "--agent-uid",
            "1000",
            "--agent-gid",
            "1000",
            "--agent-user",
            "u",
            "--agent-group",
            "g",
        ],
        "user login": ["admin"],
        "user rename": ["walker2", "walker3"],
        # the world's groups (issue 40); "g" is created and deleted by the walk
        "user-group add-user": ["walk-group", w.user],
        "user-group change-name": ["walk-group2", "walk-group3"],
        "user-group create": ["g"],
        "user-group delete": ["g", "--yes"],
        "user-group describe": ["walk-group"],
        "user-group remove-user": ["walk-group", w.user],
        "workspace archive": ["walker-ws"],
        "workspace bindings delete": ["Uncategorized", "--cluster-name", "c"],
        "workspace bindings list": ["Uncategorized"],
        "workspace bindings set": ["Uncategorized", "--namespace", "n"],
        "workspace create": ["walker-new-ws"],
        "workspace delete": ["walker-new-ws2", "--yes"],
        "workspace describe": ["Uncategorized"],
        "workspace edit": ["walker-new-ws", "--name", "walker-new-ws2"],
        "workspace list-members": ["Uncategorized"],
        "workspace list-pools": ["Uncategorized"],
        "workspace list-projects": ["Uncategorized"],
        "workspace resource-quota set": ["Uncategorized", "1"],
        "workspace unarchive": ["walker-ws"],
    }


STDIN = {
    "user login": ADMIN_PASSWORD + "\n",
    "user change-password": "Walker-pw-2\nWalker-pw-2\n",
}


def effects(w: World, m: ThreadedMaster) -> dict[str, Callable[[], bool]]:
    """What a leaf that exits 0 must have changed, read back from the master."""

    def exp(eid: int) -> dict[str, Any]:
        return dict(m.get(f"/api/v1/experiments/{eid}")["experiment"])

    def ckpt_state(u: str) -> str:
        return str(m.get(f"/api/v1/checkpoints/{u}")["checkpoint"]["state"])

    def token(token_id: str) -> dict[str, Any]:
        return dict(m.get("/api/v1/tokens", params={"tokenIds": token_id})["tokenInfo"][0])

    def wait_deleted(u: str) -> bool:
        cli_support.wait(lambda: ckpt_state(u) == "STATE_DELETED", 30, "the GC task")
        return True

    def user(name: str) -> dict[str, Any]:
        return dict(m.get(f"/api/v1/users/{name}/by-username")["user"])

    def workspace(name: str) -> dict[str, Any] | None:
        found = m.get("/api/v1/workspaces", params={"name": name})["workspaces"]
        return next((dict(x) for x in found if x["name"] == name), None)

    def project(name: str) -> dict[str, Any] | None:
        ws = workspace("walker-ws")
        assert ws is not None
        found = m.get(f"/api/v1/workspaces/{ws['id']}/projects")["projects"]
        return next((dict(x) for x in found if x["name"] == name), None)

    def eventually(check: Callable[[], bool], timeout: float = 30) -> bool:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.3)
        return True

    def retention(where: str) -> set[Any]:
        import psycopg

        with psycopg.connect(m.db_url) as conn:
            rows = conn.execute(f"SELECT log_retention_days FROM trials WHERE {where}")
            return {r[0] for r in rows}

    def gone(get: Callable[[], Any]) -> bool:
        cli_support.wait(lambda: get() is None, 30, "the deletion")
        return True

    return {
        "agent disable": lambda: True,  # checked by "agent enable" turning it back on
        "master cluster-message set": lambda: (
            m.get("/api/v1/master/cluster_message")["clusterMessage"]["message"] == "hello"
        ),
        "master cluster-message clear": lambda: m.get("/api/v1/master/cluster_message") == {},
        "master config set": lambda: (
            m.get("/api/v1/master/config")["config"]["log"]["level"] == "info"
        ),
        "agent enable": lambda: bool(m.get(f"/api/v1/agents/{w.agent}")["agent"]["enabled"]),
        "slot disable": lambda: (
            not m.get(f"/api/v1/agents/{w.agent}")["agent"]["slots"][f"/agents/{w.agent}/slots/1"][
                "enabled"
            ]
        ),
        "slot enable": lambda: bool(
            m.get(f"/api/v1/agents/{w.agent}")["agent"]["slots"][f"/agents/{w.agent}/slots/1"][
                "enabled"
            ]
        ),
        "checkpoint download": lambda: any((w.out / "ckpt").rglob("model.pt")),
        "experiment set description": lambda: exp(w.spare)["description"] == "walked",
        "experiment set name": lambda: exp(w.spare)["name"] == "walked-name",
        "experiment activate": lambda: exp(w.paused)["state"] in ("STATE_ACTIVE", "STATE_RUNNING"),
        # Continued: it runs again (ACTIVE) or has already ended again (a new end time).
        "experiment continue": lambda: eventually(
            lambda: (
                exp(w.single)["state"] == "STATE_ACTIVE"
                or exp(w.single).get("endTime") != w.single_ended
            )
        ),
        "experiment pause": lambda: eventually(lambda: exp(w.paused)["state"] == "STATE_PAUSED"),
        "experiment archive": lambda: bool(exp(w.spare)["archived"]),
        "experiment unarchive": lambda: not exp(w.spare)["archived"],
        "experiment label add": lambda: "walked" in (exp(w.spare).get("labels") or []),
        "experiment label remove": lambda: "walked" not in (exp(w.spare).get("labels") or []),
        "model create": lambda: True,
        "user create": lambda: user("walker2")["username"] == "walker2",
        "user edit": lambda: user(w.user)["displayName"] == "Walker",
        "experiment set log-retention": lambda: retention(f"experiment_id = {w.spare}") == {30},
        "trial set log-retention": lambda: retention(f"id = {w.tid}") == {30},
        "resource-pool bindings add": lambda: (
            m.get("/api/v1/resource-pools/default/workspace-bindings").get("workspaceIds") == [1]
        ),
        "resource-pool bindings replace": lambda: (
            m.get("/api/v1/resource-pools/default/workspace-bindings").get("workspaceIds") == [1]
        ),
        "resource-pool bindings remove": lambda: (
            not (m.get("/api/v1/resource-pools/default/workspace-bindings").get("workspaceIds"))
        ),
        "user link-with-agent-user": lambda: (
            user(w.user)["agentUserGroup"]
            == {"agentUid": 1000, "agentGid": 1000, "agentUser": "u", "agentGroup": "g"}
        ),
        "user rename": lambda: user("walker3")["username"] == "walker3",
        "token create": lambda: len(m.get("/api/v1/tokens")["tokenInfo"]) >= 2,
        "token edit": lambda: token(w.token)["description"] == "edited",
        "token revoke": lambda: bool(token(w.token)["revoked"]),
        "checkpoint delete": lambda: wait_deleted(w.doomed),
        # The walk wrote model.pt ("weights", 7 bytes) where the trial reported 10 bytes.
        "checkpoint rm": lambda: cli_support.wait(
            lambda: (
                m.get(f"/api/v1/checkpoints/{w.trim}")["checkpoint"]["resources"]
                == {"model.pt": "7"}
            ),
            30,
            "the GC task",
        ),
        "project create": lambda: project("walker-new-project") is not None,
        "project edit": lambda: (project("walker-project") or {}).get("description") == "d",
        "project archive": lambda: bool((project("walker-project") or {}).get("archived")),
        "project unarchive": lambda: (project("walker-project") or {}).get("archived") is False,
        "project delete": lambda: gone(lambda: project("walker-new-project")),
        "workspace create": lambda: workspace("walker-new-ws") is not None,
        "workspace edit": lambda: workspace("walker-new-ws2") is not None,
        "workspace archive": lambda: bool((workspace("walker-ws") or {}).get("archived")),
        "workspace unarchive": lambda: (workspace("walker-ws") or {}).get("archived") is False,
        "workspace delete": lambda: gone(lambda: workspace("walker-new-ws2")),
        "experiment delete": lambda: gone(lambda: _maybe(m, f"/api/v1/experiments/{w.spare}")),
    }


def _maybe(m: ThreadedMaster, path: str) -> Any:
    """The answer at ``path``, or None when it is 404."""
    r = m.session().get(m.url + path, timeout=30)
    if r.status_code == 404:
        return None
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


@dataclass
class Outcome:
    leaf: str
    kind: str  # works, refused, not run, broken
    detail: str


_GENERIC_404 = ("The requested URL was not found", "Method Not Allowed", "no route ")
_NOISE = (
    "Master version",
    "CLI version",
    "GetPassWarning",
    "passwd = fallback_getpass",
    "Warning: Password input may be echoed",
)


def classify(
    leaf: str, r: subprocess.CompletedProcess[str], effect: Callable[[], bool] | None
) -> Outcome:
    text = r.stdout + r.stderr
    lines = [
        ln
        for ln in r.stderr.splitlines()
        if ln.strip() and not any(n in ln for n in _NOISE) and "Password for user" not in ln
    ]
    if "Traceback (most recent call last)" in text:
        return Outcome(leaf, "broken", "traceback: " + (lines[-1] if lines else "")[:200])
    if any(g in text for g in _GENERIC_404):
        return Outcome(leaf, "broken", "generic 404/405: " + (lines[-1] if lines else "")[:200])
    if r.returncode == 2 and "usage:" in r.stderr:
        return Outcome(leaf, "broken", "the walk's arguments: " + (lines[-1] if lines else ""))
    if r.returncode == 0:
        if effect is not None and not effect():
            return Outcome(leaf, "broken", "exit 0 without its effect")
        return Outcome(leaf, "works", "")
    message = lines[-1] if lines else ""
    if not message:
        return Outcome(leaf, "broken", f"exit {r.returncode} with no message")
    return Outcome(leaf, "refused", message)


class OfficialCLI:
    def __init__(self, bin_dir: Path, master: ThreadedMaster, home: Path) -> None:
        self.bin_dir = bin_dir
        self.home = home  # also the working directory: some leaves write files into it
        self.env = {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "HOME": str(home),
            "DET_MASTER": master.url,
            "NO_COLOR": "1",
        }
        # Its server starts at the first command; its files in the client's home.
        self.det = OfficialDet(bin_dir, self.env, home, scratch=home)

    def close(self) -> None:
        self.det.close()

    def run(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return self.det.run(args, stdin, timeout=90)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(args, 124, "", "Traceback (most recent call last)")

    def leaves(self) -> list[str]:
        r = subprocess.run(
            [str(self.bin_dir / "python"), "-c", _TREE_SCRIPT],
            capture_output=True,
            text=True,
            check=True,
            env=self.env,
        )
        return list(json.loads(r.stdout))


@pytest.fixture
def walk_master(threaded_master_factory: Any) -> Iterator[ThreadedMaster]:
    """A master and database of the shard's own. ``det master config set --log.level`` sets the
    level of the process that answers it (det.master.services.master_settings.apply): here the
    test's, whose root logger's level is given back at the end."""
    import logging

    root = logging.getLogger()
    level = root.level
    m: ThreadedMaster = threaded_master_factory()
    try:
        yield m
    finally:
        root.setLevel(level)


@pytest.fixture
def world(walk_master: ThreadedMaster, tmp_path: Path) -> Iterator[World]:
    m = walk_master
    with cli_support.running_sim_agents(m):
        yield _make_world(m, tmp_path)


def _make_world(m: ThreadedMaster, tmp_path: Path) -> World:
    eid = cli_support.create_via_api(m, sim_config("walk", trials=2))
    spare = cli_support.create_via_api(m, sim_config("walk-spare", trials=1))
    single = cli_support.create_via_api(m, SINGLE.format(name="walk-single"))
    # Created paused; once activated, a search that is still running when the pause leaf comes:
    # 2 trials of a few seconds at a time, 1,000 in all. (100 ran out before the pause in the
    # experiments shard, whose agents nothing else keeps busy: the leaves between activate and
    # pause took longer than 50 rounds of 2 trials.)
    paused = cli_support.create_via_api(m, sim_config("walk-paused", trials=1000), activate=False)
    for group in ("walk-group", "walk-group2"):  # det user-group and det rbac name them
        m.post("/api/v1/groups", {"name": group})
    for x in (eid, spare, single):
        cli_support.wait(lambda x=x: exp_state(m, x) == "STATE_COMPLETED", 90, "completion")
    first = min(trials(m, eid), key=lambda t: t["id"])
    tid, task = int(first["id"]), str(first["taskId"])

    def completed(x: int) -> list[dict[str, Any]]:
        cks = m.get(f"/api/v1/experiments/{x}/checkpoints")["checkpoints"]
        return [c for c in cks if c["state"] == "STATE_COMPLETED"]

    def latest(x: int) -> str:
        # A trial's latest checkpoint is one the default GC policy always keeps.
        cks = completed(x)
        return str(max(cks, key=lambda c: c["metadata"]["steps_completed"])["uuid"])

    cli_support.wait(lambda: completed(eid) and completed(spare), 30, "checkpoints")
    uuid, doomed = latest(eid), latest(spare)
    # The other trial's latest checkpoint: the default GC policy keeps it too.
    trial_of = {str(c["uuid"]): c["training"]["trialId"] for c in completed(eid)}
    trim = max(
        (c for c in completed(eid) if trial_of[str(c["uuid"])] != trial_of[uuid]),
        key=lambda c: c["metadata"]["steps_completed"],
    )["uuid"]
    # Downloads read shared_fs checkpoints from the host path; the simulated trials wrote none.
    # Only the leaves' two get files: each is its trial's latest, which the experiment's GC task
    # (still running now, perhaps) keeps; a checkpoint it collects may vanish under the write.
    for u in (uuid, trim):
        storage = Path(m.data_dir.parent / "checkpoints" / str(u))
        storage.mkdir(parents=True, exist_ok=True)
        (storage / "model.pt").write_text("weights")
    ws = m.post("/api/v1/workspaces", {"name": "walker-ws"})["workspace"]
    m.post(
        f"/api/v1/workspaces/{ws['id']}/projects",
        {"name": "walker-project", "workspaceId": ws["id"]},
    )
    m.post("/api/v1/models", {"name": "walker-registry"})
    m.post("/api/v1/models/walker-registry/versions", {"checkpointUuid": uuid})
    m.post(
        "/api/v1/users",
        {"user": {"username": "walker", "admin": False}, "password": "Walker-pw-1"},
    )
    root = tmp_path / "walk"
    root.mkdir()
    ctx = cli_support.context_dir(root)
    cfg = cli_support.write_config(root, sim_config("walk-created", trials=1))
    out = root / "out"
    out.mkdir()
    job = str(m.get(f"/api/v1/experiments/{spare}")["experiment"]["jobId"])
    walker = m.get("/api/v1/users/walker/by-username")["user"]["id"]
    token = str(m.post("/api/v1/tokens", {"userId": walker, "description": "w"})["tokenId"])
    admin_id = m.get("/api/v1/me")["user"]["id"]
    admin_token = str(m.post("/api/v1/tokens", {"userId": admin_id, "description": "a"})["token"])
    launched = {
        kind: str(m.post(f"/api/v1/{kind}s", body)[kind]["id"])
        for kind, body in (
            ("command", {"config": {"entrypoint": ["sleep", "600"]}}),
            ("notebook", {}),
            ("shell", {}),
            ("tensorboard", {"experimentIds": [eid]}),
        )
    }
    return World(
        eid,
        spare,
        tid,
        task,
        job,
        token,
        admin_token,
        paused,
        single,
        str(m.get(f"/api/v1/experiments/{single}")["experiment"].get("endTime")),
        uuid,
        doomed,
        str(trim),
        "walker-registry",
        "sim-0",
        "walker",
        cfg,
        ctx,
        out,
        launched,
    )


# 224 leaves, each a process of the official client: 520 s on a loaded 2-core machine in one
# piece; a shard has a sixth of them.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("shard", list(SHARDS))
def test_every_leaf_of_the_official_cli_works_or_refuses_clearly(
    shard: str,
    walk_master: ThreadedMaster,
    world: World,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    cli = OfficialCLI(ensure_official_venv(), walk_master, home)
    request.addfinalizer(cli.close)
    login = cli.run(["user", "login", "admin"], ADMIN_PASSWORD + "\n")
    assert login.returncode == 0, login.stderr
    leaves = cli.leaves()
    assert len(leaves) > 150, leaves  # the whole tree, not a stub
    mine = [leaf for leaf in leaves if shard_of(leaf) == shard]
    # Every noun the shard names is in the tree: the shards follow the client, not a guess.
    absent = [n for n in SHARDS[shard] if not any(leaf.split()[0] == n for leaf in mine)]
    assert not absent, f"nouns of shard {shard} not in the official CLI: {absent}"
    args = args_for(world)
    checks = effects(world, walk_master)

    outcomes: dict[str, Outcome] = {}
    helps = [leaf for leaf in mine if leaf.split()[-1] == "help" or leaf == "help"]
    with ThreadPoolExecutor(2) as pool:
        for leaf, r in zip(helps, pool.map(lambda x: cli.run(x.split()), helps), strict=True):
            outcomes[leaf] = classify(leaf, r, None)
    # What ends an object the other leaves use runs last.
    for leaf in sorted(mine, key=run_order):
        if leaf in outcomes:
            continue
        if leaf in NOT_RUN:
            outcomes[leaf] = Outcome(leaf, "not run", NOT_RUN[leaf])
            continue
        r = cli.run([*leaf.split(), *args.get(leaf, [])], STDIN.get(leaf))
        outcomes[leaf] = classify(leaf, r, checks.get(leaf))

    folder = _walk_dir(tmp_path_factory)
    _record_shard(folder, shard, leaves, [outcomes[leaf] for leaf in mine], world)
    broken = [o for o in outcomes.values() if o.kind == "broken"]
    assert not broken, "\n".join(f"det {o.leaf}: {o.detail}" for o in broken)


def _walk_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every worker of this pytest run shares, where the shards leave their outcomes:
    the run's base temp (under xdist, the parent of the workers' own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _record_shard(
    folder: Path, shard: str, leaves: list[str], outcomes: list[Outcome], w: World
) -> None:
    """Leaves this shard's outcomes for the run; the shard that completes the set writes the
    table. A run of some shards only (-k) leaves the table as it is."""
    rows = [[o.leaf, o.kind, _detail(o, w)] for o in outcomes]
    _write_atomic(folder / f"walk-{shard}.json", json.dumps({"leaves": leaves, "rows": rows}))
    found = {}
    for name in SHARDS:
        path = folder / f"walk-{name}.json"
        if not path.exists():
            return
        data = json.loads(path.read_text())
        if data["leaves"] != leaves:
            return
        found.update({leaf: (kind, detail) for leaf, kind, detail in data["rows"]})
    if set(found) == set(leaves):
        _write_doc([(leaf, *found[leaf]) for leaf in leaves])


def _detail(o: Outcome, w: World) -> str:
    detail = _normalise(o.detail, w)
    if o.kind == "refused" and o.leaf in CLIENT_BUGS:
        detail += f" ({CLIENT_BUGS[o.leaf]})"
    return detail


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _normalise(text: str, w: World) -> str:
    for value, name in (
        (w.uuid, "UUID"), (w.doomed, "UUID2"), (w.trim, "UUID3"), (str(w.out), "OUT"),
        (str(w.cfg), "CONFIG"),
    ):  # fmt: skip
        text = text.replace(value, name)
    text = re.sub(r"\s+", " ", text).replace("|", "\\|")
    return text[:160]


def _write_doc(rows: list[tuple[str, str, str]]) -> None:
    counts = {k: sum(kind == k for _, kind, _ in rows) for k in ("works", "refused", "not run")}
    ours = {leaf: det_cli_has(leaf) for leaf, _, _ in rows}
    lines = [
        "# Compatibility with Determined's `det` CLI",
        "",
        "Generated by `tests/integration/test_official_cli_tree.py`, which walks every leaf command",
        "of the official `determined==0.38.1` CLI against a live det master (a finished simulated",
        "experiment, its trials and checkpoints, a registered model, a simulated agent, a user) and",
        "fails on any leaf that ends in a traceback, a bare 404/405 body, or exit 0 without its",
        "effect. **works**: exit 0 (with its effect where it changes something); **refused**:",
        "non-zero exit with the one line shown; **not run**: needs a terminal, browser or cloud.",
        "**det's CLI**: whether det's own `det` has the same command (`cli_support.det_cli_has`,",
        "read from its parser; `test_cli_matches_official` runs both CLIs side by side).",
        "",
        f"{len(rows)} leaves: {counts['works']} work, {counts['refused']} refused,"
        f" {counts['not run']} not run; det's CLI has {sum(ours.values())} of them.",
        "",
        "| command | outcome | message | det's CLI |",
        "|---|---|---|---|",
    ]
    for leaf, kind, detail in rows:
        lines.append(f"| `det {leaf}` | {kind} | {detail} | {'has' if ours[leaf] else 'lacks'} |")
    _write_atomic(DOC, "\n".join(lines) + "\n")
