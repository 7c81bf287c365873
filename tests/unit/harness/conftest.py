from __future__ import annotations

from collections.abc import Iterator

import pytest

import det.core._tensorboard
from tests.unit.harness.fake_master import FakeMaster

_TASK_VARS = (
    "DET_MASTER",
    "DET_CLUSTER_ID",
    "DET_AGENT_ID",
    "DET_SLOT_IDS",
    "DET_TASK_ID",
    "DET_ALLOCATION_ID",
    "DET_SESSION_TOKEN",
    "DET_TASK_TYPE",
    "DET_LATEST_CHECKPOINT",
    "DET_USER_TOKEN",
)


@pytest.fixture(autouse=True)
def _no_task_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start off-cluster whatever the machine's environment says."""
    for k in _TASK_VARS:
        monkeypatch.delenv(k, raising=False)


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    m = FakeMaster()
    m.start()
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture
def on_cluster(master: FakeMaster, monkeypatch: pytest.MonkeyPatch, tmp_path):  # type: ignore[no-untyped-def]
    """Sets a trial's task environment whose checkpoints go to ``tmp_path/ckpts`` (shared_fs)."""

    # The trial's local TensorBoard directory (under /tmp in a container) in this test's own.
    monkeypatch.setattr(det.core._tensorboard, "DEFAULT_ROOT", str(tmp_path / "tmp"))

    def apply(**overrides: object) -> FakeMaster:
        overrides.setdefault(
            "config",
            {
                "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "ckpts")},
                "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 8}},
            },
        )
        for k, v in master.task_env(**overrides).items():
            monkeypatch.setenv(k, v)
        return master

    return apply
