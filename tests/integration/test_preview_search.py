"""``det preview-search`` shows the sampler and the rungs: det's master adds them to Determined's
search summary (the official client's bindings still parse it and its CLI still prints it), and
our offline CLI prints them. The master is the app in the test's process
(``in_process_cli_master``); the official client's test, a process of its own that needs a
port, is in test_official_client_answers.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
import yaml

from tests.integration import cli_support
from tests.integration.cli_support import Det, write_config
from tests.integration.conftest import MasterClient

pytestmark = pytest.mark.integration
cli_master = cli_support.in_process_cli_master
det = cli_support.det

# max_rungs 3, divisor 4, max_time 64: rungs at 4, 16, 64 (aggressive: one bracket of 3).
CONFIG = """
name: preview-tpe
entrypoint: python3 train.py
searcher:
  name: adaptive_asha
  metric: validation_loss
  max_trials: 16
  max_time: 64
  time_metric: batches
  max_rungs: 3
  divisor: 4
  mode: {mode}
  sampler: tpe
hyperparameters:
  lr: {{type: log, minval: -4, maxval: -1}}
  width: {{type: int, minval: 8, maxval: 64}}
  act: {{type: categorical, vals: [relu, tanh]}}
# A fixed seed: without one every preview draws its own, and the sampler's previews differ.
reproducibility: {{experiment_seed: 7}}
"""


def preview(master: MasterClient, config: str) -> dict:
    r = requests.post(
        master.url + "/api/v1/preview-hp-search",
        headers={"Authorization": f"Bearer {master.token}"},
        json={"config": yaml.safe_load(config)},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.json()["summary"]


def test_summary_carries_the_sampler_and_each_brackets_rungs(cli_master: MasterClient) -> None:
    summary = preview(cli_master, CONFIG.format(mode="standard"))
    assert summary["sampler"] == "tpe" and summary["config"]["sampler"] == "tpe"
    assert summary["timeMetric"] == "batches"
    # standard of 3 rungs: brackets of 3 and 2 rungs (weights 16/3, 4/2: 11 and 4 trials, +1).
    brackets = summary["brackets"]
    assert [[r["length"] for r in b["rungs"]] for b in brackets] == [[4, 16, 64], [16, 64]]
    assert [b["trials"] for b in brackets] == [12, 4]
    # Every trial of a bracket is ranked at its first rung; fewer reach each later one; and the
    # rungs agree with Determined's per-length counts of the same preview.
    lengths = {t["unit"]["value"]: t["count"] for t in summary["trials"]}
    for b in brackets:
        reach = [r["trials"] for r in b["rungs"]]
        assert reach[0] == b["trials"] and reach == sorted(reach, reverse=True)
    assert (
        sum(r["trials"] for b in brackets for r in b["rungs"] if r["length"] == 64) == lengths[64]
    )


def test_uniform_sampling_and_searchers_without_rungs(cli_master: MasterClient) -> None:
    plain = CONFIG.format(mode="aggressive").replace("  sampler: tpe\n", "")
    summary = preview(cli_master, plain)
    assert summary["sampler"] == "random" and "sampler" not in summary["config"]
    assert [len(b["rungs"]) for b in summary["brackets"]] == [3]
    single = "entrypoint: x\nsearcher: {name: random, metric: l, max_trials: 3, max_length: 5}\n"
    summary = preview(cli_master, single)
    assert summary["brackets"] == [] and summary["sampler"] == "random"


def test_our_cli_prints_the_sampler_and_the_rungs(det: Det, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, CONFIG.format(mode="standard"))
    det.monkeypatch.setenv("DET_MASTER", "http://127.0.0.1:1")  # offline
    out = det.ok("preview-search", str(cfg)).out
    assert "Using adaptive_asha search, sampler tpe" in out
    assert "Rungs: how many trials are ranked at each length (batches)" in out
    body = det.ok("preview-search", str(cfg), "--json").json()
    assert body["sampler"] == "tpe"
    assert [[r["length"] for r in b["rungs"]] for b in body["brackets"]] == [[4, 16, 64], [16, 64]]
    rows = [line.split() for line in out.splitlines()]
    # Bracket 1's first row: bracket, its trials, rung 1, 4 batches, all 12 trials reach it.
    assert ["1", "12", "1", "4", "12"] in rows
