"""The rows of the cluster's task container policy: the value in force and its audit."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from det.common.jsontypes import JSONObject
from det.master.container_policy import ContainerPolicy

Source = Literal["master.yaml", "database"]


@dataclass(frozen=True, slots=True)
class Current:
    """The cluster's policy and where it comes from (``updated_*``: the change that stored it;
    None while master.yaml's applies)."""

    policy: ContainerPolicy
    source: Source
    updated_at: dt.datetime | None
    updated_by: str | None


@dataclass(frozen=True, slots=True)
class Change:
    """One row of the audit: the value stored by ``username`` at ``changed_at``."""

    id: int
    changed_at: dt.datetime
    user_id: int
    username: str
    source_before: str
    policy_before: JSONObject
    policy_after: JSONObject
