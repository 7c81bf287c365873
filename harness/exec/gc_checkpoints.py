"""The checkpoint GC task's command: ``python3 -m det.exec.gc_checkpoints``.

Deletes the checkpoints ``$DET_DELETE_CHECKPOINTS`` (a JSON list of uuids) from the storage
``$DET_CHECKPOINT_STORAGE`` (the experiment's ``checkpoint_storage``, JSON), with the same
storage code trials write with; with ``$DET_DELETE_TENSORBOARDS=1`` also the experiment's
TensorBoard files (``<cluster id>/tensorboard/experiment/<id>``, where trials upload them).
A checkpoint already gone is not an error; any other failure exits 1 after trying the rest,
and the master then keeps the checkpoints' records as they are.

With ``$DET_CHECKPOINT_GLOBS`` (a JSON list; ``det checkpoint rm``) only the files those globs
name are removed (none: the checkpoint is only read again), and each checkpoint's remaining
files are reported to the master (``PATCH /api/v1/checkpoints``), which records them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping

from .. import storage
from ..common.api import Session

logger = logging.getLogger("det.exec.gc_checkpoints")


def main(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    config = json.loads(env["DET_CHECKPOINT_STORAGE"])
    uuids = json.loads(env["DET_DELETE_CHECKPOINTS"])
    manager = storage.from_config(config, container_path=storage.in_container_path(config))
    if "DET_CHECKPOINT_GLOBS" in env:
        return remove_files(env, manager, uuids, json.loads(env["DET_CHECKPOINT_GLOBS"]))
    failed = 0
    for uuid in uuids:
        try:
            removed = manager.delete(uuid)  # idempotent: a checkpoint already gone is {}
        except Exception as e:
            failed += 1
            logger.error("checkpoint %s: could not delete: %s", uuid, e)
            continue
        logger.info("checkpoint %s: deleted %d files", uuid, len(removed))
    logger.info("deleted %d of %d checkpoints", len(uuids) - failed, len(uuids))
    if env.get("DET_DELETE_TENSORBOARDS") == "1":
        experiment = env["DET_EXPERIMENT_ID"]
        root = manager.under(f"{env['DET_CLUSTER_ID']}/tensorboard/experiment")
        try:
            removed = root.delete(experiment)
        except Exception as e:
            failed += 1
            logger.error("experiment %s: could not delete its TensorBoard files: %s", experiment, e)
        else:
            logger.info("experiment %s: deleted %d TensorBoard files", experiment, len(removed))
    return 1 if failed else 0


def remove_files(
    env: Mapping[str, str], manager: storage.StorageManager, uuids: list[str], globs: list[str]
) -> int:
    session = Session(env["DET_MASTER"], allocation_token=env["DET_SESSION_TOKEN"])
    failed = 0
    for uuid in uuids:
        try:
            left = manager.remove_files(uuid, globs)
            body = {"checkpoints": [{"uuid": uuid, "resources": {"resources": left}}]}
            session.patch("/api/v1/checkpoints", json=body)
        except Exception as e:
            failed += 1
            logger.error("checkpoint %s: could not remove files: %s", uuid, e)
            continue
        logger.info("checkpoint %s: %d entries left", uuid, len(left))
    session.close()
    return 1 if failed else 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.exit(main())
