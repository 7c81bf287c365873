"""What the boot simulations of both clouds share: the ``systemctl`` stand-in (the containers
have no systemd), VM containers, waiting for ``/info``, and the one-trial experiment an agent
booted from the master's startup script must run to COMPLETED.
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from det.deploy.common.errors import DeployError
from det.deploy.common.status import MachineLog
from tests.fakes.moto_server import free_port

VM_IMAGE = "det-vm:trixie"
# The stdlib example runs on any python3 >= 3.8: the agent mounts det's harness.
TASK_IMAGE = "det-base:trixie"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stdlib_core_api"
LABEL_AGENT = "ai.det.agent-id"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

SYSTEMCTL_SHIM = r"""#!/bin/bash
# Test-only stand-in for systemd: runs a unit's ExecStart in the background (no restarts).
cmd=$1; shift
[ "${1:-}" = --no-block ] && shift
case $cmd in
  daemon-reload|enable) exit 0 ;;
  start|restart)
    unit=${1%.service}
    f=/etc/systemd/system/$unit.service
    exec_start=$(sed -n 's/^ExecStart=//p' "$f")
    envfile=$(sed -n 's/^EnvironmentFile=//p' "$f")
    out=$(sed -n 's/^StandardOutput=append://p' "$f")
    if [ -f "/run/shim-$unit.pid" ]; then kill "$(cat "/run/shim-$unit.pid")" 2>/dev/null || true; fi
    (
      if [ -n "$envfile" ]; then set -a; . "$envfile"; set +a; fi
      exec setsid $exec_start >>"${out:-/var/log/shim-$unit.log}" 2>&1
    ) &
    echo $! >"/run/shim-$unit.pid"
    ;;
  *) echo "systemctl shim: $cmd not supported" >&2; exit 1 ;;
