"""The serverless simulation's parts: the det-master image run as a platform runs it, a small
"platform" that starts instances on demand, Debian's nginx terminating TLS in front, and a TCP
door to the test's PostgreSQL.

What is simulated (and how a real platform differs):

* :class:`Platform` plays Cloud Run's instance manager. nginx cannot start containers, so
  nginx forwards to the platform's port; a connection that arrives while no instance runs
  starts one (``docker run`` of the image with ``PORT`` set, ``--read-only``, a
  tmpfs at /tmp, the image's non-root user) and is held until the instance answers ``/info``,
  as a cold start holds a request. Connections are spread over the running instances. The
  platform cuts a connection that outlives the request time limit (Cloud Run's ``timeout``).
  Scale to zero is :meth:`Platform.stop_all` (the platform's idle scale-in), called by the test.
* :class:`AwsFront` puts the AWS wake path between nginx and :class:`Platform` instead: the
  platform model (tests/fakes/platform_model.py, ``AwsPlatform``, built from the resources the
  Pulumi program renders) decides. A connection while the model has no registered task gets
  the ALB's own 503 page (counted as ``HTTPCode_ELB_503_Count``); otherwise it is counted as
  ``RequestCount`` and relayed. The model's clock is simulated: the test runs it at a multiple
  of wall time or skips idle stretches; its alarms and the rendered step scaling policies set
  the desired count, and a task the model starts (stops) is a container started (removed).
  The master writes its wake-ups to moto's Application Auto Scaling in wall-clock time (its own
  clock is real); an action is due in simulated time at the moment wall time passes its time.
* :class:`Nginx` is the TLS front (Google's front end, an ALB or CloudFront): a self-signed
  certificate for 127.0.0.1 and localhost, ``X-Forwarded-For``/``X-Forwarded-Proto`` added,
  ``proxy_read_timeout`` at the request time limit.
* :class:`UnixToTcp` lets the containers (host network) reach the test's PostgreSQL, which
  listens on a Unix socket in a directory only root may enter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from det.deploy.common import dryrun
from tests import stall_clock
from tests.fakes import platform_model as pm
from tests.ports import free_port

logger = logging.getLogger(__name__)

SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _splice(a: socket.socket, b: socket.socket, seconds: float | None = None) -> None:
    """Bytes both ways until both sides end, or until ``seconds`` (then both are cut)."""
    t1 = threading.Thread(target=_pipe, args=(a, b), daemon=True)
    t2 = threading.Thread(target=_pipe, args=(b, a), daemon=True)
    deadline = None if seconds is None else time.monotonic() + seconds
    t1.start()
    t2.start()
    t1.join(seconds)
    t2.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    for s in (a, b):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


class _Listener:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


class UnixToTcp(_Listener):
    """127.0.0.1:port → a Unix socket (PostgreSQL sees local connections)."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        up = socket.socket(socket.AF_UNIX)
        try:
            up.connect(self.path)
        except OSError:
            conn.close()
            return
        _splice(conn, up)


def tcp_db_url(pg_url: str, port: int) -> tuple[str, str]:
    """(the URL through :class:`UnixToTcp`, the Unix socket's path) of a pgserver URL
    (``postgresql://postgres:@/NAME?host=/DIR``)."""
    head, _, query = pg_url.partition("?")
    params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
    name = head.rpartition("/")[2]
    socket_path = f"{params['host']}/.s.PGSQL.{params.get('port', '5432')}"
    return f"postgresql://postgres@127.0.0.1:{port}/{name}", socket_path


def self_signed(tmp: Path) -> tuple[Path, Path, Path]:
    """(cert, key, CA bundle = the system's CAs + the cert)."""
    cert, key, bundle = tmp / "tls.crt", tmp / "tls.key", tmp / "ca-bundle.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    system = SYSTEM_CA.read_text() if SYSTEM_CA.exists() else ""
    bundle.write_text(system + "\n" + cert.read_text())
    bundle.chmod(0o644)
    return cert, key, bundle


@dataclasses.dataclass
class Instance:
    name: str
    port: int
    reason: str
    started_at: float
    took: float = 0.0  # wall seconds from `docker run` to its first answer (a cold start)


