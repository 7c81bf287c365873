"""A simulated agent: speaks the real agent protocol to a real master, but "runs" each task as a
thread that plays the part of training code (reports metrics and checkpoints through the real
REST API with the allocation token, honours preemption, exits 0).

This is a fake of our own agent, for master tests that need many fast tasks and no Docker; the
real agent is tested with real containers elsewhere.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from det.common.agent_protocol import HeartbeatRequest, HeartbeatResponse
from det.common.states import AllocationState


@dataclass
class Task:
    allocation_id: str
    spec: dict[str, Any]
    state: AllocationState = AllocationState.RUNNING
    exit_code: int | None = None
    error: str | None = None
    thread: threading.Thread | None = None
    killed: threading.Event = field(default_factory=threading.Event)


def _session() -> requests.Session:
    """A session that never reads the process environment: with ``trust_env`` (the default)
    requests looks up proxy variables in ``os.environ`` on every call, which races with pytest
    setting ``PYTEST_CURRENT_TEST`` in the main thread (a ``KeyError`` in this thread)."""
    s = requests.Session()
    s.trust_env = False
    return s


class RetryingSession(requests.Session):
    """Retries connection errors and 5xx for up to ``patience`` seconds, as the harness does, so
    a simulated task survives a master restart. ``acked`` records every POST that succeeded.
    Like :func:`_session`, it never reads the process environment."""

    def __init__(self, patience: float = 60.0) -> None:
        super().__init__()
        self.trust_env = False
        self.patience = patience
        self.acked: list[tuple[str, Any]] = []

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        deadline = time.monotonic() + self.patience
        while True:
            try:
                r = super().request(method, url, *args, **kwargs)
                if r.status_code < 500:
                    if method == "POST" and r.status_code == 200:
                        self.acked.append((str(url), kwargs.get("json")))
                    return r
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"master unreachable for {self.patience}s")
            time.sleep(0.2)


# Every report a simulated task got a 200 for, for "nothing was lost" checks.
ACKED: list[tuple[str, Any]] = []
_ACK_LOCK = threading.Lock()


def default_training(
    master: str,
    spec: dict[str, Any],
    killed: threading.Event,
    *,
    steps: int = 8,
    validate_every: int = 2,
    curve: Callable[[dict[str, Any], int], float] | None = None,
) -> int:
    """Trains ``steps`` steps from the latest checkpoint; 0 on completion or preemption."""
    env = spec["env"]
    s = RetryingSession()
    s.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {env['DET_SESSION_TOKEN']}"
    trial_id = int(env["DET_TRIAL_ID"])
    hparams = json.loads(env["DET_HPARAMS"])
    alloc = env["DET_ALLOCATION_ID"]
    start = 0
    if env.get("DET_LATEST_CHECKPOINT"):
        ck = s.get(
            f"{master}/api/v1/checkpoints/{env['DET_LATEST_CHECKPOINT']}", timeout=10
        ).json()["checkpoint"]
        start = int(ck["metadata"]["steps_completed"])
    curve = curve or (lambda h, t: float(h.get("lr", 1.0)) / (t + 1))
    for step in range(start + 1, steps + 1):
        if killed.is_set():
            with _ACK_LOCK:
                ACKED.extend(s.acked)
            return 137
        s.post(
            f"{master}/api/v1/trials/{trial_id}/metrics",
            json={
                "group": "training",
                "metrics": {
                    "trialId": trial_id,
                    "trialRunId": int(env["DET_TRIAL_RUN_ID"]),
                    "stepsCompleted": step,
                    "metrics": {"avgMetrics": {"loss": curve(hparams, step)}},
                },
            },
            timeout=10,
        ).raise_for_status()
        if step % validate_every == 0:
            s.post(
                f"{master}/api/v1/checkpoints",
                json={
                    "uuid": str(uuid.uuid4()),
                    "taskId": env["DET_TASK_ID"],
                    "allocationId": alloc,
                    "resources": {"model.pt": "10"},
                    "metadata": {"steps_completed": step},
                    "state": "STATE_COMPLETED",
                    "training": {},
                },
                timeout=10,
            ).raise_for_status()
            s.post(
                f"{master}/api/v1/trials/{trial_id}/metrics",
                json={
                    "group": "validation",
                    "metrics": {
                        "trialId": trial_id,
                        "trialRunId": int(env["DET_TRIAL_RUN_ID"]),
                        "stepsCompleted": step,
                        "metrics": {
                            "avgMetrics": {"validation_loss": curve(hparams, step), "batches": step}
                        },
                    },
                },
                timeout=10,
            ).raise_for_status()
        r = s.get(
            f"{master}/api/v1/allocations/{alloc}/signals/preemption",
            params={"timeout_seconds": 0},
            timeout=10,
        )
        if r.json().get("preempt"):
            s.post(
                f"{master}/api/v1/allocations/{alloc}/signals/ack_preemption",
                json={"allocationId": alloc},
                timeout=10,
            )
            break
    with _ACK_LOCK:
        ACKED.extend(s.acked)
    return 0


class SimAgent:
    def __init__(
        self,
        master: str,
        agent_token: str,
        agent_id: str,
        slots: int = 1,
        pool: str = "default",
        train: Callable[..., int] | None = None,
        interval: float = 0.1,
    ) -> None:
        self.master = master
        self.agent_id = agent_id
        self.slots = slots
        self.pool = pool
        self.train = train or default_training
        self.interval = interval
        self.tasks: dict[str, Task] = {}
        self.started: list[str] = []  # every allocation this agent ran
        # Trials only: a checkpoint GC task may follow an experiment's end at any moment.
        self.trials_started: list[str] = []
        self.notice: dict[str, Any] | None = None
        #: The allocations the last heartbeat answer marked ``logsWatched``.
        self.logs_watched: frozenset[str] = frozenset()
        self._session = _session()
        self._session.headers["Authorization"] = f"Bearer {agent_token}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"sim-{agent_id}")

    def start(self) -> SimAgent:
        self._thread.start()
        return self

    def __enter__(self) -> SimAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 30.0) -> None:
        """Stops heartbeating (as if the machine vanished), tells every task it is killed and
        joins the heartbeat thread and the task threads (a task that ignores ``killed``, such
        as a :class:`Holder` not yet released, is waited for up to ``timeout`` seconds: the
        test's thread check then names the one still running)."""
        self._stop.set()
        tasks = list(self.tasks.values())
        for t in tasks:
            t.killed.set()
        deadline = time.monotonic() + timeout
        # A heartbeat in flight ends within its own 10 s timeout.
        self._thread.join(max(0.0, deadline - time.monotonic()))
        for t in [*tasks, *self.tasks.values()]:
            if t.thread is not None:
                t.thread.join(max(0.0, deadline - time.monotonic()))
        self._session.close()

    def _report(self) -> HeartbeatRequest:
        return {
            "resourcePool": self.pool,
            "version": "sim",
            "slots": [{"id": str(i), "type": "cpu", "brand": "sim"} for i in range(self.slots)],
            "containers": [
                {
                    "allocationId": t.allocation_id,
                    "containerId": f"sim-{t.allocation_id}",
                    "state": t.state,
                    "exitCode": t.exit_code,
                    **({"error": t.error} if t.error else {}),
                }
                for t in self.tasks.values()
            ],
            "preemptionNotice": self.notice,
        }

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                r = self._session.post(
                    f"{self.master}/api/v1/agents/{self.agent_id}/heartbeat",
                    json=self._report(),
                    timeout=10,
                )
                if r.status_code == 200:
                    self._apply(r.json())
            except requests.RequestException:
                pass
            self._stop.wait(self.interval)

    def _apply(self, desired: HeartbeatResponse) -> None:
        self.logs_watched = frozenset(
            c["allocationId"] for c in desired["containers"] if c.get("logsWatched")
        )
        listed = set()
        for c in desired["containers"]:
            aid = c["allocationId"]
            listed.add(aid)
            task = self.tasks.get(aid)
            if c["action"] == "RUN" and task is None:
                task = Task(aid, c["spec"])
                self.tasks[aid] = task
                self.started.append(aid)
                if c["spec"].get("taskType") == "TRIAL":
                    self.trials_started.append(aid)
                task.thread = threading.Thread(
                    target=self._run, args=(task,), daemon=True, name=f"sim-{self.agent_id}:{aid}"
                )
                task.thread.start()
            elif (
                c["action"] == "KILL"
                and task is not None
                and task.state != AllocationState.TERMINATED
            ):
                task.killed.set()
            elif c["action"] == "KILL" and task is None:
                # Killed before this agent started it: reported ended, as the real agent does
                # (agent/reconcile.py), or the master would wait for it forever.
                self.tasks[aid] = Task(
                    aid,
                    {},
                    state=AllocationState.TERMINATED,
                    error="no container for this allocation",
                )
        for aid in [
            a
            for a, t in self.tasks.items()
            if a not in listed and t.state == AllocationState.TERMINATED
        ]:
            del self.tasks[aid]

    def _run(self, task: Task) -> None:
        if task.spec.get("taskType") == "CHECKPOINT_GC":
            # The real GC command, in this process (storage paths are host paths here).
            from det.exec import gc_checkpoints

            task.exit_code = gc_checkpoints.main(task.spec["env"])
            task.state = AllocationState.TERMINATED
            return
        try:
            code = self.train(self.master, task.spec, task.killed)
        except Exception:  # the "training script" crashed
            code = 1
        task.exit_code = code
        task.state = AllocationState.TERMINATED


class Holder:
    """A ``train`` that holds every task it is given until ``release`` is set (the tests set it
    when they end): the tasks run for the whole test, however long a loaded machine makes it.
    ``specs`` are the tasks' specs in the order they started."""

    def __init__(self) -> None:
        self.specs: list[dict[str, Any]] = []
        self.release = threading.Event()

    def __call__(self, master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        self.specs.append(spec)
        self.release.wait()
        return 0


def wait(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)
