"""``sampler: tpe`` on a real cluster: ``examples/core_api/adaptive_asha_tpe.yaml`` (adaptive ASHA
with det's model-based sampler) runs to COMPLETED on a master and two Docker agents."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml

from det.master.searcher.simulate import preview
from tests.e2e.cluster import EXAMPLES, Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

CORE = EXAMPLES / "core_api"
CONFIG = CORE / "adaptive_asha_tpe.yaml"
SAMPLED = ("learning_rate", "hidden_size", "batch_size")


def _sampled(hparams: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(hparams[k] for k in SAMPLED)


@pytest.mark.slow
def test_adaptive_asha_with_tpe_sampler_completes(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    conf = yaml.safe_load(CONFIG.read_text())
    eid = cluster.create(CONFIG, CORE)
    cluster.wait_state(eid, "STATE_COMPLETED", 900)

    exp = cluster.experiment(eid)
    searcher = exp["config"]["searcher"]
    assert searcher["sampler"] == "tpe" and searcher["mode"] == "aggressive"
    trials = sorted(cluster.trials(eid), key=lambda t: t["id"])
    assert len(trials) == conf["searcher"]["max_trials"]
    lengths = []
    for t in trials:
        assert t["state"] == "STATE_COMPLETED", t
        assert cluster.metrics(t["id"], "validation"), f"trial {t['id']} has no validation"
        lengths.append(t["totalBatchesProcessed"])
        h = t["hparams"]
        # Every proposal is a value of its hyperparameter's type and range.
        assert isinstance(h["learning_rate"], float)
        assert 10**-3 <= h["learning_rate"] <= 10**-0.5 * (1 + 1e-9)
        assert isinstance(h["hidden_size"], int) and 8 <= h["hidden_size"] <= 64
        assert h["batch_size"] in (16, 32, 64)
        assert h["validate_every"] == 10 and h["report_every"] == 10
    # ASHA stopped trials early (a stop reaches a trial a few batches after its rung, at 10 or
    # 30 batches) and trained some to max_time (90).
    assert max(lengths) == 90 and min(lengths) < 90, lengths

    # The model chose the late trials. Uniform sampling with the experiment's seed would have
    # drawn the same first trials (the start-up ones, created before 10 trials reported) and
    # different later ones: with 4 trials at a time, the 14th to 16th were created after at
    # least 10 trials had ended.
    seed = int(exp["config"]["reproducibility"]["experiment_seed"])
    uniform_searcher = {k: v for k, v in searcher.items() if k != "sampler"}
    uniform = preview(uniform_searcher, exp["config"]["hyperparameters"], seed).trials
    ran = [_sampled(t["hparams"]) for t in trials]
    drawn = [_sampled(u.hparams) for u in uniform]
    assert all(
        math.isclose(a[0], b[0]) and a[1:] == b[1:] for a, b in zip(ran[:4], drawn[:4], strict=True)
    ), (ran[:4], drawn[:4])
    assert all(a != b for a, b in zip(ran[13:], drawn[13:], strict=True)), (ran[13:], drawn[13:])
