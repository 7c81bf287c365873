"""What every cloud's ``provider:`` block shares: durations in Go's form, the cost and
install settings, and :class:`ProvisionerConfig`, the base each cloud's model extends
(``aws_config.py``, ``gcp_config.py``). :mod:`det.master.provisioner.config` joins them.

Durations accept Go-style strings as Determined does (``"30s"``, ``"5m"``, ``"1h30m"``).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from det.common.jsontypes import JSONObject
from det.master.errors import MasterError
from det.master.provisioner.cost import CostPolicy
from det.master.provisioner.decider import BASE_BACKOFF, ScalePolicy
from det.master.provisioner.provider import LaunchOption
from det.master.scheduler.model import DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(value: Any) -> dt.timedelta:
    """``"1h30m"`` → ``timedelta``; numbers are seconds; ``"0"`` is zero."""
    if isinstance(value, dt.timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.timedelta(seconds=value)  # bare numbers are seconds
    if not isinstance(value, str):
        raise ValueError('expected a duration string such as "30s", "5m" or "1h"')
    text = value.strip()
    if text == "0":
        return dt.timedelta(0)
    pos, seconds = 0, 0.0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if not match:
            raise ValueError(f'invalid duration {value!r} (expected e.g. "30s", "5m", "1h")')
        seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if not text:
        raise ValueError("empty duration")
    return dt.timedelta(seconds=seconds)


Duration = Annotated[dt.timedelta, BeforeValidator(parse_duration)]


class ProviderConfigError(MasterError, ValueError):
    """The provider block is invalid; the message names the field path."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FallbackEntry(_Model):
    """One entry of the ordered fallback list; unset keys inherit the pool's own values."""

    instance_type: str | None = None
    instance_slots: int | None = Field(None, ge=0)
    spot: bool | None = None


class CostConfig(_Model):
    """det's cost control for the pool (see ``det.master.provisioner.cost``)."""

    prices: dict[str, Annotated[float, Field(ge=0)]] = {}
    spot_prices: dict[str, Annotated[float, Field(ge=0)]] = {}
    max_hourly_cost: float | None = Field(None, gt=0)
    monthly_budget: float | None = Field(None, gt=0)

    def policy(self) -> CostPolicy:
        return CostPolicy(
            prices=dict(self.prices),
            spot_prices=dict(self.spot_prices),
            max_hourly_cost=self.max_hourly_cost,
            monthly_budget=self.monthly_budget,
        )


class AgentInstall(_Model):
    """Ours: how a new agent VM installs det (``det deploy`` writes it): the wheel the master
    was installed from (``s3://``, ``gs://`` or ``https://``, fetched with the VM's role and
    checked against ``wheel_sha256``), its constraints file, an optional package index for the
    dependencies, and the wheel's extras."""

    wheel_url: str
    wheel_sha256: str = ""
    constraints_url: str | None = None
    package_index: str | None = None
    extras: str = "agent"
    log_target: str | None = None
    """Where the agent VM ships its boot and agent logs, from its first second (``logship.py``,
    standard library only): the CloudWatch Logs group (AWS) or the Cloud Logging log (GCP)."""


class ProvisionerConfig(_Model):
    """Keys every cloud shares (Determined's provisioner config)."""

    type: str
    master_url: str | None = None
    master_cert_name: str | None = None
    startup_script: str = ""
    container_startup_script: str = ""
    agent_docker_network: str = "default"
    agent_docker_runtime: str = "runc"
    agent_docker_image: str | None = None
    agent_fluent_image: str | None = None
    agent_reconnect_attempts: int = Field(5, ge=0)
    agent_reconnect_backoff: int = Field(5, ge=0)
    agent_config_file_contents: JSONObject | None = None
    agent_install: AgentInstall | None = None
    max_idle_agent_period: Duration = dt.timedelta(minutes=20)
    max_agent_starting_period: Duration = dt.timedelta(minutes=20)
    # Ours: how long a registered agent may miss heartbeats before its machine is replaced.
    max_agent_disconnected_period: Duration = dt.timedelta(minutes=5)
    min_instances: int = Field(0, ge=0)
    max_instances: int = Field(5, ge=0)
    # Determined: how long a launch error holds. Ours: the cap of the exponential backoff
    # between failed launches (10 s, 20 s, 40 s… up to this).
    launch_error_timeout: Duration = dt.timedelta(minutes=5)
    # Ours: the first wait after a failed launch (doubled per failure up to
    # launch_error_timeout).
    launch_error_backoff: Duration = BASE_BACKOFF
    # Errors tolerated (retried at the next pass) before backing off.
    launch_error_retries: int = Field(0, ge=0)
    # Ours: instance prices, an hourly cap and a monthly budget for the pool's launches.
    cost: CostConfig | None = None

    @pydantic.field_validator("master_url")
    @classmethod
    def _check_master_url(cls, value: str | None) -> str | None:
        if value and not re.match(r"^https?://[^/]+/?$", value):
            raise ValueError("invalid master url (expecting scheme://host:port, http or https)")
        return value

    @model_validator(mode="after")
    def _check_bounds(self) -> ProvisionerConfig:
        if self.max_instances < self.min_instances:
            raise ValueError("max_instances: must be greater than or equal to min_instances")
        for name in ("max_idle_agent_period", "max_agent_starting_period", "launch_error_backoff"):
            if getattr(self, name) <= dt.timedelta(0):
                raise ValueError(f"{name}: must be greater than 0")
        return self

    def launch_options(self) -> list[LaunchOption]:  # pragma: no cover - per cloud
        raise NotImplementedError

    def check_cost(self) -> None:
        """With a cap or a budget, every instance type the pool may launch needs a price."""
        cost = self.cost
        if cost is None or (cost.max_hourly_cost is None and cost.monthly_budget is None):
            return
        missing = sorted({o.instance_type for o in self.launch_options()} - set(cost.prices))
        if missing:
            raise ValueError(
                f"cost.prices: no price for {', '.join(missing)} (needed by"
                " cost.max_hourly_cost / cost.monthly_budget; USD per instance-hour)"
            )

    def scale_policy(
        self, *, max_aux_containers_per_agent: int = DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT
    ) -> ScalePolicy:
        """The decider's view of this config.

        ``max_aux_containers_per_agent`` is the pool's own key (beside ``provider``): how many
        zero-slot tasks one new agent can take.
        """
        return ScalePolicy(
            options=tuple(self.launch_options()),
            min_instances=self.min_instances,
            max_instances=self.max_instances,
            max_idle_agent_period=self.max_idle_agent_period,
            max_agent_starting_period=self.max_agent_starting_period,
            max_agent_disconnected_period=self.max_agent_disconnected_period,
            launch_error_timeout=self.launch_error_timeout,
            launch_error_retries=self.launch_error_retries,
            base_backoff=self.launch_error_backoff,
            max_aux_per_instance=max(1, max_aux_containers_per_agent),
            cost=self.cost.policy() if self.cost else None,
        )
