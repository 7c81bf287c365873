"""No task reaches another task's inner port (issue 23, finding 7). Tasks run with host
networking, so every task on an agent shares its loopback: user B's command tries every TCP
port user A's TensorBoard and notebook (with a running kernel printing a secret) listen on,
over HTTP without a credential and as a ZeroMQ subscriber (a Jupyter kernel's output channel
admits anyone who connects). It reads nothing: TensorBoard has no port but the task port, which
admits only the master's credential, and the notebook's kernels talk over Unix sockets.
Before, TensorBoard's own server on a loopback port answered B's request with A's data."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.e2e.cluster import HOLD, LABEL_ALLOCATION, Cluster, wait_for
from tests.e2e.test_notebooks import execute
from tests.e2e.test_proxy_capacity import ready, user

pytestmark = pytest.mark.e2e

CORE = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "core_api"

#: Run in A's containers: the TCP ports their processes listen on (the agent's network).
LISTENING = textwrap.dedent(
    """
    import glob, json, os, re
    inodes = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(name).read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A":
                inodes[f[9]] = int(f[1].rsplit(":", 1)[1], 16)
    ports = set()
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            m = re.match(r"socket:\\[(\\d+)\\]", os.readlink(fd))
        except OSError:
            continue
        if m and m.group(1) in inodes:
            ports.add(inodes[m.group(1)])
    print(json.dumps(sorted(ports)))
    """
)

#: B's command: every port of A's, as HTTP without credentials and as a ZeroMQ subscriber.
PROBE = textwrap.dedent(
    """
    import json, os, socket, time
    import zmq
    out = {}
    for port in json.loads(os.environ["PORTS"]):
        got = {}
        for path in os.environ["PATHS"].split():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.settimeout(5)
                    s.sendall(f"GET {path} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
                    got[path] = s.recv(200).decode("latin-1").split("\\r\\n")[0]
            except OSError as e:
                got[path] = f"error: {e}"
        sub = zmq.Context.instance().socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.LINGER, 0)
        sub.connect(f"tcp://127.0.0.1:{port}")
        heard, deadline = b"", time.monotonic() + 3
        while time.monotonic() < deadline:
            if sub.poll(200):
                heard += b"".join(sub.recv_multipart())
        sub.close()
        got["zmq"] = b"alice-secret" in heard
        out[port] = got
    print("PROBE " + json.dumps(out), flush=True)
    """
)

LEAK = (
    "import threading, time\n"
    "def _leak():\n"
    "    while True:\n"
    "        print('alice-secret', flush=True)\n"
    "        time.sleep(0.2)\n"
    "threading.Thread(target=_leak, daemon=True).start()\n"
    "7"
)


def listening(c: Cluster, task_id: str) -> list[int]:
    (container,) = [
        k
        for k in c.containers()
        if str(k.labels.get(LABEL_ALLOCATION, "")).startswith(task_id + ".")
    ]
    code, out = container.exec_run(["python3", "-c", LISTENING])
    assert code == 0, out
    return list(json.loads(out.decode().strip().splitlines()[-1]))


def logs(c: Cluster, token: str, task_id: str) -> str:
    r = c.master.session(token).get(f"{c.master.url}/api/v1/tasks/{task_id}/logs", timeout=30)
    assert r.status_code == 200, r.text
    return "".join(
        str((json.loads(line).get("result") or {}).get("log") or "")
        for line in r.text.splitlines()
        if line.strip()
    )


def test_another_users_command_reads_nothing_from_a_tensorboard_or_a_notebook(
    shared_one_slot: Cluster,
) -> None:
    c = shared_one_slot
    alice, bob = user(c, "alice"), user(c, "bob")
    eid = c.create(CORE / "single.yaml", CORE, HOLD)
    wait_for(lambda: c.trials(eid), 120, "the trial")
    as_alice = c.master.session(alice)
    tb = as_alice.post(f"{c.master.url}/api/v1/tensorboards", json={"experimentIds": [eid]})
    assert tb.status_code == 200, tb.text
    tb_id = tb.json()["tensorboard"]["id"]
    nb = as_alice.post(
        f"{c.master.url}/api/v1/notebooks", json={"config": {"resources": {"slots": 0}}}
    )
    assert nb.status_code == 200, nb.text
    nb_id = nb.json()["notebook"]["id"]
    ready(c, tb_id)
    ready(c, nb_id)
    c.master.post(f"/api/v1/experiments/{eid}/kill")
    # A's kernel prints a secret, over and over, on its output channel.
    assert execute(c, f"{c.master.url}/proxy/{nb_id}/", alice, LEAK) == "7"

    tb_ports, nb_ports = listening(c, tb_id), listening(c, nb_id)
    tb_port, nb_port = c.service_port(tb_id), c.service_port(nb_id)
    assert tb_port in tb_ports and nb_port in nb_ports, (tb_ports, nb_ports)

    env = [
        f"PORTS={json.dumps(tb_ports + nb_ports)}",
        f"PATHS=/proxy/{tb_id}/data/runs /proxy/{tb_id}/ /proxy/{nb_id}/api/contents",
    ]
    body = {
        "config": {
            "entrypoint": ["python3", "-c", PROBE],
            "resources": {"slots": 0},
            "environment": {"environment_variables": env},
        }
    }
    r = c.master.session(bob).post(f"{c.master.url}/api/v1/commands", json=body, timeout=30)
    assert r.status_code == 200, r.text
    cmd = r.json()["command"]["id"]
    text = wait_for(
        lambda: next(
            (line for line in logs(c, bob, cmd).splitlines() if line.startswith("PROBE ")), None
        ),
        240,
        "B's probe",
    )
    probe = {int(k): v for k, v in json.loads(text[len("PROBE ") :]).items()}
    for port, got in probe.items():
        assert got["zmq"] is False, f"B read A's kernel output on port {port}: {probe}"
        for path, status in got.items():
            if path != "zmq":
                assert " 200 " not in f"{status} ", f"B read {path} on port {port}: {probe}"
    # TensorBoard has no port but the task port.
    assert tb_ports == [tb_port], tb_ports
    assert probe[tb_port][f"/proxy/{tb_id}/data/runs"].split(" ")[1] == "403", probe
    assert probe[nb_port][f"/proxy/{nb_id}/api/contents"].split(" ")[1] == "403", probe
