"""Names and values the real clouds refuse (documented limits, deploy.common.limits): every
name the programs build from the longest cluster id the CLI accepts, and the input the CLI
must refuse before anything is created. Pulumi's mocks accept anything, so these are checked
here, where they can fail."""

from __future__ import annotations

import dataclasses
import datetime
import json
import random
import string
import subprocess
from typing import Any

import pytest
from conftest import AWS

from det.deploy.aws import iam
from det.deploy.aws import master as aws_master
from det.deploy.aws import program as aws_program
from det.deploy.aws.config import AwsConfig
from det.deploy.common import boot, dryrun, limits, release, tls
from det.deploy.common.errors import DeployError
from det.deploy.common.registry import RegistryAuth
from det.deploy.gcp import program as gcp_program
from det.deploy.gcp.config import GcpConfig

# The longest ids each CLI accepts (32 and 35 characters).
AWS_ID = "a1b2c3d4e5f6-" + "x" * 18 + "z"
GCP_ID = "a1b2c3d4e5f6-" + "x" * 21 + "z"
HEX = "0123abc"  # what Pulumi's autonaming appends: 7 hexadecimal digits
_REL = release.Release(
    filename="det_platform-0.1.0-py3-none-any.whl",
    sha256="ab" * 32,
    constraints="x==1\n",
    path=None,
)
LONG_TAGS = (("k" * 128, "v" * 256), ("team", "ml platform/gpu = 1 @ us-west-2"))


def _autoname(logical: str) -> str:
    return f"{logical}-{HEX}"


def _aws_problems(graph: dryrun.Rendered) -> list[str]:
    problems: list[str | None] = []
    for r in graph.resources:
        i, name = r.inputs, r.name
        if r.type == "aws:iam/role:Role":
            problems.append(limits.iam_name(i.get("name") or _autoname(name), 64))
        elif r.type in ("aws:iam/instanceProfile:InstanceProfile", "aws:iam/rolePolicy:RolePolicy"):
            problems.append(limits.iam_name(i.get("name") or _autoname(name), 128))
        elif r.type == "aws:s3/bucket:Bucket":
            problems.append(limits.s3_bucket(i.get("bucket") or _autoname(name).lower()))
        elif r.type == "aws:rds/instance:Instance":
            problems.append(limits.rds_identifier(i.get("identifier") or name + HEX))
            snapshot = str(i.get("finalSnapshotIdentifier") or "")
            # The snapshot's suffix is a RandomId's 8 hex digits (unknown under the mocks).
            prefix = snapshot.rsplit("-", 1)[0]
            problems.append(limits.rds_identifier(f"{prefix}-{HEX}a", high=255))
        elif r.type == "aws:rds/subnetGroup:SubnetGroup":
            group = i.get("name") or _autoname(name)
            if group != group.lower() or len(group) > 255:
                problems.append(f"DB subnet group {group!r}: lower case, at most 255")
        elif r.type == "aws:secretsmanager/secret:Secret":
            problems.append(limits.secrets_manager_name(i.get("name") or _autoname(name)))
        elif r.type == "aws:cloudwatch/logGroup:LogGroup":
            problems.append(limits.log_group_name(i["name"]))
        elif r.type == "aws:ec2/securityGroup:SecurityGroup":
            sg = i.get("name") or _autoname(name)
            problems.append(limits.security_group_text("security group name", sg, name=True))
        for key, value in (i.get("tags") or {}).items():
            problems.append(limits.aws_tag(key, value))
    return [p for p in problems if p]


def test_every_aws_name_fits_for_the_longest_cluster_id():
    cfg = AwsConfig(cluster_id=AWS_ID, keypair="kp", spot=True, extra_tags=LONG_TAGS)
    cfg.validate()
    graph = dryrun.render(lambda: aws_program.build(cfg), aws_program.MOCK_CALLS)
    assert graph.of_type("aws:rds/instance:Instance")
    assert _aws_problems(graph) == []


def test_security_group_names_and_descriptions_use_only_the_allowed_characters():
    graph = dryrun.render(
        lambda: aws_program.build(AwsConfig(cluster_id="c1", keypair="kp", enable_ssh=True)),
        aws_program.MOCK_CALLS,
    )
    texts = [
        ("security group description", r.inputs["description"])
        for r in graph.of_type("aws:ec2/securityGroup:SecurityGroup")
    ] + [
        ("security group rule description", r.inputs["description"])
        for r in graph.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    ]
    assert len(texts) >= 8
    problems = [limits.security_group_text(what, text) for what, text in texts]
    assert [p for p in problems if p] == []


