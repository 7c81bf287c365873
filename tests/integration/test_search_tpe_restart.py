"""``sampler: tpe`` across a master restart: the master killed mid-search and started again
continues the same search. Replaying the experiment's recorded searcher events through one
uninterrupted searcher creates exactly the trials (request ids, hyperparameters, seeds) the two
masters created, including those the model chose after the restart from what it learned before."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import psycopg
import pytest
import yaml
from psycopg.rows import dict_row

from det.master.searcher import CreateTrial, ExitedReason, new_searcher
from tests.fakes import sim_agent
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.conftest import Master, free_port
from tests.integration.test_master_lifecycle import create, exp_state, trials

pytestmark = pytest.mark.integration

# Rungs at 1, 3 and 9 batches; 3 trials at a time, so most of the 16 come from the model.
SEARCH = """
name: restart-tpe
entrypoint: python3 train.py
searcher:
  name: adaptive_asha
  metric: validation_loss
  time_metric: batches
  max_time: 9
  divisor: 3
  max_rungs: 3
  mode: aggressive
  max_trials: 16
  max_concurrent_trials: 3
  sampler: tpe
hyperparameters:
  lr: {type: log, minval: -3, maxval: 0}
  width: {type: int, minval: 1, maxval: 9}
  act: {type: categorical, vals: [a, b, c]}
  x: {type: double, minval: 0, maxval: 1}
reproducibility: {experiment_seed: 5}
"""


_CONFIG = yaml.safe_load(SEARCH)
SEARCHER_UNIFORM = {k: v for k, v in _CONFIG["searcher"].items() if k != "sampler"}
HPARAMS = _CONFIG["hyperparameters"]


def slow_training(master: str, spec: dict[str, Any], killed: Any) -> int:
    def curve(h: dict[str, Any], t: int) -> float:
        time.sleep(0.1)  # long enough that the kill lands mid-search
        quality = float(h["lr"]) + abs(int(h["width"]) - 6) / 9 + (h["act"] != "b") * 0.2
        return quality + abs(float(h["x"]) - 0.3) + 1.0 / t

    return sim_agent.default_training(master, spec, killed, steps=9, validate_every=1, curve=curve)


FIRST = 10  # trials that train before the kill; the model starts after 10 trials report


def gated(opened: threading.Event) -> Any:
    """``slow_training`` for the first FIRST trials; every later trial waits for ``opened`` (the
    kill) before it trains. With 3 trials at a time, at most FIRST + 3 of the 16 exist when the
    master is killed, however the machine's load paces the search against the test's polls."""
    order: list[str] = []  # trial ids in the order of their first start
    lock = threading.Lock()

    def train(master: str, spec: dict[str, Any], killed: Any) -> int:
        trial = spec["env"]["DET_TRIAL_ID"]
        with lock:
            if trial not in order:
                order.append(trial)
            held = order.index(trial) >= FIRST
        while held and not opened.wait(0.2):
            if killed.is_set():
                return 137
        return slow_training(master, spec, killed)

    return train


def replay(pg_url: str, eid: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(what one searcher fed the recorded events creates, what the masters created)."""
    with psycopg.connect(pg_url, row_factory=dict_row) as conn:
        config = conn.execute("SELECT config FROM experiments WHERE id = %s", (eid,)).fetchone()
        events = conn.execute(
            # Events the searcher has not seen yet (none are expected) made no decision.
            "SELECT kind, request_id, payload FROM searcher_events"
            # In the order the searcher saw them: by its pass, then id (migration 0048).
            " WHERE experiment_id = %s AND processed ORDER BY processed_pass, id",
            (eid,),
        ).fetchall()
        stored = conn.execute(
            "SELECT request_id, hparams, seed FROM trials WHERE experiment_id = %s ORDER BY id",
            (eid,),
        ).fetchall()
    assert config is not None
    cfg = config["config"]
    searcher = new_searcher(
        cfg["searcher"], cfg["hyperparameters"], int(cfg["reproducibility"]["experiment_seed"])
    )
    created: list[tuple[Any, ...]] = []

    def apply(actions: list[Any]) -> None:
        for a in actions:
            if isinstance(a, CreateTrial):
                created.append((a.request_id, a.hparams, a.seed))
                apply(searcher.trial_created(a.request_id))

    apply(searcher.initial_trials())
    for ev in events:
        p, rid = ev["payload"] or {}, ev["request_id"]
        if ev["kind"] == "validation":
            apply(searcher.validation_completed(rid, float(p["metric"]), float(p["time"])))
        elif ev["kind"] == "exited":
            apply(searcher.trial_exited(rid))
        elif ev["kind"] == "early_exit":
            apply(searcher.trial_exited_early(rid, ExitedReason[str(p.get("reason", "ERRORED"))]))
    return created, [(t["request_id"], t["hparams"], t["seed"]) for t in stored]


def _trial_count(pg_url: str, eid: int) -> int:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM trials WHERE experiment_id = %s", (eid,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_restarted_master_continues_the_same_tpe_search(master_factory: Any, pg_url: str) -> None:
    port = free_port()
    m: Master = master_factory(port=port, name="a")
    opened = threading.Event()
    train = gated(opened)  # one count of trials over the three agents
    agents = [SimAgent(m.url, m.agent_token, f"sim-{i}", train=train).start() for i in range(3)]
    try:
        eid = create(m, SEARCH)
        # Kill once the model has data to learn from (it starts after 10 trials report).
        # Deadlines for a loaded machine (3 test workers on 2 cores): the whole search takes
        # about a minute on a quiet one.
        wait(lambda: len(trials(m, eid)) >= FIRST, 600, "the search under way")
        m.kill(signal.SIGKILL)
        opened.set()
        assert _trial_count(pg_url, eid) < 16, "the search ended before the kill"
        time.sleep(1.0)
        m2: Master = master_factory(port=port, name="a-restarted")
        wait(lambda: exp_state(m2, eid) == "STATE_COMPLETED", 900, "the search to complete")
        ts = trials(m2, eid)
        assert len(ts) == 16 and {t["state"] for t in ts} == {"STATE_COMPLETED"}
    finally:
        for a in agents:
            a.stop()
    replayed, stored = replay(pg_url, eid)
    assert replayed == stored
    # Uniform sampling with the same seed draws the same first trials (created at once) and
    # other ones for the last trials, created after at least 10 trials had ended: the model's.
    uniform = new_searcher(SEARCHER_UNIFORM, HPARAMS, 5).ctx
    drawn = [uniform.create().hparams for _ in range(16)]
    assert [s[1] for s in stored[:3]] == drawn[:3]
    assert all(s[1] != d for s, d in zip(stored[13:], drawn[13:], strict=True))
