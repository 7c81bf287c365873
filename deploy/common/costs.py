"""What the control plane costs, idle and busy, for ``--master vm`` and ``--master serverless``
(pure: figures from the snapshot in ``prices.py``; ``up --dry-run`` prints them).

*Idle*: no agent, task or user has called for a while. A VM master and its database run
anyway; a serverless master runs no instance (Cloud Run) or no task (Fargate), so only what
stays provisioned is paid: the database where it cannot pause, storage, secrets, the load
balancer. *Busy*: one master instance or task serving, the database at its smallest running
size. Agents (the GPUs) are not part of either figure: they cost the same in both modes.

*Idle with a WebUI tab left open*: the WebUI stops polling while its page is hidden and after
:data:`TAB_STOP_MINUTES` without a change or the user's hand (master/webui/poll.js), so a tab
left open costs the idle figure plus, per visit, the minutes the master then stays up: the
tab's :data:`TAB_STOP_MINUTES` and the platform's :data:`PLATFORM_IDLE_MINUTES` before it
stops an idle master, at the busy rate. Beside it, what a tab that polled without stopping
cost (the master never sleeps: the busy rate all month), the WebUI before it stopped.
"""

from __future__ import annotations

import dataclasses

from det.common.jsontypes import JSONObject
from det.deploy.common import prices
from det.deploy.common.prices import HOURS_PER_MONTH

# poll.js's IDLE_STOP_MS, and how long Cloud Run (up to 15 minutes) and det's AWS sleep alarm
# (15 one-minute periods) keep an idle master before stopping it.
TAB_STOP_MINUTES = 10
PLATFORM_IDLE_MINUTES = 15


@dataclasses.dataclass(frozen=True)
class Line:
    item: str
    idle_month: float
    """Paid per month while idle (0: nothing while idle)."""
    busy_hour: float
    """Paid per hour while busy."""


@dataclasses.dataclass(frozen=True)
class Estimate:
    cloud: str
    master: str
    """``vm`` or ``serverless``."""
    lines: tuple[Line, ...]
    missing: tuple[str, ...] = ()
    """Choices the table has no price for (their lines are left out: the figure is too low)."""

    @property
    def idle_month(self) -> float:
        return sum(line.idle_month for line in self.lines)

    @property
    def busy_hour(self) -> float:
        return sum(line.busy_hour for line in self.lines)

    @property
    def tab_visit(self) -> float:
        """What one visit of an open WebUI tab adds to the idle figure: the master kept up for
        the tab's and the platform's idle minutes (0 for a master that runs anyway)."""
        extra_hour = max(self.busy_hour - self.idle_month / HOURS_PER_MONTH, 0.0)
        return extra_hour * (TAB_STOP_MINUTES + PLATFORM_IDLE_MINUTES) / 60

    @property
    def polling_tab_month(self) -> float:
        """A month with a tab that never stops polling: the master never sleeps."""
        return max(self.busy_hour * HOURS_PER_MONTH, self.idle_month)


def _always(item: str, hourly: float) -> Line:
    """A resource paid by the hour whether idle or busy."""
    return Line(item, hourly * HOURS_PER_MONTH, hourly)


def _monthly(item: str, monthly: float) -> Line:
    """A resource paid by the month whether idle or busy (storage, secrets)."""
    return Line(item, monthly, monthly / HOURS_PER_MONTH)


def _busy(item: str, hourly: float) -> Line:
    """Paid only while an instance or task runs."""
    return Line(item, 0.0, hourly)


@dataclasses.dataclass(frozen=True)
class AwsChoices:
    master_instance_type: str = "m6i.large"
    master_disk_gb: int = 100
    db_instance_type: str = "db.m7g.large"
    db_size_gb: int = 20
    serverless_db: str = "aurora"
    """``aurora`` (Serverless v2, 0 ACU when idle) or ``rds`` (``db_instance_type``)."""
    task_vcpu: float = 0.5
    task_memory_gb: float = 1.0
    secrets: int = 3
    """Secrets Manager secrets of the serverless master (DB password, agent token, admin)."""
    public_alb: bool = False
    """An internet-facing ALB (``--domain``) has a public IPv4 address in each of its 2 zones;
    without a domain the ALB is internal behind CloudFront."""
    image_gb: float = 1.0
    aurora_storage_gb: float = 1.0
    alarms: int = 2


