"""Any image with a python3 runs trials: the agent brings det's harness (the harness bundle).

``det-base:trixie`` is Debian trixie's minbase with its Python 3.13 and nothing of det, no pip
package (``infra/build-images.sh trixie``); the experiment is ``examples/stdlib_core_api``
(standard library only). Its checkpoint GC task runs in the same image.
"""

from __future__ import annotations

import pytest

from tests.docker_support import docker_client
from tests.e2e.cluster import EXAMPLES, Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

BARE = "det-base:trixie"
EXAMPLE = EXAMPLES / "stdlib_core_api"


def test_a_trial_completes_in_a_bare_python_313_image_without_det(
    shared_one_slot: Cluster,
) -> None:
    client = docker_client(BARE)
    image_check = client.containers.run(
        BARE, ["sh", "-c", "python3 -c 'import det' 2>&1; python3 --version"], remove=True
    ).decode()
    assert "No module named 'det'" in image_check and "Python 3.13" in image_check, image_check

    cluster = shared_one_slot
    eid = cluster.create(EXAMPLE / "const.yaml", EXAMPLE)
    cluster.wait_state(eid, "STATE_COMPLETED", 300)

    (trial,) = cluster.trials(eid)
    assert trial["state"] == "STATE_COMPLETED", trial
    assert trial["totalBatchesProcessed"] == 200, trial
    training = cluster.metrics(trial["id"], "training")
    assert [int(m["totalBatches"]) for m in training] == list(range(10, 201, 10))
    (validation,) = cluster.metrics(trial["id"], "validation")
    assert validation["metrics"]["avg_metrics"]["validation_loss"] < 1.0, validation

    logs = "".join(str(e.get("log") or "") for e in cluster.trial_logs(trial["id"]))
    assert "python 3.13." in logs, logs[-2000:]
    assert "det from /run/det/harness/det/__init__.py" in logs, logs[-2000:]

    # shared_fs checkpoints written from inside the bare image, every 50 batches.
    ckpts = cluster.checkpoints_of(trial["id"])
    steps = sorted(int(c["metadata"]["steps_completed"]) for c in ckpts)
    assert steps == [50, 100, 150, 200], ckpts

    # Checkpoint GC ran in the same image (python3 -m det.exec.gc_checkpoints from the bundle):
    # the latest and the best checkpoint stay (Determined's defaults), the others are deleted.
    cluster.wait_checkpoint_gc(eid)
    states = {
        int(c["metadata"]["steps_completed"]): c["state"]
        for c in cluster.checkpoints_of(trial["id"])
    }
    kept = [s for s, st in states.items() if st == "STATE_COMPLETED"]
    deleted = [s for s, st in states.items() if st == "STATE_DELETED"]
    assert 200 in kept and deleted, states
    by_step = {int(c["metadata"]["steps_completed"]): c["uuid"] for c in ckpts}
    for s in kept:
        assert (cluster.checkpoints / by_step[s] / "state.json").is_file()
    for s in deleted:
        assert not (cluster.checkpoints / by_step[s]).exists()