class Platform(_Listener):
    """Starts det-master containers on demand and spreads connections over them."""

    def __init__(
        self,
        image: str,
        config_file: Path,
        label: str,
        *,
        time_limit: float,
        max_instances: int = 2,
        env: dict[str, str] | None = None,
    ) -> None:
        self.image = image
        self.config_file = config_file
        self.label = label
        self.time_limit = time_limit
        self.max_instances = max_instances
        self.env = env or {}
        self.instances: list[Instance] = []
        self.history: list[Instance] = []
        self.cut: int = 0  # connections the platform cut at the time limit
        # Set by AwsFront: whether a connection may reach an instance now (False: the ALB's 503);
        # instances are then started and removed only by scale_out/scale_in, never on demand.
        self.gate: Callable[[], bool] | None = None
        self._lock = threading.Lock()
        self._next = 0
        super().__init__()

    # -- instances ------------------------------------------------------------------------------

    def docker_args(self, port: int, name: str) -> list[str]:
        args = [
            "docker", "run", "-d", "--name", name, "--label", f"ai.det.test={self.label}",
            "--network", "host", "--read-only", "--tmpfs", "/tmp:rw,size=256m,mode=1777",
            "--memory", "768m",
            "-e", f"PORT={port}", "-e", "DET_CONFIG_FILE=/etc/det/master.yaml",
            "-v", f"{self.config_file}:/etc/det/master.yaml:ro",
        ]  # fmt: skip
        for k, v in self.env.items():
            args += ["-e", f"{k}={v}"]
        return [*args, self.image]

    def start_instance(self, reason: str) -> Instance:
        port = free_port()
        name = f"det-sl-{self.label}-{uuid.uuid4().hex[:6]}"
        subprocess.run(self.docker_args(port, name), check=True, capture_output=True, timeout=60)
        inst = Instance(name, port, reason, time.monotonic())
        deadline = time.monotonic() + 90
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/info", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            state = subprocess.run(
                ["docker", "inspect", "-f", "{{.State.Running}}", name],
                capture_output=True, text=True,
            ).stdout.strip()  # fmt: skip
            if state != "true" or time.monotonic() > deadline:
                logs = self.logs(inst)
                subprocess.run(["docker", "rm", "-f", name], capture_output=True)
                raise RuntimeError(f"instance {name} did not come up:\n{logs[-4000:]}")
            time.sleep(0.2)
        inst.took = time.monotonic() - inst.started_at
        logger.info("platform: instance %s up on %d (%s)", name, port, reason)
        self.history.append(inst)
        return inst

    def ensure(self, count: int, reason: str) -> None:
        with self._lock:
            while len(self.instances) < count:
                self.instances.append(self.start_instance(reason))

    def scale_out(self, reason: str) -> None:
        with self._lock:
            self.instances.append(self.start_instance(reason))

    def scale_in(self) -> None:
        """One instance stops (the newest), killed as a task stopped by its service."""
        with self._lock:
            if self.instances:
                inst = self.instances.pop()
                subprocess.run(["docker", "rm", "-f", inst.name], capture_output=True, timeout=60)

    def stop_all(self) -> None:
        """Scale to zero: every instance is killed (no graceful stop is promised)."""
        with self._lock:
            for inst in self.instances:
                subprocess.run(["docker", "rm", "-f", inst.name], capture_output=True, timeout=60)
            self.instances = []

    def running(self) -> list[str]:
        out = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"label=ai.det.test={self.label}"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        return out

    def logs(self, inst: Instance) -> str:
        done = subprocess.run(["docker", "logs", inst.name], capture_output=True, text=True)
        return done.stdout + done.stderr

    def _pick(self) -> Instance:
        with self._lock:
            if not self.instances:
                if self.gate is not None:
                    raise RuntimeError("the model registered a task but no instance runs")
                # A request while nothing runs: a cold start (the request waits for it).
                self.instances.append(self.start_instance("request"))
            inst = self.instances[self._next % len(self.instances)]
            self._next += 1
            return inst

    def handle(self, conn: socket.socket) -> None:
        if self.gate is not None and not self.gate():
            alb_503(conn)
            return
        try:
            inst = self._pick()
            up = socket.create_connection(("127.0.0.1", inst.port), timeout=30)
            up.settimeout(None)
        except (OSError, RuntimeError) as e:
            logger.warning("platform: no instance for a request: %s", e)
            conn.close()
            return
        start = time.monotonic()
        _splice(conn, up, self.time_limit)
        if time.monotonic() - start >= self.time_limit - 0.05:
            self.cut += 1

    def close(self) -> None:
        super().close()
        self.stop_all()
        for cid in self.running():
            subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


_ALB_503 = (
    b"<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n"
    b"<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n</body>\r\n</html>\r\n"
)


def alb_503(conn: socket.socket) -> None:
    """Read one request and answer as an ALB with no registered target does: its own HTML 503
    (not the master's JSON), then close."""
    conn.settimeout(10)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        left = int(m.group(1)) - len(body) if m else 0
        while left > 0:
            chunk = conn.recv(min(left, 65536))
            if not chunk:
                break
            left -= len(chunk)
        conn.sendall(
            b"HTTP/1.1 503 Service Temporarily Unavailable\r\nServer: awselb/2.0\r\n"
            b"Content-Type: text/html\r\nConnection: close\r\n"
            + f"Content-Length: {len(_ALB_503)}\r\n\r\n".encode()
            + _ALB_503
        )
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    conn.close()


