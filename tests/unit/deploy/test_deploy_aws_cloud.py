"""AWS preflight and teardown against moto in server mode (a real HTTP endpoint for boto3)."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from det.deploy.aws import preflight, teardown
from det.deploy.common.errors import PreflightError
from tests.fakes.moto_server import REGION

pytestmark = pytest.mark.integration
AMI = "ami-12c6146b"


def _launch(ec2, cluster: str, count: int = 1, role: str = "agent") -> list[str]:
    tags = [{"Key": "det-cluster", "Value": cluster}, {"Key": "det-role", "Value": role}]
    reservation = ec2.run_instances(
        ImageId=AMI,
        InstanceType="t3.micro",
        MinCount=count,
        MaxCount=count,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return [i["InstanceId"] for i in reservation["Instances"]]


def _states(ec2, ids: list[str]) -> dict[str, str]:
    out = {}
    for r in ec2.describe_instances(InstanceIds=ids)["Reservations"]:
        out |= {i["InstanceId"]: i["State"]["Name"] for i in r["Instances"]}
    return out


def test_credentials_accepted_return_the_account(session):
    assert preflight.check_credentials(session) == "123456789012"


def test_missing_credentials_is_a_clear_error(session, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var)
    with pytest.raises(PreflightError, match="no AWS credentials found"):
        preflight.check_credentials(boto3.Session(region_name=REGION))


def test_missing_keypair_fails_and_existing_one_passes(session):
    with pytest.raises(PreflightError, match=r"key pair 'kp' does not exist.*create-key-pair"):
        preflight.check_keypair(session, "kp")
    session.client("ec2").create_key_pair(KeyName="kp")
    preflight.check_keypair(session, "kp")


def test_unreadable_quota_is_a_warning_not_a_failure(session):
    # moto's service-quotas does not know EC2: the check must not block the deploy.
    warning = preflight.check_vcpu_quota(session, "m5.xlarge", 5, spot=False)
    assert warning is not None and "L-1216C47A" in warning


def test_unknown_instance_type_fails(session):
    with pytest.raises(PreflightError, match=r"unknown instance type 'zz9\.huge'"):
        preflight.check_vcpu_quota(session, "zz9.huge", 5, spot=False)


class _StubSession:
    """A session whose clients answer from botocore Stubbers (no network)."""

    region_name = "us-west-2"

    def __init__(self, vcpus: int, quota: float) -> None:
        kwargs = {
            "region_name": "us-west-2",
            "aws_access_key_id": "x",
            "aws_secret_access_key": "x",
        }
        self.ec2 = boto3.client("ec2", **kwargs)
        self.quotas = boto3.client("service-quotas", **kwargs)
        ec2_stub, quota_stub = Stubber(self.ec2), Stubber(self.quotas)
        ec2_stub.add_response(
            "describe_instance_types",
            {"InstanceTypes": [{"InstanceType": "g5.xlarge", "VCpuInfo": {"DefaultVCpus": vcpus}}]},
        )
        quota_stub.add_response(
            "get_service_quota",
            {"Quota": {"QuotaCode": "L-DB2E81BA", "Value": quota}},
            {"ServiceCode": "ec2", "QuotaCode": "L-3819A6DF"},
        )
        ec2_stub.activate()
        quota_stub.activate()

    def client(self, name: str):
        return self.ec2 if name == "ec2" else self.quotas


def test_vcpu_quota_too_small_fails_with_the_numbers():
    with pytest.raises(
        PreflightError, match=r"5 x g5.xlarge need 20 spot vCPUs but quota L-3819A6DF .* allows 16"
    ):
        preflight.check_vcpu_quota(_StubSession(vcpus=4, quota=16.0), "g5.xlarge", 5, spot=True)
    assert (
        preflight.check_vcpu_quota(_StubSession(vcpus=4, quota=20.0), "g5.xlarge", 5, spot=True)
        is None
    )


@pytest.mark.parametrize(
    ("instance_type", "spot", "code"),
    [
        ("p3.8xlarge", False, "L-417A185B"),
        ("g4dn.metal", True, "L-3819A6DF"),
        ("m5.xlarge", False, "L-1216C47A"),
        ("inf1.xlarge", False, "L-1945791B"),
    ],
)
def test_quota_codes_by_family(instance_type, spot, code):
    assert preflight.quota_code(instance_type, spot) == code


def test_terminate_agents_removes_only_this_clusters_agents(session):
    ec2 = session.client("ec2")
    (master,) = _launch(ec2, "c1", role="master")
    agents = _launch(ec2, "c1", count=3)
    (other,) = _launch(ec2, "c2")
    removed = teardown.terminate_agents(ec2, "c1", exclude=frozenset({master}))
    assert sorted(removed) == sorted(agents)
    states = _states(ec2, [master, other, *agents])
    assert [states[a] for a in agents] == ["terminated"] * 3
    assert states[master] == "running" and states[other] == "running"
    assert teardown.terminate_agents(ec2, "c1", exclude=frozenset({master})) == []


def test_stop_master_tolerates_a_missing_instance(session):
    ec2 = session.client("ec2")
    (master,) = _launch(ec2, "c1", role="master")
    teardown.stop_master(ec2, master)
    assert _states(ec2, [master])[master] in ("stopping", "stopped")
    teardown.stop_master(ec2, "i-0123456789abcdef0")


def test_delete_bucket_removes_every_version(session):
    s3 = session.client("s3")
    s3.create_bucket(Bucket="ckpt")
    s3.put_bucket_versioning(Bucket="ckpt", VersioningConfiguration={"Status": "Enabled"})
    for n in range(3):
        s3.put_object(Bucket="ckpt", Key="a/checkpoint", Body=b"x" * n)
    s3.put_object(Bucket="ckpt", Key="b", Body=b"y")
    s3.delete_object(Bucket="ckpt", Key="b")  # leaves a delete marker
    assert teardown.delete_bucket(s3, "ckpt") == 5
    assert "ckpt" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert teardown.delete_bucket(s3, "ckpt") == 0


def _cli(argv: list[str]) -> tuple[int, str, str]:
    import io

    from det.deploy import clouds

    out, err = io.StringIO(), io.StringIO()
    return clouds.run(argv, out, err), out.getvalue(), err.getvalue()


@pytest.fixture
def fake_pulumi(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "pulumi"
    exe.write_text(
        '#!/bin/sh\nif [ "$1" = version ]; then echo v3.200.0; exit 0; fi\necho "error: not a real pulumi" >&2\nexit 1\n'
    )
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data"


def test_up_stops_at_a_missing_keypair(session, fake_pulumi):
    code, _, err = _cli(
        # A VM master: the preflight of a serverless one needs Docker on this machine first.
        ["aws", "up", "--cluster-id", "c1", "--keypair", "nope", "--region", REGION, "--yes",
         "--master", "vm"]
    )  # fmt: skip
    assert code == 1
    assert "EC2 key pair 'nope' does not exist" in err
    assert not (fake_pulumi / "det" / "pulumi" / ".pulumi").exists()


def test_up_turns_a_pulumi_failure_into_one_line(session, fake_pulumi):
    session.client("ec2").create_key_pair(KeyName="kp")
    code, out, err = _cli(
        [
            "aws",
            "up",
            "--cluster-id",
            "c1",
            "--keypair",
            "kp",
            "--region",
            REGION,
            "--yes",
            "--compute-agent-instance-type",
            "m5.xlarge",
            # moto has no public image parameters; given images need no look-up.
            "--agent-image-id",
            AMI,
            "--master-image-id",
            AMI,
            # A VM master: a serverless one builds its image before pass 1 (Docker Hub's base,
            # which this machine cannot reach), and this test is about Pulumi's failure.
            "--master",
            "vm",
            # The organisation's own wheel: nothing is built. Building det's wheel and resolving
            # its dependencies for the VMs' Python (pip against the index: over a minute, most of
            # this module's time) is test_deploy_release_build's, and comes before Pulumi.
            "--det-wheel-url",
            "https://packages.example.com/det_platform-0.1.0-py3-none-any.whl",
        ]
    )
    assert code == 1
    # moto lists no RDS offerings and has no quotas: both checks warn, on one line.
    assert "warning: cannot check RDS class db.m7g.large" in out
    assert "; could not check the vCPU quota L-1216C47A" in out
    assert err.startswith("det deploy: error: ") and err.count("\n") == 1
    assert "not a real pulumi" in err


def test_up_stops_at_an_unreadable_image_parameter(session, fake_pulumi):
    session.client("ec2").create_key_pair(KeyName="kp")
    code, _, err = _cli(
        ["aws", "up", "--cluster-id", "c1", "--keypair", "kp", "--region", REGION, "--yes",
         "--master", "vm"]
    )  # fmt: skip
    assert code == 1 and err.count("\n") == 1
    assert "cannot read the image parameter /aws/service/canonical/ubuntu/server/24.04/" in err
    assert not (fake_pulumi / "det" / "pulumi" / ".pulumi").exists()


def test_down_stops_a_serverless_master_before_the_agents(session):
    # Its scaling is suspended (a request would start a task again) and its service runs none.
    ecs = session.client("ecs")
    scaling = session.client("application-autoscaling")
    ecs.create_cluster(clusterName="det-c1-master")
    ecs.register_task_definition(
        family="det-c1-master-service",
        containerDefinitions=[{"name": "master", "image": "det-master:x", "memory": 512}],
    )
    ecs.create_service(
        cluster="det-c1-master",
        serviceName="det-c1-master-svc",
        taskDefinition="det-c1-master-service",
        desiredCount=1,
    )
    resource = "service/det-c1-master/det-c1-master-svc"
    scaling.register_scalable_target(
        ServiceNamespace="ecs",
        ResourceId=resource,
        ScalableDimension="ecs:service:DesiredCount",
        MinCapacity=0,
        MaxCapacity=2,
    )
    teardown.stop_serverless_master(scaling, ecs, "det-c1-master", "det-c1-master-svc", wait=False)
    (service,) = ecs.describe_services(cluster="det-c1-master", services=["det-c1-master-svc"])[
        "services"
    ]
    assert service["desiredCount"] == 0
    (target,) = scaling.describe_scalable_targets(ServiceNamespace="ecs", ResourceIds=[resource])[
        "ScalableTargets"
    ]
    assert target["SuspendedState"]["DynamicScalingOutSuspended"] is True
    # A cluster whose service is already gone: nothing to stop.
    teardown.stop_serverless_master(scaling, ecs, "det-c1-master", "gone", wait=False)
