"""The AWS cluster's first boot, for real: the user data the Pulumi program renders (under its
mocks, never a copy) runs in a container of a fresh Debian VM image (``det-vm:trixie``: python3,
venv, curl; no det, no SDK) against moto (S3, Secrets Manager, CloudWatch Logs, EC2, IAM) and a
fake IMDSv2 with role credentials. The container downloads det's wheel from the (fake) bucket
with the instance role, checks its hash, installs its dependencies from a local package index
only (``--det-package-index``; that index also offers a decoy ``det`` 99.0 that must never be
asked for), writes master.yaml and the secrets, and starts the master, which answers ``/info``
over HTTPS with the generated certificate.

Then the agent half: an experiment makes the master launch an agent in moto with the user data
it renders itself; that user data runs in a second container (its own fake IMDS: the moto
instance's id and the agent role), which installs det's wheel from the bucket, writes the
master's certificate, registers over HTTPS and runs the one trial to COMPLETED.

The containers have no systemd: a ``systemctl`` stand-in (test only) runs a unit's ExecStart.
"""

from __future__ import annotations

import base64
import email
import json
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from det.deploy.aws import bootlog, program
from det.deploy.aws.config import CLUSTER_TAG, AwsConfig
from det.deploy.common import boot, dryrun, release, tls
from det.deploy.common.status import MachineLog
from tests.fakes.imds import FakeImds
from tests.fakes.moto_server import MotoServer
from tests.fakes.package_index import PackageIndex, wheelhouse
from tests.integration import deploy_boot_support as vm
from tests.ports import free_port_pair

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow, vm.needs_vm]

REGION = "us-east-1"
CLUSTER = "c1"
MASTER_ID = "i-0de7a57e40000001"  # the master VM's instance id in its fake IMDS
# Read back from the env file by its reader: blanks, quotes, $, backslash and # must survive.
PASSWORD = 'Boot Sim $HOME "Pa\'ss\\w0rd" #1!'


@pytest.fixture(scope="module")
def moto(moto_server: MotoServer) -> MotoServer:
    """The test process's moto (conftest_aws), wiped before this module uses it."""
    moto_server.reset()
    return moto_server


@pytest.fixture(scope="module")
def rel(tmp_path_factory: pytest.TempPathFactory) -> release.Release:
    return release.build(tmp_path_factory.mktemp("release"))


def _boto(service: str, endpoint: str) -> Any:
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _socket_dir(pg_url: str) -> str:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(pg_url).query)
    return query["host"][0]


def _role_imds(role: str, **metadata: str) -> FakeImds:
    """A fake IMDSv2 of one instance with ``role``'s credentials (boto3 and fetch_release.py
    read them from here)."""
    imds = FakeImds().start()
    expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    creds = {
        "Code": "Success",
        "AccessKeyId": "ASIAROLE",
        "SecretAccessKey": "role-secret",
        "Token": "role-token",
        "Expiration": expiry,
    }
    imds.metadata.update(
        {
            "local-ipv4": "127.0.0.1",
            "placement/region": REGION,
            "iam/security-credentials/": role,
            f"iam/security-credentials/{role}": json.dumps(creds),
            **metadata,
        }
    )
    return imds


@dataclass
class Booted:
    container: str
    url: str
    cert_file: Path | None
    rel: release.Release
    index: PackageIndex
    moto: str
    shared: Path


