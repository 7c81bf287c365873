"""The rows of the model registry."""

from __future__ import annotations

import datetime as dt
import uuid

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject


class Model(TypedDict):
    """A ``models`` row with its owner's name and its number of versions (what
    ``schemas.models.model`` sends)."""

    id: int
    name: str
    description: str
    metadata: JSONObject
    labels: list[str]
    notes: str
    archived: bool
    owner_id: int
    created_at: dt.datetime
    modified_at: dt.datetime
    workspace_id: int
    username: str
    num_versions: int


class Version(TypedDict):
    """A ``model_versions`` row with its owner's name (``schemas.models.version``)."""

    id: int
    model_id: int
    version: int
    checkpoint_uuid: uuid.UUID
    name: str
    comment: str
    metadata: JSONObject
    labels: list[str]
    notes: str
    owner_id: int
    created_at: dt.datetime
    username: str
