"""The generated master.yaml is accepted by the master's own config and provider parsers."""

from __future__ import annotations

import dataclasses

import yaml
from conftest import AWS, GCP

from det.deploy.aws import master as aws_master
from det.deploy.common import masteryaml
from det.deploy.gcp import master as gcp_master

AWS_RESOLVED = aws_master.Resolved(
    bucket="b",
    db_host="db.example",
    db_port=5432,
    agent_image_id="ami-1",
    agent_subnet_id="subnet-1",
    agent_sg_id="sg-1",
    agent_profile_arn="arn:aws:iam::1:instance-profile/a",
)
GCP_RESOLVED = gcp_master.Resolved(
    bucket="b",
    db_host="10.0.0.3",
    agent_email="a@p.iam.gserviceaccount.com",
    network_id="projects/p/global/networks/n",
    subnetwork_id="projects/p/regions/r/subnetworks/s",
)


def _booted(config: dict) -> dict:
    """What the bootstrap writes: the placeholder replaced by the machine's address."""
    text = masteryaml.render(config).replace(masteryaml.LOCAL_IP_PLACEHOLDER, "10.0.0.7")
    return yaml.safe_load(text)


def test_aws_master_yaml_is_a_valid_master_config():
    from det.master.config import parse_config

    config = parse_config(
        _booted(aws_master.master_yaml_config(AWS, AWS_RESOLVED)), env={"DET_DB_PASSWORD": "pw"}
    )
    assert config.db is not None and config.db.host == "db.example" and config.db.password == "pw"
    assert config.resource_manager.scheduler.type == "fair_share"
    assert [p.pool_name for p in config.resource_pools] == ["aux-pool", "compute-pool"]
    assert config.master_url == f"https://10.0.0.7:{AWS.port}"
    # Notebooks and TensorBoards open on the master's task origin, the port its firewall opens
    # beside the API's (test_deploy_aws_first_deploy); the master's default (0) is a port
    # the system picks, which no firewall rule could name.
    assert config.task_port == AWS.port + 1
    # Two front processes on the master's two vCPUs (masteryaml.VM_API_PROCESSES).
    assert config.api_processes == 2
    tls = config.security.tls
    assert tls is not None
    assert str(tls.cert) == "/etc/det/tls/master.crt" and str(tls.key) == "/etc/det/tls/master.key"


def test_aws_pool_providers_parse_with_the_provisioner_model():
    from det.master.provisioner.config import parse_provider_config

    raw = _booted(aws_master.master_yaml_config(AWS, AWS_RESOLVED))
    parsed = [parse_provider_config(p["provider"]) for p in raw["resource_pools"]]
    assert [p.instance_type for p in parsed] == [
        AWS.aux_agent_instance_type,
        AWS.compute_agent_instance_type,
    ]
    assert parsed[1].effective_subnet_id == "subnet-1" and parsed[1].spot is True
    assert parsed[1].tag_key == "det-cluster" and parsed[1].tag_value == "c1"
    assert parsed[1].master_url == f"https://10.0.0.7:{AWS.port}"
    assert parsed[1].master_cert_name == "det-master"
    install = parsed[1].agent_install
    assert install is not None and install.extras == "agent,aws"
    assert install.wheel_url.startswith("s3://b/det-release/det_platform-")
    assert install.constraints_url == "s3://b/det-release/constraints.txt"


def test_plain_http_has_no_tls_block():
    cfg = dataclasses.replace(AWS, tls=False, port=8080)
    raw = _booted(aws_master.master_yaml_config(cfg, AWS_RESOLVED))
    assert "security" not in raw
    assert raw["master_url"] == "http://10.0.0.7:8080"
    assert "master_cert_name" not in raw["resource_pools"][0]["provider"]


def test_gcp_master_yaml_and_providers_parse():
    from det.master.config import parse_config
    from det.master.provisioner.config import parse_provider_config

    raw = _booted(gcp_master.master_yaml_config(GCP, GCP_RESOLVED, "m", "a"))
    config = parse_config(raw, env={})
    assert config.checkpoint_storage["type"] == "gcs"
    assert config.task_port == GCP.port + 1  # what the master-api firewall rule opens
    parsed = [parse_provider_config(p["provider"]) for p in raw["resource_pools"]]
    assert parsed[1].instance_type.gpu_num == GCP.gpu_num
    assert parsed[0].instance_type.gpu_num == 0


def test_priority_scheduler_with_preemption():
    cfg = dataclasses.replace(AWS, **{"scheduler_type": "priority", "preemption_enabled": True})
    raw = aws_master.master_yaml_config(cfg, AWS_RESOLVED)
    assert raw["resource_manager"]["scheduler"] == {"type": "priority", "preemption": True}


def test_cloud_clusters_allow_non_admins_only_the_data_paths_they_set_up():
    from det.master.config import parse_config

    seen = []
    for raw in (
        _booted(aws_master.master_yaml_config(AWS, AWS_RESOLVED)),
        _booted(gcp_master.master_yaml_config(GCP, GCP_RESOLVED, "m", "a")),
        _booted(
            gcp_master.master_yaml_config(
                GCP,
                dataclasses.replace(GCP_RESOLVED, filestore_address="10.0.0.9:/share"),
                "m",
                "a",
            )
        ),
    ):
        config = parse_config(raw, env={"DET_DB_PASSWORD": "pw"})
        for pool in ("aux-pool", "compute-pool"):
            policy = config.task_container_policy_for(pool)
            assert policy.add_capabilities == [] and policy.devices == []
            mounts = config.task_container_defaults_for(pool).get("bind_mounts") or []
            assert policy.bind_mounts is not None
            assert [a.host_path for a in policy.bind_mounts] == [m["host_path"] for m in mounts]
            seen.append(len(mounts))
    assert seen == [0, 0, 0, 0, 1, 1]  # Filestore: its mount, in both pools


def test_a_serverless_master_serves_its_task_origin_on_the_platforms_second_route():
    from det.deploy.common import serverless
    from det.master.config import parse_config

    vm = aws_master.master_yaml_config(AWS, AWS_RESOLVED)
    assert vm["task_port"] == AWS.port + 1
    out = serverless.serverless_master_config(vm, "https://d.example", "https://t.example")
    assert out["task_port"] == serverless.TASK_CONTAINER_PORT != out["port"]
    assert out["task_origin"] == "https://t.example" and out["master_url"] == "https://d.example"
    config = parse_config(out, env={"DET_DB_PASSWORD": "pw"})
    assert config.task_origin == "https://t.example" and config.task_port == 8081
    # One front an instance, though the VM master it is made from has two: a service that has
    # room for more sets DET_API_PROCESSES from its Shape (serverless.Shape.env).
    assert vm["api_processes"] == 2 and config.api_processes == 1


def test_a_port_whose_task_origin_cannot_be_served_is_refused():
    import io

    from det.deploy import clouds

    for port in ("0", "65535", "21", "22"):
        err = io.StringIO()
        argv = ["aws", "up", "--master", "vm", "--cluster-id", "c1", "--keypair", "k"]
        assert clouds.run([*argv, "--dry-run", "--port", port], io.StringIO(), err) == 1
        assert f"--port {port}: must be 1-65534" in err.getvalue(), err.getvalue()