def aws(c: AwsChoices = AwsChoices()) -> tuple[Estimate, Estimate]:
    """The ``vm`` and ``serverless`` estimates on AWS (us-west-2 list prices)."""
    p = prices.AWS
    missing: list[str] = []
    db_line: list[Line] = []
    if c.db_instance_type in prices.AWS_RDS:
        db_line.append(
            _always(f"RDS PostgreSQL {c.db_instance_type}", prices.AWS_RDS[c.db_instance_type])
        )
    else:
        missing.append(c.db_instance_type)
    db_storage = _monthly(
        f"RDS storage {c.db_size_gb} GB gp3", c.db_size_gb * p["rds_gp3_gb_month"]
    )
    vm_lines = [*db_line, db_storage]
    if c.master_instance_type in prices.AWS_EC2:
        vm_lines.append(
            _always(f"master VM {c.master_instance_type}", prices.AWS_EC2[c.master_instance_type])
        )
    else:
        missing.append(c.master_instance_type)
    vm_lines += [
        _monthly(
            f"master disk {c.master_disk_gb} GB gp3", c.master_disk_gb * p["ebs_gp3_gb_month"]
        ),
        _always("master public IPv4 (Elastic IP)", p["public_ipv4_hour"]),
        _monthly("Secrets Manager secret", p["secret_month"]),
    ]
    vm = Estimate("aws", "vm", tuple(vm_lines), tuple(missing))

    task_hour = c.task_vcpu * p["fargate_vcpu_hour"] + c.task_memory_gb * p["fargate_gb_hour"]
    sl_lines = [
        _busy(f"Fargate task {c.task_vcpu:g} vCPU / {c.task_memory_gb:g} GB", task_hour),
        _busy("task public IPv4", p["public_ipv4_hour"]),
        _always("Application Load Balancer", p["alb_hour"]),
        _busy("ALB capacity (1 LCU)", p["alb_lcu_hour"]),
        _monthly(f"{c.secrets} Secrets Manager secrets", c.secrets * p["secret_month"]),
        _monthly(f"ECR image storage {c.image_gb:g} GB", c.image_gb * p["ecr_gb_month"]),
        _monthly(f"{c.alarms} CloudWatch alarms (wake and sleep)", c.alarms * p["alarm_month"]),
    ]
    if c.public_alb:
        sl_lines.append(_always("ALB public IPv4 (2 zones)", 2 * p["public_ipv4_hour"]))
    sl_missing: list[str] = []
    if c.serverless_db == "aurora":
        sl_lines += [
            _busy("Aurora Serverless v2 at 0.5 ACU (0 ACU paused)", 0.5 * p["aurora_acu_hour"]),
            _monthly(
                f"Aurora storage {c.aurora_storage_gb:g} GB",
                c.aurora_storage_gb * p["aurora_storage_gb_month"],
            ),
        ]
    else:
        sl_lines += [*db_line, db_storage]
        sl_missing += [m for m in missing if m == c.db_instance_type]
    serverless = Estimate("aws", "serverless", tuple(sl_lines), tuple(sl_missing))
    return vm, serverless


@dataclasses.dataclass(frozen=True)
class GcpChoices:
    master_machine_type: str = "n1-standard-2"
    master_disk_gb: int = 100
    db_tier: str = "db-custom-1-3840"
    serverless_db_tier: str = "db-f1-micro"
    db_disk_gb: int = 10
    """Cloud SQL's default data disk (10 GB SSD)."""
    run_vcpu: float = 1.0
    run_memory_gib: float = 1.0
    secrets: int = 3
    image_gb: float = 1.0


def sql_tier_hour(tier: str) -> float | None:
    """Cloud SQL's hourly price of a tier (Enterprise edition), None when not in the table."""
    p = prices.GCP
    if tier in prices.GCP_SQL_SHARED:
        return prices.GCP_SQL_SHARED[tier]
    parts = tier.split("-")
    if len(parts) == 4 and parts[:2] == ["db", "custom"]:
        vcpu, memory_mb = int(parts[2]), int(parts[3])
        return vcpu * p["sql_vcpu_hour"] + memory_mb / 1024 * p["sql_gb_hour"]
    return None


