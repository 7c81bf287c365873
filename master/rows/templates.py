"""The rows of config templates."""

from __future__ import annotations

import datetime as dt

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject


class Template(TypedDict):
    """A ``templates`` row (shown by ``schemas.templates.template``)."""

    name: str
    #: A partial experiment config as the user wrote it (secrets included).
    config: JSONObject
    workspace_id: int
    owner_id: int | None
    created_at: dt.datetime
