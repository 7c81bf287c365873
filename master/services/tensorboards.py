"""TensorBoard tasks (``det tensorboard start``): which trials' files a TensorBoard serves and
where its container finds them.

A trial's harness uploads its TensorBoard files to its experiment's checkpoint storage under
``<cluster id>/tensorboard/experiment/<experiment id>/trial/<trial id>`` (det.core._tensorboard);
the task (det.exec.tensorboard) fetches them from there. Each source carries its experiment's
``checkpoint_storage``; a shared_fs one is mounted read-only into the task's container.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from psycopg.rows import class_row

from det.common.container_spec import BindMount
from det.common.jsontypes import JSONObject, JSONValue
from det.master import container_policy, db
from det.master.db import Conn
from det.master.errors import InvalidArgument
from det.master.expconf import stored
from det.master.rows.tasks import TaskData, TensorBoardSource

#: At most this many trials per TensorBoard (Determined's limit): an experiment with more
#: contributes its best ones by its searcher metric.
MAX_TRIALS = 100

_SHARED_FS_MOUNT = "/determined_shared_fs"


@dataclass(frozen=True, slots=True)
class _Trial:
    id: int
    experiment_id: int
    #: Its experiment's ``checkpoint_storage`` as stored (None: it has none).
    storage: JSONValue


@dataclass(frozen=True, slots=True)
class _Config:
    config: JSONObject


def resolve(conn: Conn, experiment_ids: list[int], trial_ids: list[int]) -> TaskData:
    """The task's ``data``: the experiments and trials asked for and one source per trial;
    InvalidArgument names an id that does not exist or a request for nothing."""
    experiment_ids = sorted({int(i) for i in experiment_ids})
    trial_ids = sorted({int(i) for i in trial_ids})
    if not experiment_ids and not trial_ids:
        raise InvalidArgument("experimentIds or trialIds: name at least one experiment or trial")
    if len(experiment_ids) + len(trial_ids) > MAX_TRIALS:
        raise InvalidArgument(
            f"a TensorBoard shows at most {MAX_TRIALS} trials; name fewer experiments and trials"
        )
    rows: list[_Trial] = []
    trials = conn.cursor(row_factory=class_row(_Trial))
    for eid in experiment_ids:
        config = db.fetch_row(
            conn, _Config, "SELECT config FROM experiments WHERE id = %s AND NOT deleted", (eid,)
        )
        if config is None:
            raise InvalidArgument(f"experimentIds: no experiment {eid}")
        smaller = stored.experiment_config(eid, config.config).searcher.smaller_is_better
        order = "ASC" if smaller else "DESC"
        rows += trials.execute(
            "SELECT t.id, t.experiment_id, e.config -> 'checkpoint_storage' AS storage FROM trials t"
            " JOIN experiments e ON e.id = t.experiment_id WHERE t.experiment_id = %s"
            f" ORDER BY t.searcher_metric {order} NULLS LAST, t.id LIMIT {MAX_TRIALS}",
            (eid,),
        ).fetchall()
    if trial_ids:
        found = trials.execute(
            "SELECT t.id, t.experiment_id, e.config -> 'checkpoint_storage' AS storage FROM trials t"
            " JOIN experiments e ON e.id = t.experiment_id"
            " WHERE t.id = ANY(%s) AND NOT e.deleted ORDER BY t.id",
            (trial_ids,),
        ).fetchall()
        missing = sorted(set(trial_ids) - {r.id for r in found})
        if missing:
            raise InvalidArgument(f"trialIds: no trial {', '.join(map(str, missing))}")
        rows += found
    seen: set[int] = set()
    picked: list[_Trial] = []
    for r in rows:
        if r.id not in seen:
            seen.add(r.id)
            picked.append(r)
    if len(picked) > MAX_TRIALS:
        raise InvalidArgument(
            f"a TensorBoard shows at most {MAX_TRIALS} trials; these ask for {len(picked)}"
        )
    if not picked:
        raise InvalidArgument("the experiments named have no trials yet")
    sources: list[TensorBoardSource] = []
    for r in picked:
        if not isinstance(r.storage, dict):
            raise InvalidArgument(
                f"experiment {r.experiment_id} has no checkpoint_storage to read from"
            )
        sources.append({"experimentId": r.experiment_id, "trialId": r.id, "storage": r.storage})
    return {"experimentIds": experiment_ids, "trialIds": trial_ids, "sources": sources}


def storage_mounts(data: TaskData) -> list[container_policy.Mount]:
    """The host paths a TensorBoard over ``data`` mounts (read-only), named by experiment, for
    the task container policy."""
    out: dict[str, container_policy.Mount] = {}
    for s in data.get("sources") or []:
        cfg = s["storage"]
        host = str(cfg.get("host_path"))
        if cfg.get("type") == "shared_fs" and host not in out:
            where = f"experimentIds: experiment {s['experimentId']}'s checkpoint_storage.host_path"
            out[host] = container_policy.Mount(where, cfg.get("host_path"), True)
    return list(out.values())


def container_sources(data: TaskData) -> tuple[list[TensorBoardSource], list[BindMount]]:
    """The sources as the container sees them, and the bind mounts that make it so: each
    shared_fs host path is mounted read-only, the first at ``/determined_shared_fs`` (or the
    config's ``container_path``), others beside it (pure)."""
    mounts: dict[str, str] = {}
    used: set[str] = set()
    out: list[TensorBoardSource] = []
    for s in data.get("sources") or []:
        cfg: JSONObject = copy.deepcopy(s["storage"])
        if cfg.get("type") == "shared_fs":
            host = str(cfg["host_path"])
            if host not in mounts:
                want = str(cfg.get("container_path") or _SHARED_FS_MOUNT)
                path, n = want, 1
                while path in used:
                    n += 1
                    path = f"{want}_{n}"
                used.add(path)
                mounts[host] = path
            cfg["container_path"] = mounts[host]
        out.append({**s, "storage": cfg})
    propagation = stored.mount_propagation({})  # the schema's default
    binds: list[BindMount] = [
        {"hostPath": host, "containerPath": path, "readOnly": True, "propagation": propagation}
        for host, path in mounts.items()
    ]
    return out, binds