def gcp(c: GcpChoices = GcpChoices()) -> tuple[Estimate, Estimate]:
    """The ``vm`` and ``serverless`` estimates on GCP (us-west1 list prices)."""
    p = prices.GCP
    storage = _monthly(
        f"Cloud SQL storage {c.db_disk_gb} GB SSD", c.db_disk_gb * p["sql_ssd_gb_month"]
    )

    def database(tier: str, missing: list[str]) -> list[Line]:
        hourly = sql_tier_hour(tier)
        if hourly is None:
            missing.append(tier)
            return [storage]
        return [_always(f"Cloud SQL {tier}", hourly), storage]

    vm_missing: list[str] = []
    vm_lines = database(c.db_tier, vm_missing)
    if c.master_machine_type in prices.GCP_GCE:
        vm_lines.append(
            _always(f"master VM {c.master_machine_type}", prices.GCP_GCE[c.master_machine_type])
        )
    else:
        vm_missing.append(c.master_machine_type)
    vm_lines += [
        _monthly(
            f"master disk {c.master_disk_gb} GB pd-balanced",
            c.master_disk_gb * p["pd_balanced_gb_month"],
        ),
        _always("master static external IP", p["external_ip_hour"]),
        _monthly("Secret Manager secret", p["secret_version_month"]),
    ]
    vm = Estimate("gcp", "vm", tuple(vm_lines), tuple(vm_missing))

    run_hour = 3600 * (c.run_vcpu * p["run_vcpu_second"] + c.run_memory_gib * p["run_gib_second"])
    sl_missing: list[str] = []
    sl_lines = [
        _busy(f"Cloud Run instance {c.run_vcpu:g} vCPU / {c.run_memory_gib:g} GiB", run_hour),
        *database(c.serverless_db_tier, sl_missing),
        _monthly(f"{c.secrets} Secret Manager secrets", c.secrets * p["secret_version_month"]),
        _monthly(f"Artifact Registry {c.image_gb:g} GB", c.image_gb * p["artifact_gb_month"]),
    ]
    serverless = Estimate("gcp", "serverless", tuple(sl_lines), tuple(sl_missing))
    return vm, serverless


def render(estimates: tuple[Estimate, ...], chosen: str) -> str:
    """The lines ``up --dry-run`` prints; ``chosen`` marks the ``--master`` being deployed."""
    if not estimates:
        return ""
    cloud = estimates[0].cloud
    out = [
        f"Control plane cost estimate: on-demand list prices of {prices.REGION[cloud]}, a "
        f"{prices.AS_OF} snapshot of the providers' pricing pages (deploy/common/prices.py); "
        "other regions and today's prices differ; agents not included."
    ]
    for e in estimates:
        mark = " (this deploy)" if e.master == chosen else ""
        out.append(
            f"  --master {e.master}{mark}: idle ${e.idle_month:,.2f}/month, "
            f"busy ${e.busy_hour:.3f}/hour"
        )
        out.append(
            f"      idle with a WebUI tab left open: ${e.idle_month:,.2f}/month + "
            f"${e.tab_visit:.3f} a visit (the tab stops polling after {TAB_STOP_MINUTES} idle "
            f"minutes; one that never stopped: ${e.polling_tab_month:,.2f}/month)"
        )
        for line in e.lines:
            out.append(
                f"      {line.item}: idle ${line.idle_month:,.2f}/month, busy ${line.busy_hour:.4f}/h"
            )
        if e.missing:
            out.append(f"      (no price in the table for {', '.join(e.missing)}: not counted)")
    return "\n".join(out)


def to_json(estimates: tuple[Estimate, ...], chosen: str) -> JSONObject:
    """The estimate in ``up --dry-run --json`` (key ``costEstimate``)."""
    cloud = estimates[0].cloud if estimates else ""
    return {
        "region": prices.REGION.get(cloud, ""),
        "prices": prices.AS_OF,
        "master": chosen,
        "estimates": [
            {
                "master": e.master,
                "idleMonthly": round(e.idle_month, 2),
                "busyHourly": round(e.busy_hour, 4),
                "tabVisit": round(e.tab_visit, 4),
                "pollingTabMonthly": round(e.polling_tab_month, 2),
                "lines": [
                    {
                        "item": x.item,
                        "idleMonthly": round(x.idle_month, 2),
                        "busyHourly": round(x.busy_hour, 4),
                    }
                    for x in e.lines
                ],
                "notPriced": [m for m in e.missing],
            }
            for e in estimates
        ],
    }