def test_the_limit_checks_catch_what_the_clouds_refuse():
    # The checks themselves, on names the clouds' documentation refuses.
    assert limits.rds_identifier("det-MyCluster-db0123abc")
    assert limits.rds_identifier("det-c--db0123abc")
    assert limits.rds_identifier("det-c-final-")
    assert limits.s3_bucket("det-My-bucket")
    assert limits.iam_name("det-" + "a" * 61, 64)
    assert limits.security_group_text("rule description", "master to agents' ports")
    assert limits.gcs_bucket("det-google-checkpoints-0123abc")
    assert limits.gcs_bucket("det-g00gle-x")
    assert limits.gce_name("det-c1-")
    assert limits.gcp_service_account_id("det-" + "a" * 27)
    assert (
        limits.aws_tag("aws:cost", "x")
        and limits.aws_tag("k", "a,b")
        and limits.aws_tag("k", "v" * 257)
    )
    assert limits.gcp_label("Team", "x") and limits.gcp_label("team", "ML")
    assert limits.gcp_label("t", "x" * 64)
    assert not limits.aws_tag("k" * 128, "v" * 256) and not limits.gcp_label("team", "ml-1_a")


@pytest.mark.parametrize(
    "cluster_id", ["MyCluster", "foo-", "a--b", "a" * 33, "1abc", "ab_c"], ids=repr
)
def test_aws_cluster_ids_a_real_cloud_refuses_are_refused(cluster_id):
    with pytest.raises(DeployError, match="--cluster-id"):
        AwsConfig(cluster_id=cluster_id, keypair="kp").validate()


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ((("aws:owner", "me"),), "reserved"),
        ((("owner", "a,b"),), "only letters"),
        ((("k" * 129, "v"),), "1-128"),
        ((("k", "v" * 257),), "at most 256"),
        (tuple((f"k{i}", "v") for i in range(44)), "at most 43 tags"),
    ],
)
def test_tags_aws_refuses_are_refused(tags, message):
    with pytest.raises(DeployError, match=message):
        AwsConfig(cluster_id="c1", keypair="kp", extra_tags=tags).validate()


@pytest.mark.parametrize("size", [10, 19, 65537])
def test_db_size_outside_gp3_limits_is_refused(size):
    with pytest.raises(DeployError, match="--db-size"):
        AwsConfig(cluster_id="c1", keypair="kp", db_size=size).validate()


def _gcp_problems(graph: dryrun.Rendered, project: str) -> list[str]:
    problems: list[str | None] = []
    for r in graph.resources:
        i: dict[str, Any] = r.inputs
        if r.type in (
            "gcp:compute/network:Network",
            "gcp:compute/subnetwork:Subnetwork",
            "gcp:compute/firewall:Firewall",
            "gcp:compute/instance:Instance",
            "gcp:compute/address:Address",
            "gcp:compute/globalAddress:GlobalAddress",
        ):
            problems.append(limits.gce_name(i.get("name") or _autoname(r.name)))
        elif r.type == "gcp:storage/bucket:Bucket":
            problems.append(limits.gcs_bucket(i.get("name") or _autoname(r.name)))
        elif r.type == "gcp:serviceaccount/account:Account":
            problems.append(limits.gcp_service_account_id(i["accountId"]))
        elif r.type == "gcp:secretmanager/secret:Secret":
            problems.append(limits.secret_manager_id(i["secretId"]))
        elif r.type == "gcp:sql/databaseInstance:DatabaseInstance":
            problems.append(limits.cloud_sql_instance(i.get("name") or _autoname(r.name), project))
        for key, value in (i.get("labels") or {}).items():
            problems.append(limits.gcp_label(key, value))
    return [p for p in problems if p]


def test_every_gcp_name_fits_for_the_longest_cluster_id():
    project = "p" * 30  # project ids have at most 30 characters
    cfg = GcpConfig(
        cluster_id=GCP_ID,
        project_id=project,
        filestore=True,
        labels=(("k" * 63, "v" * 63), ("team", "ml-platform_1")),
    )
    cfg.validate()
    graph = dryrun.render(lambda: gcp_program.build(cfg), gcp_program.MOCK_CALLS)
    assert graph.of_type("gcp:sql/databaseInstance:DatabaseInstance")
    assert _gcp_problems(graph, project) == []


