"""The cluster's task container policy on the wire (det's own routes,
``/api/v1/master/task-container-policy``; its rows: det.master.rows.policies). The policy
is master.yaml's ``task_container_policy`` block as JSON, every key present, checked by the
same model (det.master.container_policy.ContainerPolicy)."""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject
from det.master import wire
from det.master.container_policy import ContainerPolicy
from det.master.rows.policies import Change, Current


class TaskContainerPolicy(TypedDict):
    """``GET``/``PUT`` answer: the policy, where it comes from (master.yaml's until an admin
    stores one) and who stored it when (null while master.yaml's applies)."""

    policy: JSONObject
    source: Literal["master.yaml", "database"]
    updatedAt: str | None
    updatedBy: str | None


class PutTaskContainerPolicy(TypedDict):
    """``PUT``: the whole policy (keys left out take their defaults, as in master.yaml)."""

    policy: ContainerPolicy


class TaskContainerPolicyChange(TypedDict):
    """One change of the audit (``GET .../history``, newest first): the value stored."""

    id: int
    updatedAt: str
    updatedBy: str
    policy: JSONObject


def current(c: Current) -> TaskContainerPolicy:
    return {
        "policy": c.policy.model_dump(mode="json"),
        "source": c.source,
        "updatedAt": wire.ts(c.updated_at),
        "updatedBy": c.updated_by,
    }


def change(c: Change) -> TaskContainerPolicyChange:
    return {
        "id": c.id,
        "updatedAt": wire.ts(c.changed_at) or "",
        "updatedBy": c.username,
        "policy": c.policy_after,
    }
