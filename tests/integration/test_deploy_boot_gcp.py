"""The GCP master's first boot, for real: the startup script the Pulumi program renders (under
its mocks, never a copy) runs in a container of a fresh Debian VM image (``det-vm:trixie``)
against gcp-storage-emulator (the bucket), a fake metadata server (instance address, the
service account's token, the project) and fakes of Secret Manager and Cloud Logging. det's wheel
comes from the bucket with the service account's token, hash-checked; its dependencies from a
local package index only (which also offers a decoy ``det`` that must never be asked for); the
master answers ``/info`` over HTTPS with the generated certificate; the boot log reaches Cloud
Logging.

Then the agent half: the agent startup script is rendered by the master's own code
(``GcpProvider.for_pool``: ``render_user_data`` with ``cloud="gcp"``) from the compute pool of
the master.yaml the program produced (``agent_install``, ``master_cert_name``, the master's URL),
the master's certificate and its agent token, and runs in a second container against its own
fake metadata server (the instance name is the agent id; the service account's token fetches
det's wheel from the bucket). The agent registers over HTTPS and runs the one trial to
COMPLETED. The master cannot launch that instance itself here: the GCP provider block of the
rendered master.yaml has no endpoint override, so its Compute calls would go to the real
``compute.googleapis.com``; the test plays the launch.

The containers have no systemd: a ``systemctl`` stand-in (test only) runs a unit's ExecStart.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from det.deploy.common import boot, dryrun, release, tls
from det.deploy.common.masteryaml import COMPUTE_POOL, LOCAL_IP_PLACEHOLDER
from det.deploy.common.status import MachineLog
from det.deploy.gcp import bootlog, program
from det.deploy.gcp.config import GcpConfig
from det.master.services import enrollment
from tests.fakes.gce_metadata import FakeGceMetadata
from tests.fakes.google_apis import FakeGoogleApis
from tests.fakes.package_index import PackageIndex, wheelhouse
from tests.integration import deploy_boot_support as vm
from tests.integration.storage_support import gcs_emulator
from tests.ports import free_port_pair

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow, vm.needs_vm]

CLUSTER = "g1"
PROJECT = "test-project"
# Read back from the env file by its reader: blanks, quotes, $, backslash and # must survive.
PASSWORD = 'Boot Sim $HOME "Pa\'ss\\w0rd" #1!'


def _socket_dir(pg_url: str) -> str:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(pg_url).query)
    return query["host"][0]


def _service_account(meta: FakeGceMetadata, email: str, token: str) -> None:
    """The metadata paths google-auth and the boot read for the VM's service account; "" is the
    root google-auth pings to tell it runs on GCE."""
    meta.values[""] = ""
    meta.values["instance/service-accounts/default"] = json.dumps(
        {"email": email, "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
         "aliases": ["default"]}
    )  # fmt: skip
    meta.values["instance/service-accounts/default/email"] = email
    meta.values["instance/service-accounts/default/token"] = json.dumps(
        {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}
    )
    meta.values["project/numeric-project-id"] = "123456789"


def _upload(emulator: str, bucket: str, key: str, body: bytes) -> None:
    r = requests.post(
        f"{emulator}/upload/storage/v1/b/{bucket}/o",
        params={"uploadType": "media", "name": key},
        data=body,
        timeout=30,
    )
    assert r.status_code == 200, r.text


@dataclass
class Booted:
    container: str
    url: str
    cert_file: Path
    rel: release.Release
    index: PackageIndex
    apis: FakeGoogleApis
    meta: FakeGceMetadata
    token: str
    emulator: str
    master_yaml: str
    """The program's master.yaml output (the private address still a placeholder)."""
    cluster_id: str
    bucket: str
    shared: Path
    pg: str


@pytest.fixture(scope="module")
def rel(tmp_path_factory: pytest.TempPathFactory) -> release.Release:
    return release.build(tmp_path_factory.mktemp("release"))