def test_cloud_sql_instance_name_is_left_to_autonaming():
    # A deleted Cloud SQL instance's name stays taken for up to a week: a fixed name would make
    # `down` then `up` of the same cluster fail. The provider's autoname adds a random suffix.
    graph = dryrun.render(
        lambda: gcp_program.build(GcpConfig(cluster_id="c1", project_id="p")),
        gcp_program.MOCK_CALLS,
    )
    (sql,) = graph.of_type("gcp:sql/databaseInstance:DatabaseInstance")
    assert "name" not in sql.inputs


@pytest.mark.parametrize("cluster_id", ["google-ml", "my-g00gle", "foo-", "a" * 36], ids=repr)
def test_gcp_cluster_ids_a_real_cloud_refuses_are_refused(cluster_id):
    with pytest.raises(DeployError, match="--cluster-id"):
        GcpConfig(cluster_id=cluster_id, project_id="p").validate()


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ((("Team", "x"),), "the key"),
        ((("team", "ML"),), "the value"),
        ((("team", "x" * 64),), "the value"),
        (tuple((f"k{i}", "v") for i in range(61)), "at most 60 labels"),
    ],
)
def test_labels_gcp_refuses_are_refused(labels, message):
    with pytest.raises(DeployError, match=message):
        dataclasses.replace(GcpConfig(cluster_id="c1", project_id="p"), labels=labels).validate()


def _random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


def _longest_aws(tags: tuple[tuple[str, str], ...]) -> AwsConfig:
    """Every option that ends up in the master's user data, each as long as realistic."""
    rel = release.Release(
        filename="det_platform-0.38.1.dev123+g0123456789ab-py3-none-any.whl",
        sha256="ab" * 32,
        constraints="x==1\n",
        path=None,
    )
    return AwsConfig(
        cluster_id=AWS_ID,
        keypair="k" * 255,
        region="ap-southeast-4",
        spot=True,
        spot_max_price="12.3456",
        scheduler_type="priority",
        preemption_enabled=True,
        registry=RegistryAuth(
            server="123456789012.dkr.ecr.ap-southeast-4.amazonaws.com", username="u" * 64
        ),
        cpu_env_image="123456789012.dkr.ecr.ap-southeast-4.amazonaws.com/ml/pytorch-cpu:"
        "2.5.1-py3.11-ubuntu22.04-2025-01-01",
        gpu_env_image="123456789012.dkr.ecr.ap-southeast-4.amazonaws.com/ml/pytorch-cuda:"
        "2.5.1-cuda12.4-py3.11-ubuntu22.04-2025-01-01",
        boot=boot.BootOptions(
            release=rel,
            package_index="https://pypi.example.com/artifactory/api/pypi/pypi-remote/simple",
        ),
        vpc_id="vpc-0123456789abcdef0",
        public_subnet_ids=("subnet-0123456789abcdef0",),
        private_subnet_ids=("subnet-0123456789abcdef1", "subnet-0123456789abcdef2"),
        agent_subnet_id="subnet-0123456789abcdef3",
        extra_tags=tags,
    )


def test_master_user_data_fits_ec2s_16_kib_with_the_longest_realistic_inputs():
    rng = random.Random(7)
    tags = tuple((f"k{i}-" + _random_text(rng, 40), _random_text(rng, 100)) for i in range(10))
    cfg = _longest_aws(tags)
    cfg.validate()
    graph = dryrun.render(lambda: aws_program.build(cfg), aws_program.MOCK_CALLS)
    (master,) = graph.of_type("aws:ec2/instance:Instance")
    assert len(master.inputs["userData"].encode()) <= limits.EC2_USER_DATA_MAX
    assert aws_master.check_user_data_size(cfg) <= limits.EC2_USER_DATA_MAX


def test_master_user_data_over_16_kib_is_refused_before_anything_is_created():
    rng = random.Random(7)
    tags = tuple((f"k{i:02d}" + _random_text(rng, 125), _random_text(rng, 256)) for i in range(43))
    cfg = _longest_aws(tags)
    cfg.validate()  # each tag is valid; together they do not fit
    with pytest.raises(DeployError, match=r"user data is \d+ bytes, above EC2's limit of 16384"):
        aws_master.check_user_data_size(cfg)