esac
"""


def images_present(*images: str) -> bool:
    try:
        done = subprocess.run(
            ["docker", "image", "inspect", *images], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


needs_vm = pytest.mark.skipif(
    not images_present(VM_IMAGE, TASK_IMAGE),
    reason=f"needs Docker, {VM_IMAGE} and {TASK_IMAGE} (infra/build-images.sh)",
)


def write_shim(directory: Path) -> Path:
    shim = directory / "systemctl"
    shim.write_text(SYSTEMCTL_SHIM)
    shim.chmod(0o755)
    return shim


def run_vm(name: str, args: list[str], command: str) -> None:
    """Start a detached VM container on the host network running ``command``."""
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--network", "host", *args,
         VM_IMAGE, "bash", "-c", command],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def vm_name(role: str) -> str:
    return f"det-boot-{role}-{uuid.uuid4().hex[:8]}"


def sh(container: str, cmd: str) -> str:
    return subprocess.run(
        ["docker", "exec", container, "bash", "-c", cmd],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def running(container: str) -> bool:
    state = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Running}}", container],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return state == "true"


def dump_and_remove(container: str, logs: str) -> None:
    out = subprocess.run(
        ["docker", "exec", container, "bash", "-c", f"tail -n 60 {logs}"],
        capture_output=True, text=True,
    )  # fmt: skip
    print(f"--- {container}\n{out.stdout}{out.stderr}")
    subprocess.run(["docker", "rm", "-f", container], capture_output=True)


def remove_task_containers(agent_id: str) -> None:
    ids = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL_AGENT}={agent_id}"],
        capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)


def wait_for_info(
    get: Callable[..., Any], url: str, container: str, timeout: float = 240.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            response = get(f"{url}/info", timeout=5)
            if response.status_code == 200:
                info: dict[str, Any] = response.json()
                return info
            last = f"HTTP {response.status_code}"
        except requests.RequestException as e:
            last = f"{type(e).__name__}: {e}"
        if not running(container):
            break
        time.sleep(2)
    raise AssertionError(f"the master at {url} did not answer /info ({last})")


def dead_index() -> str:
    """A package index nobody serves (a free port): pip cannot reach it, the likeliest real
    boot failure."""
    return f"http://127.0.0.1:{free_port()}/simple"


def wait_for_pip_failure(
    read_status: Callable[[], Sequence[MachineLog]], index: str, container: str
) -> str:
    """The boot log as ``status`` reads it (``read_status``: the cloud's ``bootlog.tail``),
    once it says pip's first attempt failed and names the ``index`` it could not reach, while
    det is not installed on the VM ``container``: the log shipper runs before pip, on the
    image's python3 and the standard library."""
    started = time.monotonic()

    def failure() -> str | None:
        try:
            machines = read_status()
        except DeployError:
            return None  # the log (group) is not there yet
        text = "\n".join(line for m in machines for line in m.flat())
        return text if "attempt 1 failed" in text and "pip install" in text else None

    # "within a minute" on a real VM; generous here, the machine is shared.
    text: str = poll("pip's failure in the shipped boot log", failure, 240)
    print(f"pip's failure was readable after {time.monotonic() - started:.0f} s")
    assert "/det-bootstrap.log]" in text
    assert index.split("/simple")[0] in text  # pip names the index it could not reach
    assert sh(container, "test -e /opt/det/bin/det-master || echo absent").strip() == "absent"
    return text


def poll(what: str, fn: Callable[[], Any], timeout: float, every: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


class MasterApi:
    """The booted master's REST API as a user sees it: over HTTPS, verified with the cluster's
    certificate by its name (``DET_MASTER_CERT_FILE``/``DET_MASTER_CERT_NAME``)."""

    def __init__(self, url: str, cert_file: Path | None, cert_name: str | None) -> None:
        from det.common import tls

        self.url = url
        self.http = tls.session(tls.load(str(cert_file) if cert_file else None, cert_name))

    def login(self, password: str) -> None:
        r = self.http.post(
            f"{self.url}/api/v1/auth/login",
            json={"username": "admin", "password": password},
            timeout=30,
        )
        r.raise_for_status()
        self.http.headers["Authorization"] = f"Bearer {r.json()['token']}"

    def get(self, path: str) -> Any:
        r = self.http.get(f"{self.url}{path}", timeout=30)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()

    def check_enrolled_with_a_spent_ticket(
        self, agent: str, boot_script: str, agent_id: str
    ) -> None:
        """The agent VM enrolled with the one-time ticket of its boot script (no agent token in
        it), keeps its own token root-only, and the ticket a task could read from the metadata
        is refused now."""
        import re

        (ticket,) = re.findall(r"^export DET_ENROLL_TICKET=(\S+)$", boot_script, re.M)
        assert "export DET_AGENT_TOKEN=''" in boot_script
        agent_yaml = yaml.safe_load(sh(agent, "cat /etc/det/agent.yaml"))
        assert "agent_token" not in agent_yaml
        assert agent_yaml["agent_token_file"] == "/etc/det/agent_token"
        assert sh(agent, "stat -c '%a %U' /etc/det/agent_token").split() == ["600", "root"]
        assert sh(agent, "cat /etc/det/agent_token").startswith(f"dat1.{agent_id}.")
        r = self.http.post(
            f"{self.url}/api/v1/agent_enrollments",
            json={"ticket": ticket, "agentId": agent_id},
            timeout=30,
        )
        assert r.status_code == 401 and "already used" in r.text, r.text

    def create_example(self, checkpoint_dir: Path) -> int:
        """examples/stdlib_core_api with checkpoints in ``checkpoint_dir`` (the task image has
        no cloud SDK)."""
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
        config["environment"] = {"image": TASK_IMAGE}
        config["checkpoint_storage"] = {"type": "shared_fs", "host_path": str(checkpoint_dir)}
        config["hyperparameters"]["checkpoint_every"] = 100
        body = {
            "config": yaml.safe_dump(config),
            "modelDefinition": [
                {
                    "path": "train.py",
                    "type": 48,
                    "content": base64.b64encode((EXAMPLE / "train.py").read_bytes()).decode(),
                    "mode": 0o644,
                }
            ],
            "activate": True,
        }
        r = self.http.post(f"{self.url}/api/v1/experiments", json=body, timeout=30)
        assert r.status_code == 200, r.text
        return int(r.json()["experiment"]["id"])

    def experiment_state(self, eid: int) -> str:
        return str(self.get(f"/api/v1/experiments/{eid}")["experiment"]["state"])

    def trial_logs(self, eid: int) -> str:
        out = []
        for trial in self.get(f"/api/v1/experiments/{eid}/trials")["trials"]:
            r = self.http.get(f"{self.url}/api/v1/trials/{trial['id']}/logs", timeout=30)
            out.append(r.text[-3000:])
        return "\n".join(out)

    def wait_completed(self, eid: int, timeout: float) -> None:
        def done() -> bool:
            state = self.experiment_state(eid)
            if state in ("STATE_ERROR", "STATE_CANCELED"):
                raise AssertionError(f"experiment {eid} ended {state}:\n{self.trial_logs(eid)}")
            return state == "STATE_COMPLETED"

        poll(f"experiment {eid} to complete", done, timeout)


@contextmanager
def agent_vm(
    user_data: str,
    shared: Path,
    env: dict[str, str],
    *,
    instance_id: str,
) -> Iterator[str]:
    """An agent VM: the startup script the master rendered, run in a container that drives the
    host's Docker engine (the VM images carry Docker). ``shared`` is mounted at the same path,
    and the agent's state, harness bundle and master certificate live there: task containers
    get them as bind mounts from host paths. The script takes its systemd path, as on the
    clouds' images (``DET_SYSTEMD=yes``, the ``systemctl`` stand-in): det-agent and the log
    shipper run as units, det-agent's output in its own log (/var/log/det-agent.log)."""
    script = shared / f"user-data-{instance_id}.sh"
    script.write_text(user_data)
    shim_dir = shared / f"shim-{instance_id}"
    shim_dir.mkdir(exist_ok=True)
    shim = write_shim(shim_dir)
    name = vm_name("agent")
    agent_env = {
        "DET_STATE_DIR": str(shared / "agent-state"),
        "DET_HARNESS_DIR": str(shared / "harness"),
        "DET_MASTER_CERT_FILE": str(shared / "master.crt"),
        "DET_SYSTEMD": "yes",
        **env,
    }
    args = [
        "-v", "/var/run/docker.sock:/var/run/docker.sock",
        "-v", "/usr/bin/docker:/usr/local/bin/docker:ro",
        "-v", f"{shared}:{shared}",
        "-v", f"{shim}:/usr/local/bin/systemctl:ro",
    ]  # fmt: skip
    for key, value in agent_env.items():
        args += ["-e", f"{key}={value}"]
    run_vm(name, args, f"bash {script} && exec sleep infinity")
    try:
        yield name
    finally:
        dump_and_remove(name, "/var/log/det-bootstrap.log /var/log/det-agent.log")
        remove_task_containers(instance_id)