@contextmanager
def _boot_master(
    pg_server: str,
    tmp: Path,
    rel: release.Release,
    *,
    index_url: str | None = None,
    wait: bool = True,
) -> Iterator[Booted]:
    """``index_url``: the package index the VM is told to use (default: the local one);
    ``wait=False``: yield as soon as the VM runs (a boot that is meant to fail before it
    reaches the database, which is then left alone)."""
    import psycopg

    if wait:
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS determined WITH (FORCE)")
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'det'").fetchone():
                conn.execute("CREATE ROLE det LOGIN SUPERUSER PASSWORD 'pw'")
            conn.execute("CREATE DATABASE determined OWNER det")
    material = tls.generate()
    (tmp / "master.crt").write_text(material.cert_pem)
    (tmp / "index").mkdir()
    index = PackageIndex(wheelhouse(rel, vm.VM_IMAGE), tmp / "index")
    port = free_port_pair()  # the API and, on the next port, its task origin
    token = secrets.token_urlsafe(16)
    cfg = GcpConfig(
        cluster_id=CLUSTER,
        project_id=PROJECT,
        port=port,
        boot=boot.BootOptions(release=rel, package_index=index_url or index.url, tls=material),
    )
    graph = dryrun.render(
        lambda: program.build(cfg),
        program.MOCK_CALLS,
        overrides={
            "gcp:sql/databaseInstance:DatabaseInstance": {
                "privateIpAddress": _socket_dir(pg_server)
            },
        },
    )
    (instance,) = graph.of_type("gcp:compute/instance:Instance")
    (tmp / "startup-script.sh").write_text(instance.inputs["metadataStartupScript"])
    shim = vm.write_shim(tmp)
    apis = FakeGoogleApis(token).start()
    apis.secrets[f"projects/{PROJECT}/secrets/det-{CLUSTER}-secret"] = json.dumps(
        {
            "db_password": "pw",
            "initial_user_password": PASSWORD,
            "tls_key": material.key_pem,
            "tls_cert": material.cert_pem,
        }
    )
    meta = FakeGceMetadata(instance_name=f"det-master-{CLUSTER}", project=PROJECT, ip="127.0.0.1")
    _service_account(meta, f"det-{CLUSTER}-master@{PROJECT}.iam.gserviceaccount.com", token)
    meta.start()
    socket_dir = _socket_dir(pg_server)
    name = vm.vm_name("gcp-master")
    try:
        with gcs_emulator(tmp) as emulator:
            bucket = graph.outputs["bucket"]
            r = requests.post(
                f"{emulator}/storage/v1/b", params={"project": PROJECT}, json={"name": bucket},
                timeout=30,
            )  # fmt: skip
            assert r.status_code == 200, r.text
            objects = {
                o.inputs["name"]: o for o in graph.of_type("gcp:storage/bucketObject:BucketObject")
            }
            assert set(objects) == {rel.wheel_key, rel.constraints_key}
            _upload(
                emulator, bucket, rel.wheel_key,
                Path(objects[rel.wheel_key].inputs["source"].path).read_bytes(),
            )  # fmt: skip
            # The GCP provider marks an object's content secret: the mocks show it masked.
            _upload(emulator, bucket, rel.constraints_key, rel.constraints.encode())
            vm.run_vm(
                name,
                ["-v", f"{tmp}:/boot:ro", "-v", f"{shim}:/usr/local/bin/systemctl:ro",
                 "-v", f"{socket_dir}:{socket_dir}",
                 "-e", f"GCE_METADATA_HOST={meta.host}", "-e", f"GCE_METADATA_IP={meta.host}",
                 "-e", f"STORAGE_EMULATOR_HOST={emulator}",
                 "-e", f"DET_SECRETMANAGER_ENDPOINT={apis.url}",
                 "-e", f"DET_LOGGING_ENDPOINT={apis.url}"],
                "bash /boot/startup-script.sh && exec sleep infinity",
            )  # fmt: skip
            url = f"https://127.0.0.1:{port}"
            if not wait:
                yield Booted(
                    name, "", tmp / "master.crt", rel, index, apis, meta, token, emulator,
                    graph.outputs["master_yaml"], "", bucket, tmp, pg_server,
                )  # fmt: skip
                return
            get = tls.verified_get(tmp / "master.crt", tls.CERT_NAME)
            info = vm.wait_for_info(get, url, name)
            assert info["clusterName"] == CLUSTER
            shared = tmp / "shared"
            shared.mkdir()
            yield Booted(
                name, url, tmp / "master.crt", rel, index, apis, meta, token, emulator,
                graph.outputs["master_yaml"], info["clusterId"], bucket, shared, pg_server,
            )  # fmt: skip
    finally:
        vm.dump_and_remove(name, "/var/log/det-bootstrap.log /var/log/det-master.log")
        meta.stop()
        apis.stop()
        index.close()


