"""The generated master.yaml is accepted by the master's own config and provider parsers."""

from __future__ import annotations

import dataclasses

import yaml
from conftest import AWS, GCP

from det.deploy.aws import master as aws_master
from det.deploy.common import masteryaml, userdata
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
    assert config.master_url == f"http://10.0.0.7:{AWS.port}"


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
    assert parsed[1].master_url == f"http://10.0.0.7:{AWS.port}"


def test_gcp_master_yaml_and_providers_parse():
    from det.master.config import parse_config
    from det.master.provisioner.config import parse_provider_config

    raw = _booted(gcp_master.master_yaml_config(GCP, GCP_RESOLVED, "m", "a"))
    config = parse_config(raw, env={})
    assert config.checkpoint_storage["type"] == "gcs"
    parsed = [parse_provider_config(p["provider"]) for p in raw["resource_pools"]]
    assert parsed[1].instance_type.gpu_num == GCP.gpu_num
    assert parsed[0].instance_type.gpu_num == 0


def test_priority_scheduler_with_preemption():
    cfg = dataclasses.replace(AWS, **{"scheduler_type": "priority", "preemption_enabled": True})
    raw = aws_master.master_yaml_config(cfg, AWS_RESOLVED)
    assert raw["resource_manager"]["scheduler"] == {"type": "priority", "preemption": True}


def test_bootstrap_replaces_the_placeholder_and_keeps_yaml_verbatim():
    yaml_text = masteryaml.render(aws_master.master_yaml_config(AWS, AWS_RESOLVED))
    script = userdata.render_bootstrap(
        master_yaml=yaml_text,
        package="det[master]",
        local_ip="echo 10.1.1.1",
        fetch_secret="cat /s",
    )
    assert script.startswith("#!/bin/bash\nset -euo pipefail")
    assert yaml_text in script  # quoted heredoc: no shell expansion inside
    assert f"s/{masteryaml.LOCAL_IP_PLACEHOLDER}/${{LOCAL_IP}}/g" in script
    assert "'det[master]'" in script


def test_bootstraps_are_valid_bash(tmp_path):
    import subprocess

    for script in (
        userdata.render_bootstrap(
            master_yaml=masteryaml.render(aws_master.master_yaml_config(AWS, AWS_RESOLVED)),
            package=AWS.det_package,
            local_ip="echo 1",
            fetch_secret=aws_master.fetch_secret_command("us-west-2", "arn:x"),
        ),
        userdata.render_bootstrap(
            master_yaml=masteryaml.render(
                gcp_master.master_yaml_config(GCP, GCP_RESOLVED, "m", "a")
            ),
            package=GCP.det_package,
            local_ip="echo 1",
            fetch_secret=gcp_master.fetch_secret_command("projects/p/secrets/s"),
        ),
    ):
        path = tmp_path / "boot.sh"
        path.write_text(script)
        result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr


def test_secret_json_becomes_the_master_env_file(tmp_path):
    """Run the bootstrap's secret step for real: JSON in, an env file the master reads out."""
    import subprocess
    import sys

    script = userdata.render_bootstrap(
        master_yaml="port: 1\n", package="x", local_ip="echo 1", fetch_secret="cat secret.json"
    )
    step = script[
        script.index("{fetch}".format(fetch="cat secret.json")) : script.index("umask 022")
    ]
    step = step.replace("/opt/det/bin/python3", sys.executable).replace(
        "/etc/det/master.env", str(tmp_path / "master.env")
    )
    (tmp_path / "secret.json").write_text('{"db_password": "d b", "initial_user_password": "u"}')
    subprocess.run(["bash", "-c", step], cwd=tmp_path, check=True)
    assert (
        tmp_path / "master.env"
    ).read_text() == "DET_DB_PASSWORD=d b\nDET_SECURITY_INITIAL_USER_PASSWORD=u\n"
