"""TensorBoards on the wire: ``v1Tensorboard`` from a row of ``services.ntsc.get``/``list_tasks``
(its experiments and trials from the task's ``data``, see ``services.tensorboards``)."""

from __future__ import annotations

from det.master.rows.tasks import Task
from det.master.schemas import d
from det.master.schemas.commands import task_fields
from det.master.schemas.notebooks import service_address


def tensorboard(r: Task) -> d.v1Tensorboard:
    data = r["data"]
    out: d.v1Tensorboard = {
        **task_fields(r),  # type: ignore[typeddict-item]
        "serviceAddress": service_address(r["id"]),
        "experimentIds": list(data.get("experimentIds") or []),
        "trialIds": list(data.get("trialIds") or []),
    }
    return out
