"""Time from a RUN in a heartbeat answer to the agent reporting the container RUNNING.

Runs a real `det-agent` (in this process) against the fake master of the test tree and a real
Docker engine, with the `det-base:bookworm` image (infra/build-images.sh base). Prints, for N
runs and their median: the time from the first heartbeat answer carrying the RUN to the first
heartbeat reporting RUNNING, and the time from the master deciding (RUN set) to that report
(which adds the wait for the agent's next heartbeat).

    .venv/bin/python bench/agent_run_latency.py [--runs 5] [--heartbeat-seconds 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker

from det.agent.config import load_config
from det.agent.daemon import Agent
from tests.fakes.master import FakeMaster, make_tgz


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--heartbeat-seconds", type=float, default=1.0)
    p.add_argument("--image", default="det-base:bookworm")
    args = p.parse_args()

    master = FakeMaster(token="bench", heartbeat_seconds=args.heartbeat_seconds).start()
    agent_id = f"bench-{uuid.uuid4().hex[:6]}"
    client = docker.from_env()
    with tempfile.TemporaryDirectory() as state:
        cfg = load_config(
            [
                "--master-url",
                master.url,
                "--agent-id",
                agent_id,
                "--agent-token",
                "bench",
                "--state-dir",
                state,
                "--slot-type",
                "cpu",
                "--heartbeat-seconds",
                str(args.heartbeat_seconds),
            ],
            environ={},
        )
        agent = Agent(cfg, docker_client=client)
        stop = threading.Event()
        thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        thread.start()
        master.contexts["/ctx"] = make_tgz({"train.py": "print('hi')\n"})
        from_answer, from_decision = [], []
        try:
            for i in range(args.runs):
                alloc = f"{i}.1.1"
                spec = {
                    "taskId": f"{i}.1",
                    "image": args.image,
                    "command": ["sleep", "60"],
                    "env": {},
                    "slotIds": ["0"],
                    "deviceType": "cpu",
                    "contextPath": "/ctx",
                    "killGraceSeconds": 1,
                }
                decided = time.monotonic()
                master.run(agent_id, alloc, spec)
                running = master.wait_for(
                    lambda a=alloc: master.first_report(agent_id, a, "RUNNING"), 60, alloc
                )
                from_answer.append(running - master.first_sent[alloc])
                from_decision.append(running - decided)
                print(
                    f"run {i}: answer->RUNNING {from_answer[-1]:.3f}s, "
                    f"decision->RUNNING {from_decision[-1]:.3f}s"
                )
                master.drop(agent_id, alloc)
                master.wait_for(lambda a=alloc: master.report(agent_id, a) is None, 60, "removed")
        finally:
            stop.set()
            agent.wake()
            thread.join(10)
            for c in client.containers.list(
                all=True, filters={"label": f"ai.det.agent-id={agent_id}"}
            ):
                c.remove(force=True)
            master.stop()
    print(
        f"median over {args.runs} runs (heartbeat {args.heartbeat_seconds}s): "
        f"heartbeat answer with RUN -> RUNNING reported {statistics.median(from_answer):.3f}s; "
        f"RUN decided -> RUNNING reported {statistics.median(from_decision):.3f}s"
    )


if __name__ == "__main__":
    main()
