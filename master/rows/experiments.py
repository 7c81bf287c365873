"""The rows of experiments, in the shapes the services read them."""

from __future__ import annotations

import datetime as dt

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject


class ExperimentBase(TypedDict):
    """The columns every experiment row the API sends has: the experiment's own and its job's,
    owner's, project's and workspace's (``_JOINS``)."""

    id: int
    name: str
    description: str
    notes: str
    state: str
    archived: bool
    owner_id: int
    project_id: int
    progress: float
    created_at: dt.datetime
    ended_at: dt.datetime | None
    parent_id: int | None
    unmanaged: bool
    external_experiment_id: str | None
    job_id: str
    resource_pool: str
    priority: int
    weight: float
    username: str
    num_trials: int
    project_name: str | None
    project_owner_id: int
    workspace_id: int | None
    workspace_name: str | None
    parent_archived: bool


class Experiment(ExperimentBase):
    """An experiment as :func:`get` reads it (``_SELECT``): its config decoded."""

    labels: list[str]
    config: JSONObject
    original_config: str
    deleted: bool
    checkpoint_gc_at: dt.datetime | None
    delete_gc_at: dt.datetime | None


class WireExperiment(ExperimentBase):
    """An experiment with the wire columns (``_WIRE_COLUMNS``): its JSON as text."""

    labels_json: str
    config_json: str
    config_secret: bool
    searcher_name: str | None
    searcher_metric_name: str | None


class GotExperiment(WireExperiment):
    """The row of :func:`get_for_wire`: with what GetExperiment sends beside the list's."""

    original_config: str
    hyperparameters_json: str | None
    trial_ids_json: str
