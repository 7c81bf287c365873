"""Trial source infos (Determined's): a trial records that it used a checkpoint (an inference
or fine-tuning run of a registered model), and the metrics of every trial that used a
checkpoint, or a model version, are read back from it (the SDK's ``Checkpoint.get_metrics``,
``ModelVersion.get_metrics``)."""

from __future__ import annotations

from typing import Any

from psycopg.rows import class_row

from det.master.db import Conn
from det.master.errors import InvalidArgument
from det.master.rows.trials import MetricRow

KINDS = ("TRIAL_SOURCE_INFO_TYPE_INFERENCE", "TRIAL_SOURCE_INFO_TYPE_FINE_TUNING")
# Reports read per trial, as Determined's GetMetricsForTrialSourceInfoQuery caps them.
MAX_REPORTS_PER_TRIAL = 1000


def record(
    conn: Conn,
    trial_id: int,
    checkpoint_uuid: str,
    kind: str,
    model_id: int | None,
    model_version: int | None,
) -> None:
    """Trial ``trial_id`` used ``checkpoint_uuid`` (again: the row is updated). The caller
    checked that the caller may change the trial and read the checkpoint."""
    if kind not in KINDS:
        raise InvalidArgument(f"trialSourceInfo.trialSourceInfoType: one of {', '.join(KINDS)}")
    if (model_id is None) != (model_version is None):
        raise InvalidArgument("trialSourceInfo.modelVersion: modelId and modelVersion go together")
    if model_id is not None:
        found = conn.execute(
            "SELECT 1 FROM model_versions WHERE model_id = %s AND version = %s"
            " AND checkpoint_uuid = %s",
            (model_id, model_version, checkpoint_uuid),
        ).fetchone()
        if found is None:
            raise InvalidArgument(
                f"trialSourceInfo.modelVersion: model {model_id} has no version {model_version}"
                f" of checkpoint {checkpoint_uuid}"
            )
    conn.execute(
        "INSERT INTO trial_source_infos (trial_id, checkpoint_uuid, kind, model_id,"
        " model_version) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (trial_id, checkpoint_uuid)"
        " DO UPDATE SET kind = EXCLUDED.kind, model_id = EXCLUDED.model_id,"
        " model_version = EXCLUDED.model_version",
        (trial_id, checkpoint_uuid, kind, model_id, model_version),
    )


def metrics_of_users(
    conn: Conn,
    *,
    checkpoint_uuid: str | None = None,
    model: tuple[int, int] | None = None,
    kind: str | None = None,
    group: str | None = None,
) -> list[MetricRow]:
    """The ``metrics`` rows (of ``group``, or all) of the trials that used the checkpoint (or
    the model version ``model``: (model id, version)), by trial then training order, at most
    :data:`MAX_REPORTS_PER_TRIAL` a trial."""
    where: list[str] = []
    params: list[Any] = []
    if checkpoint_uuid is not None:
        where.append("s.checkpoint_uuid = %s")
        params.append(checkpoint_uuid)
    if model is not None:
        where.append("s.model_id = %s AND s.model_version = %s")
        params.extend(model)
    if kind and kind != "TRIAL_SOURCE_INFO_TYPE_UNSPECIFIED":
        where.append("s.kind = %s")
        params.append(kind)
    group_clause = ""
    if group:
        group_clause = " AND m.metric_group = %s"
        params.append(group)
    params.append(MAX_REPORTS_PER_TRIAL)
    return (
        conn.cursor(row_factory=class_row(MetricRow))
        .execute(
            "SELECT r.* FROM (SELECT DISTINCT s.trial_id FROM trial_source_infos s"
            f" WHERE {' AND '.join(where)}) u CROSS JOIN LATERAL (SELECT m.* FROM metrics m"
            f" WHERE m.trial_id = u.trial_id{group_clause} ORDER BY m.total_batches, m.id"
            " LIMIT %s) r ORDER BY r.trial_id, r.total_batches, r.id",
            params,
        )
        .fetchall()
    )
