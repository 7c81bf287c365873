"""REST API blueprints, one per resource, speaking Determined's v1 wire format."""

from __future__ import annotations

from flask import Blueprint

from det.master.api.agents import bp as agents_bp
from det.master.api.auth import bp as auth_bp
from det.master.api.checkpoints import bp as checkpoints_bp
from det.master.api.cluster import bp as cluster_bp
from det.master.api.commands import bp as commands_bp
from det.master.api.experiments import bp as experiments_bp
from det.master.api.jobs import bp as jobs_bp
from det.master.api.log_retention import bp as log_retention_bp
from det.master.api.models import bp as models_bp
from det.master.api.notebooks import bp as notebooks_bp
from det.master.api.openapi import bp as openapi_bp
from det.master.api.pool_bindings import bp as pool_bindings_bp
from det.master.api.preview import bp as preview_bp
from det.master.api.projects import bp as projects_bp
from det.master.api.provisioning import bp as provisioning_bp
from det.master.api.rbac import bp as rbac_bp
from det.master.api.runs import bp as runs_bp
from det.master.api.shells import bp as shells_bp
from det.master.api.task_container_policy import bp as task_container_policy_bp
from det.master.api.tasks import bp as tasks_bp
from det.master.api.templates import bp as templates_bp
from det.master.api.tensorboards import bp as tensorboards_bp
from det.master.api.tokens import bp as tokens_bp
from det.master.api.trials import bp as trials_bp
from det.master.api.usage import bp as usage_bp
from det.master.api.user_settings import bp as user_settings_bp
from det.master.api.webhooks import bp as webhooks_bp
from det.master.api.webui import bp as webui_bp
from det.master.api.workspaces import bp as workspaces_bp

BLUEPRINTS: list[Blueprint] = [
    cluster_bp,
    auth_bp,
    experiments_bp,
    trials_bp,
    runs_bp,
    tasks_bp,
    commands_bp,
    notebooks_bp,
    shells_bp,
    tensorboards_bp,
    checkpoints_bp,
    agents_bp,
    jobs_bp,
    models_bp,
    openapi_bp,
    preview_bp,
    log_retention_bp,
    pool_bindings_bp,
    provisioning_bp,
    tokens_bp,
    workspaces_bp,
    projects_bp,
    templates_bp,
    rbac_bp,
    webhooks_bp,
    user_settings_bp,
    usage_bp,
    task_container_policy_bp,
    webui_bp,
]
