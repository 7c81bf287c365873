"""What a task knows about itself: read from the ``DET_*`` environment the agent sets.

``write_official_info_files`` writes the same facts where the official ``determined`` package
looks for them (``/run/determined/info/*.json``), so scripts written for it detect the cluster.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from .jsontypes import JSONObject


logger = logging.getLogger(__name__)

OFFICIAL_INFO_DIR = "/run/determined/info"


@dataclasses.dataclass(frozen=True)
class TrialInfo:
    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    config: dict[str, Any]
    steps_completed: int
    trial_run_id: int

    @property
    def user_data(self) -> dict[str, Any]:
        data = self.config.get("data") or {}
        return dict(data)


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    master_url: str
    cluster_id: str
    agent_id: str
    slot_ids: list[str]
    task_id: str
    allocation_id: str
    session_token: str
    task_type: str
    latest_checkpoint: str | None = None
    user: str | None = None
    user_token: str | None = None
    unique_port_offset: int = 0
    trial: TrialInfo | None = None
    #: The task's containers (one per agent of its gang, chief's first), this one's place among
    #: them and their slots: ``DET_CONTAINER_ADDRS``, ``_RANK``, ``_SLOT_COUNTS`` (the master's
    #: rendezvous; one container on this host when unset).
    container_addrs: list[str] = dataclasses.field(default_factory=lambda: ["127.0.0.1"])
    container_rank: int = 0
    container_slot_counts: list[int] = dataclasses.field(default_factory=list)

    @property
    def total_slots(self) -> int:
        """Slots of the whole task, every container's."""
        return sum(self.container_slot_counts) or len(self.slot_ids)


_REQUIRED = (
    "DET_MASTER",
    "DET_CLUSTER_ID",
    "DET_AGENT_ID",
    "DET_SLOT_IDS",
    "DET_TASK_ID",
    "DET_ALLOCATION_ID",
    "DET_SESSION_TOKEN",
    "DET_TASK_TYPE",
)


def cluster_info_from_env(env: Mapping[str, str]) -> ClusterInfo | None:
    """None when not running in a task (any required variable missing)."""
    if any(k not in env for k in _REQUIRED):
        return None
    trial = None
    if env["DET_TASK_TYPE"] == "TRIAL" and "DET_TRIAL_ID" in env:
        trial = TrialInfo(
            trial_id=int(env["DET_TRIAL_ID"]),
            experiment_id=int(env["DET_EXPERIMENT_ID"]),
            trial_seed=int(env.get("DET_TRIAL_SEED", "0")),
            hparams=json.loads(env.get("DET_HPARAMS", "{}")),
            config=json.loads(env.get("DET_EXPERIMENT_CONFIG", "{}")),
            steps_completed=int(env.get("DET_STEPS_COMPLETED", "0")),
            trial_run_id=int(env.get("DET_TRIAL_RUN_ID", "0")),
        )
    return ClusterInfo(
        master_url=env["DET_MASTER"],
        cluster_id=env["DET_CLUSTER_ID"],
        agent_id=env["DET_AGENT_ID"],
        slot_ids=[str(s) for s in json.loads(env["DET_SLOT_IDS"])],
        task_id=env["DET_TASK_ID"],
        allocation_id=env["DET_ALLOCATION_ID"],
        session_token=env["DET_SESSION_TOKEN"],
        task_type=env["DET_TASK_TYPE"],
        latest_checkpoint=env.get("DET_LATEST_CHECKPOINT") or None,
        user=env.get("DET_USER"),
        user_token=env.get("DET_USER_TOKEN") or None,
        unique_port_offset=int(env.get("DET_UNIQUE_PORT_OFFSET", "0") or 0),
        trial=trial,
        **_rendezvous(env),
    )


class _Rendezvous(TypedDict, total=False):
    """The container fields of :class:`ClusterInfo` (a gang's containers, when several)."""

    container_addrs: list[str]
    container_rank: int
    container_slot_counts: list[int]


def _rendezvous(env: Mapping[str, str]) -> _Rendezvous:
    """The container fields of :class:`ClusterInfo` from the environment (pure)."""
    if not env.get("DET_CONTAINER_ADDRS"):
        return {"container_slot_counts": [len(json.loads(env["DET_SLOT_IDS"]))]}
    return {
        "container_addrs": [str(a) for a in json.loads(env["DET_CONTAINER_ADDRS"])],
        "container_rank": int(env.get("DET_CONTAINER_RANK", "0") or 0),
        "container_slot_counts": [
            int(n) for n in json.loads(env.get("DET_CONTAINER_SLOT_COUNTS") or "[]")
        ],
    }


def get_cluster_info() -> ClusterInfo | None:
    """The current task's info, or None off-cluster (the equivalent of ``det.get_cluster_info()``)."""
    return cluster_info_from_env(os.environ)


def official_info_documents(info: ClusterInfo) -> dict[str, JSONObject]:
    """The JSON documents the official package reads, by file name (pure)."""
    docs: dict[str, JSONObject] = {
        "cluster.json": {
            "master_url": info.master_url,
            "cluster_id": info.cluster_id,
            "agent_id": info.agent_id,
            # The official package indexes GPUs by these; ours are strings of ints.
            "slot_ids": [int(s) if s.isdigit() else s for s in info.slot_ids],
            "task_id": info.task_id,
            "allocation_id": info.allocation_id,
            "session_token": info.session_token,
            "task_type": info.task_type,
            "master_cert_name": None,
            "master_cert_file": None,
            "latest_checkpoint": info.latest_checkpoint,
        },
        "resources.json": {"gpu_uuids": []},
        # Copies: a list[str] is not a list of JSON values to mypy (lists are invariant).
        "rendezvous.json": {
            "container_addrs": [a for a in info.container_addrs],
            "container_rank": info.container_rank,
            "container_slot_counts": [n for n in info.container_slot_counts]
            or [len(info.slot_ids)],
        },
    }
    if info.trial is not None:
        t = info.trial
        docs["trial.json"] = {
            "trial_id": t.trial_id,
            "experiment_id": t.experiment_id,
            "trial_seed": t.trial_seed,
            "hparams": t.hparams,
            "config": t.config,
            "steps_completed": t.steps_completed,
            "trial_run_id": t.trial_run_id,
            "debug": bool(t.config.get("debug", False)),
            "inter_node_network_interface": None,
        }
    return docs


def write_official_info_files(
    info: ClusterInfo, directory: str = OFFICIAL_INFO_DIR
) -> list[pathlib.Path]:
    """Best effort: returns the files written (none, with a warning, if the directory cannot
    be written). The caller removes them when the task ends: left behind on a host, they would
    make the official package believe it is on a cluster."""
    written: list[pathlib.Path] = []
    path = pathlib.Path(directory)
    # Directories we create are listed too (deepest last), so they go as well.
    missing = [p for p in (path, *path.parents) if not p.exists()]
    written.extend(reversed(missing))
    try:
        path.mkdir(parents=True, exist_ok=True)
        for name, doc in official_info_documents(info).items():
            (path / name).write_text(json.dumps(doc))
            written.append(path / name)
    except OSError as e:
        logger.warning("could not write task info files to %s: %s", directory, e)
    return written


def remove_files(paths: list[pathlib.Path]) -> None:
    """Remove what ``write_official_info_files`` wrote: files first, then its directories."""
    for p in reversed(paths):
        try:
            if p.is_dir():
                p.rmdir()
            else:
                p.unlink(missing_ok=True)
        except OSError as e:
            logger.debug("could not remove %s: %s", p, e)