@contextmanager
def _boot_master(
    use_tls: bool,
    moto: MotoServer,
    pg_server: str,
    tmp: Path,
    rel: release.Release,
    *,
    index_url: str | None = None,
    wait: bool = True,
) -> Iterator[Booted]:
    """``index_url``: the package index the VM is told to use (default: the local one);
    ``wait=False``: yield as soon as the VM runs (a boot that is meant to fail)."""
    import psycopg

    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS determined WITH (FORCE)")
        conn.execute("CREATE DATABASE determined")
    moto.reset()
    endpoint = moto.endpoint
    material = tls.generate()
    (tmp / "master.crt").write_text(material.cert_pem)
    (tmp / "index").mkdir()
    index = PackageIndex(wheelhouse(rel, vm.VM_IMAGE), tmp / "index")
    port = free_port_pair()  # the API and, on the next port, its task origin
    secret_doc = {
        "db_password": "pw",
        "initial_user_password": PASSWORD,
        "tls_key": material.key_pem,
        "tls_cert": material.cert_pem,
    }
    secret_arn = _boto("secretsmanager", endpoint).create_secret(
        Name=f"det-{CLUSTER}-secret", SecretString=json.dumps(secret_doc)
    )["ARN"]
    _boto("logs", endpoint).create_log_group(logGroupName=f"/det/{CLUSTER}")
    # What the agents are launched into must exist in moto (it checks subnets and profiles).
    ec2 = _boto("ec2", endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    ec2.create_key_pair(KeyName="kp")
    profile_arn = _boto("iam", endpoint).create_instance_profile(
        InstanceProfileName=f"det-{CLUSTER}-agent"
    )["InstanceProfile"]["Arn"]
    cfg = AwsConfig(
        cluster_id=CLUSTER,
        region=REGION,
        keypair="kp",
        port=port,
        tls=use_tls,
        agent_subnet_id=subnet,
        boot=boot.BootOptions(
            release=rel,
            package_index=index_url or index.url,
            tls=material,
            plain_http=not use_tls,
        ),
    )
    graph = dryrun.render(
        lambda: program.build(cfg),
        program.MOCK_CALLS,
        overrides={
            "aws:rds/instance:Instance": {"address": _socket_dir(pg_server), "port": 5432},
            "aws:secretsmanager/secret:Secret": {"arn": secret_arn},
            "aws:iam/instanceProfile:InstanceProfile": {"arn": profile_arn},
        },
    )
    s3 = _boto("s3", endpoint)
    s3.create_bucket(Bucket=graph.outputs["bucket"])
    for obj in graph.of_type("aws:s3/bucketObjectv2:BucketObjectv2"):
        body = (
            Path(obj.inputs["source"].path).read_bytes()
            if "source" in obj.inputs
            else obj.inputs["content"].encode()
        )
        s3.put_object(Bucket=obj.inputs["bucket"], Key=obj.inputs["key"], Body=body)
    (instance,) = graph.of_type("aws:ec2/instance:Instance")
    message = email.message_from_string(instance.inputs["userData"])
    (script,) = [
        p.get_payload() for p in message.walk() if p.get_content_type() == "text/x-shellscript"
    ]
    (tmp / "user-data.sh").write_text(script)
    shim = vm.write_shim(tmp)
    imds = _role_imds(f"det-{CLUSTER}-master", **{"instance-id": MASTER_ID})
    name = vm.vm_name("master")
    socket_dir = _socket_dir(pg_server)
    try:
        vm.run_vm(
            name,
            ["-v", f"{tmp}:/boot:ro", "-v", f"{shim}:/usr/local/bin/systemctl:ro",
             "-v", f"{socket_dir}:{socket_dir}",
             "-e", f"AWS_ENDPOINT_URL={endpoint}", "-e", f"DET_IMDS_URL={imds.url}",
             "-e", f"AWS_EC2_METADATA_SERVICE_ENDPOINT={imds.url}/"],
            "bash /boot/user-data.sh && exec sleep infinity",
        )  # fmt: skip
        scheme = "https" if use_tls else "http"
        if not wait:
            yield Booted(name, "", None, rel, index, endpoint, tmp)
            return
        get: Any = tls.verified_get(tmp / "master.crt", tls.CERT_NAME) if use_tls else requests.get
        url = f"{scheme}://127.0.0.1:{port}"
        info = vm.wait_for_info(get, url, name)
        assert info["version"] and info["clusterName"] == CLUSTER
        shared = tmp / "shared"
        shared.mkdir()
        yield Booted(
            name, url, tmp / "master.crt" if use_tls else None, rel, index, endpoint, shared
        )
    finally:
        vm.dump_and_remove(name, "/var/log/det-bootstrap.log /var/log/det-master.log")
        imds.stop()
        index.close()


@pytest.fixture(scope="module")
def https_master(
    moto: MotoServer,
    pg_server: str,
    rel: release.Release,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Booted]:
    with _boot_master(True, moto, pg_server, tmp_path_factory.mktemp("boot"), rel) as booted:
        yield booted


def _check_installed_from_bucket(b: Booted) -> None:
    version = vm.sh(
        b.container,
        "/opt/det/bin/python3 -c 'import importlib.metadata as m; print(m.version(\"det-platform\"))'",
    )
    assert version.strip() == "0.1.0"
    assert vm.sh(b.container, "cat /opt/det/.det-wheel-sha256").startswith(b.rel.sha256 + ":s3://")
    # Dependencies came from the local index; det's name was never looked up there.
    assert b.index.asked_for("boto3")
    assert not b.index.asked_for("det")
    assert vm.sh(b.container, "stat -c %a /etc/det/master.env").strip() == "600"
    boot_log = vm.sh(b.container, "cat /var/log/det-bootstrap.log")
    assert f"installed {b.rel.filename}" in boot_log and "det-master (re)started" in boot_log


# Runs first: its master is gone before the module's HTTPS master boots on the same database.
def test_master_boots_with_plain_http_when_asked(
    moto: MotoServer, pg_server: str, rel: release.Release, tmp_path: Path
) -> None:
    with _boot_master(False, moto, pg_server, tmp_path, rel) as booted:
        _check_installed_from_bucket(booted)
        with pytest.raises(requests.RequestException):
            requests.get(booted.url.replace("http://", "https://") + "/info", timeout=5)


# Before the HTTPS master (its own moto state and database). pip cannot reach its index, the
# likeliest real failure: the boot log in CloudWatch Logs, read by status's own code, says so
# while det is not installed yet (the shipper is the image's python3 and the standard library).
def test_a_pip_failure_shows_in_status_within_a_minute(
    moto: MotoServer, pg_server: str, rel: release.Release, tmp_path: Path
) -> None:
    dead_index = vm.dead_index()
    with _boot_master(
        True, moto, pg_server, tmp_path, rel, index_url=dead_index, wait=False
    ) as booted:
        logs = _boto("logs", booted.moto)
        vm.wait_for_pip_failure(
            lambda: bootlog.tail(logs, f"/det/{CLUSTER}", 200), dead_index, booted.container
        )


def test_master_boots_from_the_bucket_and_answers_over_https(https_master: Booted) -> None:
    b = https_master
    _check_installed_from_bucket(b)
    assert vm.sh(b.container, f"stat -c %a {tls.MASTER_KEY_PATH}").strip() == "600"
    # Plain HTTP on the HTTPS port is refused, and no other client certificate is trusted.
    plain = requests.get(b.url.replace("https://", "http://") + "/info", timeout=5)
    assert plain.status_code == 400
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(b.url + "/info", timeout=5, verify=vm.HOST_CA_BUNDLE)


def test_agent_boots_from_the_masters_user_data_and_runs_a_trial(https_master: Booted) -> None:
    b = https_master
    api = vm.MasterApi(b.url, b.cert_file, tls.CERT_NAME)
    api.login(PASSWORD)
    eid = api.create_example(b.shared / "checkpoints")
    ec2 = _boto("ec2", b.moto)

    def launched() -> list[str]:
        pages = ec2.describe_instances(
            Filters=[
                {"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]},
                {"Name": "instance-state-name", "Values": ["running"]},
            ]
        )["Reservations"]
        return [i["InstanceId"] for r in pages for i in r["Instances"]]

    (instance_id,) = vm.poll("the master to launch an agent", launched, 120)
    raw = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    user_data = base64.b64decode(raw["UserData"]["Value"]).decode()
    assert user_data.startswith("#!/bin/bash") and "export DET_AGENT_WHEEL_URL=s3://" in user_data
    imds = _role_imds(f"det-{CLUSTER}-agent", **{"instance-id": instance_id})
    env = {
        "AWS_ENDPOINT_URL": b.moto,
        "DET_IMDS_URL": imds.url,
        # The harness bundle's pure-Python copies of requests & co. come from the same index.
        "PIP_INDEX_URL": b.index.url,
    }
    try:
        with vm.agent_vm(user_data, b.shared, env, instance_id=instance_id) as agent:
            api.wait_completed(eid, 300)
            agents = {a["id"]: a for a in api.get("/api/v1/agents")["agents"]}
            assert instance_id in agents
            assert agents[instance_id]["resourcePools"] == ["compute-pool"]
            # The wheel came from the bucket with the agent's role, hash-checked; the agent
            # trusts exactly the certificate the master handed it.
            marker = vm.sh(agent, "cat /opt/det/venv/.det-wheel")
            assert marker.startswith(b.rel.sha256 + ":s3://")
            assert b.cert_file is not None
            assert (b.shared / "master.crt").read_text() == b.cert_file.read_text()
            assert any(p.startswith("/latest/meta-data/iam/") for p in imds.requests)
            assert not b.index.asked_for("det")
            # The agent ships its boot log (and the agent's own output) to the cluster's
            # group from its first seconds: status shows its lines beside the master's, each
            # machine's own tail (a merged one was the master's alone after a trial).
            streams = _boto("logs", b.moto).describe_log_streams(logGroupName=f"/det/{CLUSTER}")
            names = {s["logStreamName"] for s in streams["logStreams"]}
            assert f"{instance_id}/det-bootstrap.log" in names, names
            master_id = MASTER_ID

            # The shipper sends what is new every 5 s (logship.py): the agent's boot lines may
            # still be on their way when the trial has completed.
            def boot_logs() -> list[MachineLog] | None:
                machines = bootlog.tail(
                    _boto("logs", b.moto), f"/det/{CLUSTER}", 200, master=master_id
                )
                mine = next((m for m in machines if m.machine == instance_id), None)
                agent_boot = mine.lines("det-bootstrap.log") if mine is not None else []
                done = any(f"det-bootstrap: agent id: {instance_id}" in x for x in agent_boot)
                return machines if done else None

            machines = vm.poll("the agent's boot log in status", boot_logs, 60)
            by_id = {m.machine: m for m in machines}
            assert machines[0].machine == master_id and machines[0].role == "master"
            assert any("det-master (re)started" in line
                       for line in by_id[master_id].lines("det-bootstrap.log"))  # fmt: skip
            assert by_id[instance_id].role == "agent"

            # det-agent's own log is the agent's second stream: the trial's container in it.
            def agent_log() -> list[str] | None:
                machines = bootlog.tail(
                    _boto("logs", b.moto), f"/det/{CLUSTER}", 200, master=master_id
                )
                (agent_logs,) = [m for m in machines if m.machine == instance_id]
                lines = agent_logs.lines("det-agent.log")
                return lines if any("terminated (exit 0)" in x for x in lines) else None

            vm.poll("det-agent's log in status", agent_log, 60)
            # The user data held a one-time ticket, never the agent token; it is spent.
            agent_token = vm.sh(b.container, "cat /var/lib/det/master/agent_token").strip()
            assert agent_token and agent_token not in user_data
            api.check_enrolled_with_a_spent_ticket(agent, user_data, instance_id)
    finally:
        imds.stop()