@pytest.fixture(scope="module")
def gcp_master(
    pg_server: str, rel: release.Release, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Booted]:
    with _boot_master(pg_server, tmp_path_factory.mktemp("boot-gcp"), rel) as booted:
        yield booted


# First in the module: its VM is gone before the module's master boots. pip cannot reach its
# index, the likeliest real failure: the boot log in Cloud Logging, read by status's own code,
# says so while det is not installed yet (the shipper is the image's python3 and the standard
# library). The boot never reaches the database, which this test leaves alone.
def test_a_pip_failure_shows_in_status_within_a_minute(
    pg_server: str, rel: release.Release, tmp_path: Path
) -> None:
    dead_index = vm.dead_index()
    with _boot_master(pg_server, tmp_path, rel, index_url=dead_index, wait=False) as booted:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {booted.token}"

        def read_status() -> list[MachineLog]:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("DET_LOGGING_ENDPOINT", booted.apis.url)
                return bootlog.tail(session.post, PROJECT, "det-boot", CLUSTER, 200)

        vm.wait_for_pip_failure(read_status, dead_index, booted.container)


def test_master_boots_from_the_bucket_and_answers_over_https(gcp_master: Booted) -> None:
    b = gcp_master
    version = vm.sh(
        b.container,
        "/opt/det/bin/python3 -c 'import importlib.metadata as m; print(m.version(\"det-platform\"))'",
    )
    assert version.strip() == "0.1.0"
    assert vm.sh(b.container, "cat /opt/det/.det-wheel-sha256").startswith(b.rel.sha256 + ":gs://")
    assert b.index.asked_for("google-cloud-compute")
    assert not b.index.asked_for("det")
    # The secret was read with the service account's token; the key file is the root's only.
    assert any("versions/latest:access" in r for r in b.apis.requests)
    assert vm.sh(b.container, "stat -c %a /etc/det/master.env").strip() == "600"
    assert vm.sh(b.container, f"stat -c %a {tls.MASTER_KEY_PATH}").strip() == "600"
    boot_log = vm.sh(b.container, "cat /var/log/det-bootstrap.log")
    assert f"installed {b.rel.filename}" in boot_log
    plain = requests.get(b.url.replace("https://", "http://") + "/info", timeout=5)
    assert plain.status_code == 400
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(b.url + "/info", timeout=5, verify=vm.HOST_CA_BUNDLE)


def test_boot_log_reaches_cloud_logging(gcp_master: Booted) -> None:
    vm.poll(
        "the boot log in Cloud Logging",
        lambda: "det-master (re)started" in gcp_master.apis.logged_text(),
        90,
    )