def test_compressed_master_yaml_is_written_back_by_the_boot_script(tmp_path):
    text = "cluster_name: c1\nresource_pools:\n" + "- pool_name: x\n  provider: {a: 1}\n" * 200
    script = aws_master.user_data(
        dataclasses.replace(AWS, boot=boot.BootOptions(release=_REL)), text, "arn:x", "b", None
    )
    start = script.index("base64 -d > /etc/det/master.yaml.tmpl.gz")
    end = script.index("> /etc/det/master.yaml.tmpl\n", start) + len(
        "> /etc/det/master.yaml.tmpl\n"
    )
    assert end - start < len(text) / 10  # the repeated pools cost almost nothing
    snippet = script[start:end].replace("/etc/det/", f"{tmp_path}/")
    subprocess.run(["bash", "-euo", "pipefail", "-c", snippet], check=True)
    assert (tmp_path / "master.yaml.tmpl").read_text() == text


def _rsa_chain(links: int) -> tls.TlsMaterial:
    """A certificate chain as an organisation's CA issues it: RSA 4096, several links."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=4096)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "det-master.ml.example.com")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return tls.TlsMaterial(cert_pem=pem * links, key_pem=key_pem)


def test_agent_user_data_with_the_cluster_certificate_fits_or_up_refuses_it():
    opts = boot.BootOptions(
        release=_REL, package_index="https://pypi.example.com/api/pypi/pypi-remote/simple"
    )
    generated = dataclasses.replace(opts, tls=tls.generate())
    assert boot.check_agent_user_data(generated, "s3", "agent,aws", 8443) <= 16384
    assert boot.check_agent_user_data(generated, "gs", "agent,gcp", 8443) <= 16384
    chain = dataclasses.replace(opts, tls=_rsa_chain(3))
    with pytest.raises(DeployError, match=r"--master-tls-cert is \d+ bytes"):
        boot.check_agent_user_data(chain, "s3", "agent,aws", 8443)
    # A GCE metadata value may hold 256 KiB: the same chain is fine on GCP.
    assert boot.check_agent_user_data(chain, "gs", "agent,gcp", 8443) > 16384


def test_gcp_master_startup_script_fits_gce_metadata():
    cfg = GcpConfig(
        cluster_id=GCP_ID,
        project_id="p" * 30,
        filestore=True,
        registry=RegistryAuth(server="us-docker.pkg.dev", username="u" * 64),
        boot=boot.BootOptions(release=_REL, package_index="https://pypi.example.com/simple"),
    )
    graph = dryrun.render(lambda: gcp_program.build(cfg), gcp_program.MOCK_CALLS)
    (master,) = [
        r
        for r in graph.of_type("gcp:compute/instance:Instance")
        if "metadataStartupScript" in r.inputs
    ]
    size = len(master.inputs["metadataStartupScript"].encode())
    assert size <= limits.GCE_METADATA_VALUE_MAX and size <= limits.GCE_METADATA_TOTAL_MAX


def test_inline_role_policies_fit_iams_10240_characters_for_the_longest_inputs():
    # IAM: a role's inline policies together at most 10,240 characters (whitespace not counted).
    region = "ap-southeast-4"
    logs = iam.log_group_arn(region, f"/det/{AWS_ID}")
    bucket = "arn:aws:s3:::" + "b" * 63
    master = iam.master_policy(
        cluster_id=AWS_ID,
        region=region,
        bucket_arn=bucket,
        agent_role_arn="arn:aws:iam::123456789012:role/" + "r" * 64,
        agent_subnet_arn=f"arn:aws:ec2:{region}:*:subnet/subnet-0123456789abcdef0",
        agent_sg_arn=f"arn:aws:ec2:{region}:*:security-group/sg-0123456789abcdef0",
        secret_arn=f"arn:aws:secretsmanager:{region}:123456789012:secret:{'s' * 60}-AbCdEf",
        keypair="k" * 255,
        log_group_arn=logs,
    )
    agent = iam.agent_policy(bucket, region, logs)
    for policy in (master, agent):
        assert len(json.dumps(policy, separators=(",", ":"))) <= 10240