class AwsFront:
    """The AWS wake path in front of ``platform``, decided by the platform model built from the
    rendered graph (see the module docstring). ``list_actions()``: the service's scheduled
    actions as Application Auto Scaling lists them (moto), in the master's wall-clock times.

    Thread-safe: the model moves only under ``lock``; a connection asks it under the same lock,
    so a connection arriving while a task's container starts waits for it (the model's clock
    stands still meanwhile: :data:`platform_model.TASK_START_S` already counts a start)."""

    def __init__(
        self,
        platform: Platform,
        graph: dryrun.Rendered,
        list_actions: Callable[[], list[dict[str, Any]]],
    ) -> None:
        self.platform = platform
        self.lock = threading.RLock()
        self.list_actions = list_actions
        # (simulated second, status) of every connection through the front.
        self.answers: list[tuple[float, int]] = []
        # Scheduled actions that came due: (their name, at(...) as written) -> simulated second.
        self.due: dict[tuple[str, str], float] = {}
        self.started: list[float] = []  # simulated seconds a task's container came up
        self.stopped: list[float] = []
        self.model = pm.AwsPlatform(graph, self._actions, self._running, self._stopped)
        platform.gate = self.admit

    @property
    def now(self) -> float:
        return self.model.now

    def admit(self) -> bool:
        with self.lock:
            status = self.model.request()
            self.answers.append((self.model.now, status))
            return status == 200

    def _running(self, now: float) -> None:
        self.started.append(now)
        self.platform.scale_out(f"the model's task at {now:.0f} simulated s")

    def _stopped(self, now: float) -> None:
        self.stopped.append(now)
        self.platform.scale_in()

    def _actions(self) -> list[dict[str, Any]]:
        wall = dt.datetime.now(dt.UTC)
        out = []
        for action in self.list_actions():
            schedule = str(action.get("Schedule", ""))
            m = re.fullmatch(r"at\((.+)\)", schedule)
            if not m:  # the model refuses what it does not model
                out.append(action)
                continue
            key = (str(action["ScheduledActionName"]), m.group(1))
            if key not in self.due:
                if dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=dt.UTC) > wall:
                    continue
                self.due[key] = self.model.now
            when = pm.at(self.due[key]).strftime("%Y-%m-%dT%H:%M:%S")
            out.append({**action, "Schedule": f"at({when})"})
        return out

    def run(self, rate: float, until: Callable[[], bool], wall_limit: float, what: str) -> None:
        """Run the simulated clock at ``rate`` times wall time until ``until()`` (checked outside
        the lock), for ``wall_limit`` wall seconds at most."""
        deadline = time.monotonic() + wall_limit
        last = time.monotonic()
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {wall_limit:.0f} s: {what}; {self.tail()}")
            time.sleep(0.05)
            with self.lock:
                self.model.advance(self.model.now + (time.monotonic() - last) * rate)
            last = time.monotonic()  # a container's start (under the lock) is not counted

    def skip(self, until: Callable[[], bool], limit: float) -> float:
        """Skip simulated time (nobody calls) until ``until()``; the simulated seconds."""
        with self.lock:
            start = self.model.now
            self.model.advance_until(until, limit, step=5)
            return self.model.now - start

    def tail(self) -> list[pm.Event]:
        return self.model.events[-10:]


class Nginx:
    """Debian's nginx terminating TLS in front of ``upstream_port``."""

    def __init__(
        self, tmp: Path, cert: Path, key: Path, upstream_port: int, time_limit: int
    ) -> None:
        self.tmp = tmp
        self.port = free_port()
        tmp.mkdir(parents=True, exist_ok=True)
        for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (tmp / d).mkdir(exist_ok=True)
        conf = tmp / "nginx.conf"
        conf.write_text(f"""
user root;
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 512; }}
http {{
  access_log {tmp}/access.log;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
  server {{
    listen 127.0.0.1:{self.port} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    client_max_body_size 200m;
    location / {{
      proxy_pass http://127.0.0.1:{upstream_port};
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto https;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_connect_timeout 120s;
      proxy_read_timeout {time_limit}s;
      proxy_send_timeout {time_limit}s;
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}
}}
""")
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.access(exe, os.X_OK):  # README.md, "The tests": skips only without it
            pytest.skip("nginx missing: apt-get install nginx (bash scripts/test.sh does as root)")
        with open(tmp / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(
                [exe, "-c", str(conf), "-p", str(tmp)], stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 1),
            ):
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not start: {(tmp / 'error.log').read_text()}")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def access_log(self) -> str:
        return (self.tmp / "access.log").read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                stall_clock.wait_process(self.proc, 20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def run_once(image: str, config_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The image as a one-off job (the migration job): the same read-only, non-root setup."""
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "host", "--read-only",
         "--tmpfs", "/tmp:rw,size=64m,mode=1777",
         "-e", "DET_CONFIG_FILE=/etc/det/master.yaml",
         "-v", f"{config_file}:/etc/det/master.yaml:ro", image, *args],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def env_without_det() -> dict[str, Any]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
