"""The control plane's cost estimate (``up --dry-run``), checked against the price table."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from det.deploy import clouds
from det.deploy.common import costs, prices

H = prices.HOURS_PER_MONTH


def test_aws_vm_idle_is_the_master_vm_and_rds_around_the_clock():
    vm, _ = costs.aws()
    p = prices.AWS
    hourly = prices.AWS_EC2["m6i.large"] + prices.AWS_RDS["db.m7g.large"] + p["public_ipv4_hour"]
    monthly = 100 * p["ebs_gp3_gb_month"] + 20 * p["rds_gp3_gb_month"] + p["secret_month"]
    assert vm.idle_month == pytest.approx(hourly * H + monthly)
    assert vm.busy_hour == pytest.approx(hourly + monthly / H)
    assert 200 < vm.idle_month < 215  # docs/deploy.md: about $210 a month


def test_aws_serverless_idle_pays_only_what_stays_provisioned():
    _, sl = costs.aws()
    p = prices.AWS
    idle = p["alb_hour"] * H + 3 * p["secret_month"] + p["ecr_gb_month"]
    idle += 2 * p["alarm_month"] + p["aurora_storage_gb_month"]
    assert sl.idle_month == pytest.approx(idle)
    task = 0.5 * p["fargate_vcpu_hour"] + 1.0 * p["fargate_gb_hour"]
    busy = task + p["public_ipv4_hour"] + p["alb_hour"] + p["alb_lcu_hour"]
    busy += 0.5 * p["aurora_acu_hour"] + (idle - p["alb_hour"] * H) / H
    assert sl.busy_hour == pytest.approx(busy)


def test_gcp_estimates_match_the_table():
    vm, sl = costs.gcp()
    p = prices.GCP
    sql = p["sql_vcpu_hour"] + 3840 / 1024 * p["sql_gb_hour"]
    hourly = prices.GCP_GCE["n1-standard-2"] + sql + p["external_ip_hour"]
    monthly = 100 * p["pd_balanced_gb_month"] + 10 * p["sql_ssd_gb_month"]
    monthly += p["secret_version_month"]
    assert vm.idle_month == pytest.approx(hourly * H + monthly)
    assert 130 < vm.idle_month < 140  # docs/deploy.md: about $135 a month
    sl_monthly = 10 * p["sql_ssd_gb_month"] + 3 * p["secret_version_month"]
    sl_monthly += p["artifact_gb_month"]
    assert sl.idle_month == pytest.approx(prices.GCP_SQL_SHARED["db-f1-micro"] * H + sl_monthly)
    run = 3600 * (p["run_vcpu_second"] + p["run_gib_second"])
    assert sl.busy_hour == pytest.approx(
        run + prices.GCP_SQL_SHARED["db-f1-micro"] + sl_monthly / H
    )


@pytest.mark.parametrize("estimate", [costs.aws, costs.gcp])
def test_serverless_idle_is_at_least_five_times_below_vm(estimate):
    vm, sl = estimate()
    assert sl.idle_month * 5 <= vm.idle_month


def test_an_unpriced_choice_is_named_not_guessed():
    vm, sl = costs.gcp(costs.GcpChoices(db_tier="db-perf-optimized-N-8"))
    assert vm.missing == ("db-perf-optimized-N-8",) and not sl.missing
    assert "no price in the table for db-perf-optimized-N-8" in costs.render((vm, sl), "vm")
    assert costs.sql_tier_hour("db-custom-2-7680") == pytest.approx(
        2 * prices.GCP["sql_vcpu_hour"] + 7.5 * prices.GCP["sql_gb_hour"]
    )


@pytest.mark.parametrize(
    ("cloud", "argv"),
    [
        ("gcp", ["gcp", "up", "--cluster-id", "c1", "--project-id", "p"]),
        ("aws", ["aws", "up", "--cluster-id", "c1", "--keypair", "k"]),
    ],
)
def test_dry_run_prints_both_estimates_from_the_table(cloud, argv):
    out = io.StringIO()
    assert clouds.run([*argv, "--master", "vm", "--dry-run"], out=out) == 0
    assert "--master vm (this deploy): idle" in out.getvalue()
    out = io.StringIO()
    assert clouds.run([*argv, "--master", "serverless", "--dry-run"], out=out) == 0
    text = out.getvalue()
    vm, sl = costs.gcp() if cloud == "gcp" else costs.aws()
    assert f"--master vm: idle ${vm.idle_month:,.2f}/month" in text
    assert f"--master serverless (this deploy): idle ${sl.idle_month:,.2f}/month" in text
    assert prices.REGION[cloud] in text and prices.AS_OF in text
    out = io.StringIO()
    assert clouds.run([*argv, "--dry-run", "--json"], out=out) == 0
    doc = json.loads(out.getvalue())["costEstimate"]
    assert doc["master"] == "serverless"  # the default of a new cluster
    assert [e["master"] for e in doc["estimates"]] == ["vm", "serverless"]
    assert doc["estimates"][0]["idleMonthly"] == round(vm.idle_month, 2)


def test_an_open_webui_tab_adds_a_visits_minutes_not_a_month_of_master():
    for vm, sl in (costs.aws(), costs.gcp()):
        # A VM master runs anyway: a tab costs nothing more.
        assert vm.tab_visit == pytest.approx(0, abs=1e-9)
        assert vm.polling_tab_month == pytest.approx(vm.idle_month)
        # Serverless: the tab's 10 idle minutes and the platform's 15 at the busy rate...
        extra = sl.busy_hour - sl.idle_month / H
        assert sl.tab_visit == pytest.approx(extra * 25 / 60)
        # ...where a tab that never stopped polling kept the master up all month.
        assert sl.polling_tab_month == pytest.approx(sl.busy_hour * H)
        assert sl.polling_tab_month > 3 * sl.idle_month
        text = costs.render((vm, sl), "serverless")
        assert (
            f"idle with a WebUI tab left open: ${sl.idle_month:,.2f}/month + "
            f"${sl.tab_visit:.3f} a visit" in text
        )
        assert f"one that never stopped: ${sl.polling_tab_month:,.2f}/month" in text
        doc = costs.to_json((vm, sl), "serverless")["estimates"][1]  # type: ignore[index]
        assert doc["pollingTabMonthly"] == round(sl.polling_tab_month, 2)


def test_the_tab_model_uses_the_webuis_own_idle_stop():
    poll = (Path(__file__).resolve().parents[3] / "master" / "webui" / "poll.js").read_text()
    match = re.search(r"IDLE_STOP_MS: (\d+) \* 60 \* 1000", poll)
    assert match and int(match.group(1)) == costs.TAB_STOP_MINUTES
