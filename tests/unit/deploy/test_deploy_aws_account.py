"""AWS account checks and upkeep of a first deploy, against moto in server mode."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from det.deploy.aws import preflight, teardown
from det.deploy.aws.config import CONFIG_HASH_TAG, DLAMI_SSM_PARAMETER, UBUNTU_SSM_PARAMETER
from det.deploy.common.errors import PreflightError
from tests.fakes.moto_server import REGION

pytestmark = pytest.mark.integration
AMI = "ami-12c6146b"


def test_spot_service_linked_role_is_found_once_it_exists(session):
    assert preflight.spot_service_role_exists(session) is False
    session.client("iam").create_service_linked_role(AWSServiceName="spot.amazonaws.com")
    assert preflight.spot_service_role_exists(session) is True


def test_unreadable_spot_role_fails_with_the_fix():
    client = boto3.client(
        "iam", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(client)
    stub.add_client_error("list_roles", service_error_code="AccessDenied", http_status_code=403)
    stub.activate()

    class _Session:
        region_name = "us-east-1"

        def client(self, name: str):
            return client

    with pytest.raises(
        PreflightError, match=r"create-service-linked-role --aws-service-name spot.amazonaws.com"
    ) as e:
        preflight.spot_service_role_exists(_Session())
    assert "\n" not in str(e.value)


def test_missing_image_parameter_is_one_line_naming_it(session):
    # moto does not carry the public parameters: the error path of a region without them.
    with pytest.raises(PreflightError, match=r"cannot read the image parameter /aws/service/") as e:
        preflight.resolve_images(session)
    assert "ParameterNotFound" in str(e.value) and "\n" not in str(e.value)


def test_images_resolve_from_both_parameters():
    client = boto3.client(
        "ssm", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(client)
    for name, value in ((UBUNTU_SSM_PARAMETER, "ami-0u"), (DLAMI_SSM_PARAMETER, "ami-0g")):
        stub.add_response(
            "get_parameter", {"Parameter": {"Name": name, "Value": value}}, {"Name": name}
        )
    stub.activate()

    class _Session:
        region_name = "us-east-1"

        def client(self, name: str):
            return client

    images = preflight.resolve_images(_Session())
    assert (images.master, images.aux_agent, images.compute_agent) == ("ami-0u", "ami-0u", "ami-0g")
    stub.assert_no_pending_responses()


def _launch(ec2, cluster: str, role: str = "agent", digest: str | None = None) -> str:
    tags = [{"Key": "det-cluster", "Value": cluster}, {"Key": "det-role", "Value": role}]
    if digest:
        tags.append({"Key": CONFIG_HASH_TAG, "Value": digest})
    reservation = ec2.run_instances(
        ImageId=AMI,
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return str(reservation["Instances"][0]["InstanceId"])


def _state(ec2, instance_id: str) -> str:
    (reservation,) = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(reservation["Instances"][0]["State"]["Name"])


def test_agents_of_an_older_config_are_replaced_and_the_rest_kept(session):
    ec2 = session.client("ec2")
    master = _launch(ec2, "c1", role="master")
    old = _launch(ec2, "c1", digest="old")
    untagged = _launch(ec2, "c1")
    current = _launch(ec2, "c1", digest="new")
    other = _launch(ec2, "c2", digest="old")
    replaced = teardown.replace_stale_agents(ec2, "c1", "new", exclude=frozenset({master}))
    assert sorted(replaced) == sorted([old, untagged])
    assert {i: _state(ec2, i) for i in (old, untagged)} == {
        old: "terminated",
        untagged: "terminated",
    }
    assert [_state(ec2, i) for i in (master, current, other)] == ["running"] * 3
    assert teardown.replace_stale_agents(ec2, "c1", "new", exclude=frozenset({master})) == []


def test_down_waits_for_the_master_to_stop_before_listing_agents(session):
    ec2 = session.client("ec2")
    master = _launch(ec2, "c1", role="master")
    calls: list[str] = []
    ec2.meta.events.register("before-call.ec2.*", lambda model, **_: calls.append(model.name))
    teardown.stop_master(ec2, master)
    # The waiter's describe comes before anything lists the agents: a master still stopping
    # could launch one after the list (its interface then holds the VPC).
    assert calls[0] == "StopInstances" and calls[1:] and set(calls[1:]) == {"DescribeInstances"}
    state = ec2.describe_instances(InstanceIds=[master])["Reservations"][0]["Instances"][0]
    assert state["State"]["Name"] == "stopped"
    calls.clear()
    teardown.stop_master(ec2, "i-0123456789abcdef0")  # already gone: nothing to wait for
    assert calls == ["StopInstances"]


def test_delete_data_removes_the_final_snapshot(session):
    rds = session.client("rds")
    rds.create_db_instance(
        DBInstanceIdentifier="det-c1-db",
        DBInstanceClass="db.m7g.large",
        Engine="postgres",
        MasterUsername="postgres",
        MasterUserPassword="password123",
        AllocatedStorage=20,
    )
    rds.delete_db_instance(
        DBInstanceIdentifier="det-c1-db", FinalDBSnapshotIdentifier="det-c1-final-a1b2"
    )
    assert rds.describe_db_snapshots(DBSnapshotIdentifier="det-c1-final-a1b2")["DBSnapshots"]
    assert teardown.delete_final_snapshot(rds, "det-c1-final-a1b2") is True
    snapshots = rds.describe_db_snapshots()["DBSnapshots"]
    assert "det-c1-final-a1b2" not in [s["DBSnapshotIdentifier"] for s in snapshots]
    assert teardown.delete_final_snapshot(rds, "det-c1-final-a1b2") is False


def _rds_session(*answers: list[dict[str, str]]):
    """A session whose RDS client answers DescribeOrderableDBInstanceOptions with ``answers``
    in turn (botocore's Stubber checks each request against the API's model)."""
    client = boto3.client(
        "rds", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(client)
    for options in answers:
        stub.add_response(
            "describe_orderable_db_instance_options", {"OrderableDBInstanceOptions": options}
        )
    stub.activate()

    class _Session:
        region_name = "us-west-2"

        def client(self, name: str):
            assert name == "rds"
            return client

    return _Session()


def _offer(cls: str, version: str, storage: str = "gp3") -> dict[str, str]:
    return {
        "Engine": "postgres",
        "DBInstanceClass": cls,
        "EngineVersion": version,
        "StorageType": storage,
    }


def test_db_class_that_runs_postgres_16_on_gp3_passes():
    session = _rds_session([_offer("db.m7g.large", "15.8"), _offer("db.m7g.large", "16.4")])
    assert preflight.check_db_instance_class(session, "db.m7g.large", "16") is None


def test_db_class_without_postgres_16_on_gp3_is_refused_naming_what_it_runs():
    session = _rds_session(
        [_offer("db.t2.micro", "12.22"), _offer("db.t2.micro", "16.4", storage="standard")]
    )
    with pytest.raises(PreflightError, match=r"PostgreSQL 16 on db.t2.micro .*\(it does: 12.22\)"):
        preflight.check_db_instance_class(session, "db.t2.micro", "16")


def test_db_class_not_offered_in_the_region_is_refused():
    session = _rds_session([], [_offer("db.m6i.large", "16.4")])
    with pytest.raises(PreflightError, match=r"no PostgreSQL on db\.x9z\.large in us-west-2"):
        preflight.check_db_instance_class(session, "db.x9z.large", "16")


def test_db_class_is_a_warning_when_rds_lists_nothing_at_all():
    # moto lists no PostgreSQL offerings; real RDS always does.
    session = _rds_session([], [])
    assert "cannot check" in str(preflight.check_db_instance_class(session, "db.m7g.large", "16"))


def _ec2_session(zones: list[str], offered: dict[str, list[str]]):
    """A session whose EC2 client lists ``zones`` and, per instance type in turn, the zones
    that offer it (botocore's Stubber checks each request against EC2's model)."""
    client = boto3.client(
        "ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(client)
    stub.add_response(
        "describe_availability_zones",
        {"AvailabilityZones": [{"ZoneName": z, "State": "available"} for z in zones]},
    )
    for instance_type, where in offered.items():
        stub.add_response(
            "describe_instance_type_offerings",
            {
                "InstanceTypeOfferings": [
                    {
                        "InstanceType": instance_type,
                        "LocationType": "availability-zone",
                        "Location": z,
                    }
                    for z in where
                ]
            },
        )
    stub.activate()

    class _Session:
        region_name = "us-west-2"

        def client(self, name: str):
            assert name == "ec2"
            return client

    return _Session()


def test_new_vpc_zones_are_ones_that_offer_the_gpu_type():
    # The first zone lacks the GPU type: agents there would never launch.
    zones = ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"]
    session = _ec2_session(
        zones,
        {
            "m6i.large": zones,
            "m5.xlarge": zones,
            "g4dn.metal": ["us-west-2b", "us-west-2d"],
        },
    )
    assert preflight.pick_zones(session, ["m6i.large", "m5.xlarge", "g4dn.metal"]) == (
        "us-west-2b",
        "us-west-2d",
    )


def test_one_zone_with_the_gpu_type_gets_another_for_the_database():
    session = _ec2_session(["us-west-2a", "us-west-2b"], {"p4d.24xlarge": ["us-west-2b"]})
    assert preflight.pick_zones(session, ["p4d.24xlarge"]) == ("us-west-2b", "us-west-2a")


def test_a_gpu_type_no_zone_offers_is_refused_naming_it():
    session = _ec2_session(["us-west-2a"], {"m6i.large": ["us-west-2a"], "p5.48xlarge": []})
    with pytest.raises(PreflightError, match=r"p5\.48xlarge \(no zone\)") as e:
        preflight.pick_zones(session, ["m6i.large", "p5.48xlarge"])
    assert "\n" not in str(e.value)


def test_zones_are_picked_through_the_real_sdk(session):
    first, second = preflight.pick_zones(session, ["m6i.large", "g4dn.metal"])
    assert first != second and first.startswith(REGION) and second.startswith(REGION)


def _image_session(root_gib: int):
    client = boto3.client(
        "ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(client)
    mappings = [
        {"DeviceName": "/dev/sda1", "Ebs": {"SnapshotId": "snap-1", "VolumeSize": root_gib}},
        {"DeviceName": "/dev/sdb", "Ebs": {"SnapshotId": "snap-2", "VolumeSize": 500}},
    ]
    stub.add_response(
        "describe_images",
        {
            "Images": [
                {"ImageId": "ami-1", "RootDeviceName": "/dev/sda1", "BlockDeviceMappings": mappings}
            ]
        },
        {"ImageIds": ["ami-1"]},
    )
    stub.activate()

    class _Session:
        region_name = "us-west-2"

        def client(self, name: str):
            return client

    return _Session()


def test_a_master_image_larger_than_the_masters_volume_is_refused():
    # EC2 refuses a root volume smaller than the image's snapshot (InvalidBlockDeviceMapping).
    preflight.check_master_image(_image_session(8), "ami-1", 100)  # Ubuntu's is 8 GiB
    with pytest.raises(PreflightError, match="a 120 GiB root snapshot, more than the master's 100"):
        preflight.check_master_image(_image_session(120), "ami-1", 100)