def test_agent_boots_from_the_startup_script_and_runs_a_trial(gcp_master: Booted) -> None:
    """The compute pool's agent startup script, rendered by the master's own provider code from
    the master.yaml the program produced, boots an agent VM that runs the one trial."""
    import psycopg
    import yaml

    from det.master.provisioner import bootstrap
    from det.master.provisioner.config import parse_provider_config
    from det.master.provisioner.gcp import GcpProvider
    from det.master.provisioner.gcp_config import GcpProviderConfig

    b = gcp_master
    # The master.yaml on the VM is the program's, with the machine's address filled in.
    on_vm = vm.sh(b.container, "cat /etc/det/master.yaml")
    assert on_vm == b.master_yaml.replace(LOCAL_IP_PLACEHOLDER, "127.0.0.1")
    master_yaml = yaml.safe_load(on_vm)
    (pool,) = [p for p in master_yaml["resource_pools"] if p["pool_name"] == COMPUTE_POOL]
    config = parse_provider_config(pool["provider"])
    assert isinstance(config, GcpProviderConfig) and config.agent_install is not None
    assert config.master_url == b.url and config.master_cert_name == tls.CERT_NAME
    assert config.agent_install.wheel_url == f"gs://{b.bucket}/{b.rel.wheel_key}"
    # What the master reads when it builds the pool's provider (services.provisioning).
    cert_pem = vm.sh(b.container, f"cat {master_yaml['security']['tls']['cert']}")
    agent_token = vm.sh(b.container, f"cat {master_yaml['data_dir']}/agent_token").strip()
    # The master's provisioner issues a ticket per launch (services.provisioning.build_provider);
    # the test plays the launch, so it issues one in the master's database the same way.
    with psycopg.connect(b.pg, dbname="determined") as conn:
        ticket = enrollment.issue(conn, COMPUTE_POOL, 1, dt.datetime.now(dt.UTC))
    provider = GcpProvider.for_pool(
        config,
        cluster_id=b.cluster_id,
        pool=COMPUTE_POOL,
        master_url=b.url,
        agent_token=agent_token,
        extra_env=bootstrap.install_env(config.agent_install, cert_pem, config.master_cert_name),
        enroll=lambda count: ticket,
    )
    assert provider.startup_script_for is not None
    script = provider.startup_script_for(1)
    assert agent_token not in script
    assert script.startswith("#!/bin/bash") and "export DET_CLOUD=gcp" in script
    assert f"export DET_AGENT_WHEEL_URL={config.agent_install.wheel_url}" in script

    api = vm.MasterApi(b.url, b.cert_file, tls.CERT_NAME)
    api.login(PASSWORD)
    eid = api.create_example(b.shared / "checkpoints")
    instance = f"{config.name_prefix}boot0001"
    meta = FakeGceMetadata(instance_name=instance, project=PROJECT, ip="127.0.0.1")
    agent_email = f"det-{CLUSTER}-agent@{PROJECT}.iam.gserviceaccount.com"
    _service_account(meta, agent_email, b.token)
    meta.start()
    env = {
        # The overrides the master's startup script is run with: the metadata server (agent id,
        # preemption notice, the service account's token for gs://) and the bucket.
        "DET_GCE_METADATA_URL": meta.url,
        "GCE_METADATA_HOST": meta.host,
        "STORAGE_EMULATOR_HOST": b.emulator,
        "DET_LOGGING_ENDPOINT": b.apis.url,
        # The harness bundle's pure-Python copies of requests & co. come from the same index.
        "PIP_INDEX_URL": b.index.url,
    }
    try:
        with vm.agent_vm(script, b.shared, env, instance_id=instance) as agent:
            api.wait_completed(eid, 300)
            agents = {a["id"]: a for a in api.get("/api/v1/agents")["agents"]}
            assert instance in agents
            assert agents[instance]["resourcePools"] == [COMPUTE_POOL]
            # det's wheel came from the bucket with the service account's token, hash-checked;
            # the agent trusts exactly the master's certificate and watches for preemption.
            marker = vm.sh(agent, "cat /opt/det/venv/.det-wheel")
            assert marker.strip() == f"{b.rel.sha256}:{config.agent_install.wheel_url}"
            assert "instance/service-accounts/default/token" in " ".join(meta.requests)
            assert (b.shared / "master.crt").read_text() == cert_pem
            agent_yaml = yaml.safe_load(vm.sh(agent, "cat /etc/det/agent.yaml"))
            assert agent_yaml["agent_id"] == instance
            assert agent_yaml["master_cert_name"] == tls.CERT_NAME
            assert agent_yaml["preemption_notice"] == "gcp"
            assert any(
                p.startswith("/computeMetadata/v1/instance/preempted") for p in meta.requests
            )
            assert not b.index.asked_for("det")
            # The startup script held a one-time ticket, never the agent token; it is spent.
            api.check_enrolled_with_a_spent_ticket(agent, script, instance)

            # The agent ships its boot log and det-agent's own log to the cluster's log from
            # its first seconds (project and instance from the metadata server), labelled as
            # status reads them: status's own code shows the master's and the agent's tails,
            # each its own.
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {b.token}"

            seen: list[MachineLog] = []

            def agent_boot() -> list[str] | None:
                with pytest.MonkeyPatch.context() as mp:
                    mp.setenv("DET_LOGGING_ENDPOINT", b.apis.url)
                    machines = bootlog.tail(session.post, PROJECT, "det-boot", CLUSTER, 200)
                assert machines and machines[0].machine == f"det-master-{CLUSTER}"
                assert machines[0].role == "master"
                seen[:] = machines
                for m in machines:
                    if m.machine == instance and m.role == "agent":
                        boot_lines = m.lines("det-bootstrap.log")
                        agent_lines = m.lines("det-agent.log")
                        if any(f"agent id: {instance}" in x for x in boot_lines) and any(
                            "terminated (exit 0)" in x for x in agent_lines
                        ):
                            return boot_lines + agent_lines
                return None

            try:
                vm.poll("the agent's boot and agent logs in status", agent_boot, 60)
            except AssertionError:
                print("\n".join(line for m in seen for line in m.flat()[-40:]))
                raise
    finally:
        meta.stop()
