"""``det deploy aws|gcp``: dry-run without credentials, preflight before anything is created."""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path

import pytest

from det.deploy import clouds
from det.deploy.aws import commands as aws_commands
from det.deploy.common import serverless, state
from det.deploy.common.errors import DeployError
from det.deploy.common.preflight import PULUMI_INSTALL_HINT
from det.deploy.gcp import commands as gcp_commands

AWS_UP = ["aws", "up", "--cluster-id", "c1", "--keypair", "kp"]
GCP_UP = ["gcp", "up", "--cluster-id", "c1", "--project-id", "p"]

CREDENTIAL_VARS = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUDSDK_CONFIG",
    "GOOGLE_CLOUD_PROJECT",
]


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No cloud credentials anywhere, an empty per-user state dir, no pulumi on PATH."""
    for var in CREDENTIAL_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return tmp_path / "data"


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = clouds.run(argv, out, err)
    return code, out.getvalue(), err.getvalue()


def test_aws_dry_run_json_without_credentials(no_credentials: Path):
    code, out, err = _run([*AWS_UP, "--master", "vm", "--dry-run", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["cloud"] == "aws" and doc["clusterId"] == "c1"
    by_type = {r["type"]: r for r in doc["resources"]}
    assert by_type["aws:rds/instance:Instance"]["security"]["publiclyAccessible"] is False
    assert by_type["aws:rds/instance:Instance"]["security"]["storageEncrypted"] is True
    assert (
        by_type["aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"]["security"][
            "blockPublicPolicy"
        ]
        is True
    )
    policies = [r for r in doc["resources"] if r["type"] == "aws:iam/rolePolicy:RolePolicy"]
    assert any("iam:PassRole" in s for p in policies for s in p["security"]["statements"])
    assert doc["outputs"]["master_url"].startswith("https://")
    assert not (no_credentials / "det").exists()


def test_a_new_aws_cluster_is_serverless_by_default_with_a_private_encrypted_database(
    no_credentials: Path,
):
    code, out, err = _run(
        ["aws", "up", "--cluster-id", "c1", "--keypair", "kp", "--dry-run", "--json"]
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["outputs"]["master"] == "serverless"
    by_type = {r["type"]: r for r in doc["resources"]}
    assert "aws:ecs/service:Service" in by_type and "aws:ec2/instance:Instance" not in by_type
    assert by_type["aws:rds/cluster:Cluster"]["security"]["storageEncrypted"] is True
    instance = by_type["aws:rds/clusterInstance:ClusterInstance"]["security"]
    assert instance["publiclyAccessible"] is False
    assert doc["outputs"]["master_url"].startswith("https://")


def test_gcp_dry_run_table_without_credentials(no_credentials: Path):
    code, out, err = _run(["gcp", "up", "--cluster-id", "c1", "--project-id", "p", "--dry-run"])
    assert code == 0, err
    assert "gcp:sql/databaseInstance:DatabaseInstance" in out
    assert "publicIp: false" in out and "sslMode: ENCRYPTED_ONLY" in out
    assert "publicAccessPrevention: enforced" in out
    assert "Nothing was created" in out


def test_up_without_pulumi_exits_with_the_install_hint_and_creates_nothing(no_credentials: Path):
    code, _, err = _run(["aws", "up", "--cluster-id", "c1", "--keypair", "kp", "--yes"])
    assert code == 1
    # One error listing all this machine lacks (common.preflight.require_local), Pulumi first.
    head, first, *_ = err.strip().splitlines()
    assert head.startswith("det deploy: error: this machine lacks what `up` needs")
    assert first == f"  - pulumi: {PULUMI_INSTALL_HINT}"
    assert not (no_credentials / "det").exists()
    assert state.list_stacks(state.state_dir(), "det-aws") == []
    code, _, err = _run(["gcp", "up", "--cluster-id", "c1", "--project-id", "p", "--yes"])
    assert code == 1 and "get.pulumi.com" in err
    assert not (no_credentials / "det").exists()


def test_down_without_pulumi_exits_non_zero(no_credentials: Path):
    code, _, err = _run(["aws", "down", "--cluster-id", "c1", "--yes"])
    assert code == 1 and "Pulumi CLI" in err


def test_invalid_cluster_id_is_one_line_error(no_credentials: Path):
    code, out, err = _run(
        ["gcp", "up", "--cluster-id", "Bad_Name", "--project-id", "p", "--dry-run"]
    )
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "--cluster-id" in err


def test_preemption_needs_the_priority_scheduler(no_credentials: Path):
    code, _, err = _run(
        [
            "aws",
            "up",
            "--cluster-id",
            "c1",
            "--keypair",
            "k",
            "--dry-run",
            "--preemption-enabled",
            "true",
        ]
    )
    assert code == 1 and "priority" in err
    code, out, _ = _run(
        [
            "aws",
            "up",
            "--cluster-id",
            "c1",
            "--keypair",
            "k",
            "--dry-run",
            "--json",
            "--scheduler-type",
            "priority",
            "--preemption-enabled",
            "true",
        ]
    )
    assert code == 0
    assert "preemption: true" in json.loads(out)["outputs"]["master_yaml"]


def test_flags_reach_the_master_yaml(no_credentials: Path):
    code, out, err = _run(
        [
            "aws",
            "up",
            "--cluster-id",
            "c2",
            "--keypair",
            "k",
            "--dry-run",
            "--json",
            "--spot",
            "--spot-max-price",
            "0.5",
            "--gpu-agent-instance-type",
            "p3.8xlarge",
            "--min-dynamic-agents",
            "1",
            "--max-dynamic-agents",
            "3",
            "--max-idle-agent-period",
            "7m",
            "--add-tag",
            "team=ml",
        ]
    )
    assert code == 0, err
    master_yaml = json.loads(out)["outputs"]["master_yaml"]
    for text in (
        "instance_type: p3.8xlarge",
        "spot_max_price: '0.5'",
        "min_instances: 1",
        "max_instances: 3",
        "max_idle_agent_period: 7m",
        "key: team",
    ):
        assert text in master_yaml


def test_bad_flag_value_is_an_argparse_error(
    no_credentials: Path, capsys: pytest.CaptureFixture[str]
):
    assert (
        clouds.run(["aws", "up", "--cluster-id", "c1", "--keypair", "k", "--spot-max-price", "$1"])
        == 2
    )
    assert "positive number" in capsys.readouterr().err


def test_list_reads_the_state_dir(no_credentials: Path):
    stacks = no_credentials / "det" / "pulumi" / ".pulumi" / "stacks" / "det-aws"
    stacks.mkdir(parents=True)
    checkpoint = {
        "checkpoint": {
            "latest": {
                "resources": [
                    {
                        "type": "pulumi:pulumi:Stack",
                        "outputs": {
                            "master_url": "http://203.0.113.5:8080",
                            "bucket": "bk",
                            "initial_user_password": {"ciphertext": "x"},
                        },
                    },
                ]
            }
        }
    }
    (stacks / "prod.json").write_text(json.dumps(checkpoint))
    (stacks / "prod.json.bak").write_text("{}")
    code, out, _ = _run(["aws", "list", "--json"])
    assert code == 0
    assert json.loads(out) == [
        {"clusterId": "prod", "masterUrl": "http://203.0.113.5:8080", "bucket": "bk"}
    ]
    code, out, _ = _run(["gcp", "list"])
    assert code == 0 and out.startswith("no clusters")


def test_add_parsers_registers_aws_and_gcp_under_a_noun():
    parser = argparse.ArgumentParser(prog="det")
    nouns = parser.add_subparsers(dest="noun")
    deploy = nouns.add_parser("deploy")
    clouds.add_parsers(deploy.add_subparsers(dest="cloud"))
    args = parser.parse_args(
        ["deploy", "gcp", "up", "--cluster-id", "c", "--project-id", "p", "--dry-run", "--json"]
    )
    assert args.func is clouds.handle
    out = io.StringIO()
    assert args.func(args, out) == 0
    assert json.loads(out.getvalue())["cloud"] == "gcp"


FAKE_PULUMI = """#!/bin/sh
# Stands in for the Pulumi CLI: reports a version, refuses everything else.
if [ "$1" = "version" ]; then echo v3.200.0; exit 0; fi
echo "error: this is not a real pulumi" >&2
exit 1
"""


@pytest.fixture
def fake_pulumi(no_credentials: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = Path(os.environ["PATH"])
    exe = bin_dir / "pulumi"
    exe.write_text(FAKE_PULUMI)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    # google-auth must not probe a metadata server.
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    return no_credentials


def test_up_without_aws_credentials_stops_before_pulumi(fake_pulumi: Path):
    code, _, err = _run(["aws", "up", "--cluster-id", "c1", "--keypair", "kp", "--yes"])
    assert code == 1 and "no AWS credentials found" in err
    assert state.list_stacks(state.state_dir(), "det-aws") == []


def test_up_without_gcp_credentials_stops_before_pulumi(fake_pulumi: Path):
    code, _, err = _run(["gcp", "up", "--cluster-id", "c1", "--project-id", "p", "--yes"])
    assert code == 1 and "no Google Cloud credentials found" in err
    assert state.list_stacks(state.state_dir(), "det-gcp") == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [
                "aws",
                "up",
                "--cluster-id",
                "c",
                "--keypair",
                "k",
                "--vpc-id",
                "vpc-1",
                "--public-subnet-ids",
                "s1",
            ],
            "--private-subnet-ids",
        ),
        (
            ["aws", "up", "--cluster-id", "c", "--keypair", "k", "--private-subnet-ids", "a", "b"],
            "need --vpc-id",
        ),
        (
            [
                "aws",
                "up",
                "--cluster-id",
                "c",
                "--keypair",
                "k",
                "--min-dynamic-agents",
                "3",
                "--max-dynamic-agents",
                "2",
            ],
            "--max-dynamic-agents",
        ),
        (
            ["aws", "up", "--cluster-id", "c", "--keypair", "k", "--cpu-env-image", "x"],
            "both should be",
        ),
        (
            ["gcp", "up", "--cluster-id", "c", "--project-id", "p", "--subnetwork", "s"],
            "--existing-network",
        ),
        (
            [
                "gcp",
                "up",
                "--cluster-id",
                "c",
                "--project-id",
                "p",
                "--filestore",
                "--filestore-address",
                "1.2.3.4:/x",
            ],
            "not both",
        ),
    ],
)
def test_inconsistent_flags_are_rejected_before_anything_runs(
    no_credentials: Path, argv: list[str], message: str
):
    code, out, err = _run([*argv, "--dry-run"])
    assert code == 1 and out == ""
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_down_of_a_cluster_already_deleted_is_a_no_op(no_credentials: Path, cloud: str):
    # A stand-in for the Pulumi CLI's presence only: with the local state the stacks are read
    # from disk, and a cluster that is gone never reaches Pulumi.
    pulumi = Path(os.environ["PATH"]) / "pulumi"
    pulumi.write_text("#!/bin/sh\nexit 99\n")
    pulumi.chmod(0o755)
    code, out, err = _run([cloud, "down", "--cluster-id", "c1", "--yes"])
    assert (code, err) == (0, "")
    assert f"No {cloud.upper()} cluster 'c1': nothing to delete" in out


# --- the master kind of an `up`: serverless for a new cluster, the recorded kind otherwise ---


@pytest.mark.parametrize(
    ("given", "previous", "kind"),
    [
        (None, None, "serverless"),  # a new cluster
        ("vm", None, "vm"),
        (None, {"region": "us-east-1"}, "vm"),  # a stack without the key is a VM one
        (None, {"master": "serverless"}, "serverless"),
        ("vm", {}, "vm"),
    ],
)
def test_master_kind_of_an_up(given, previous, kind):
    assert serverless.master_kind(given, previous) == kind


@pytest.mark.parametrize(
    ("given", "recorded"), [("serverless", {}), ("vm", {"master": "serverless"})]
)
def test_an_existing_cluster_cannot_change_its_master_kind(given, recorded):
    with pytest.raises(DeployError, match="cannot change its master kind in place") as e:
        serverless.master_kind(given, recorded)
    assert f"pass --master {recorded.get('master', 'vm')}" in str(e.value)


@pytest.mark.parametrize(
    ("argv", "module", "machine"),
    [(AWS_UP, aws_commands, "m6i.xlarge"), (GCP_UP, gcp_commands, "n2-standard-2")],
    ids=["aws", "gcp"],
)
def test_a_later_up_of_a_vm_cluster_stays_vm_and_takes_vm_flags(argv, module, machine):
    args = clouds.build_parser().parse_args([*argv, "--master-instance-type", machine])
    with pytest.raises(DeployError, match=r"\(the default for a new cluster\)"):
        module.config_from_args(args)  # a new cluster: serverless, which has no master VM
    cfg = module.config_from_args(args, previous={"cluster_id": "c1"})  # an existing VM stack
    assert cfg.master == "vm" and cfg.master_instance_type == machine
