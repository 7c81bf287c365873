"""``up --mirror-images``: the mirror's names, the rewritten pool defaults, the registry
resources and who may pull (Pulumi's mocks), and the copy step's docker commands. What only a
real account proves is in docs/deploy.md."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
from typing import Any

import pytest
import yaml
from conftest import AWS, GCP

from det.deploy.aws import iam
from det.deploy.aws import image_mirror as aws_mirror
from det.deploy.aws import program as aws_program
from det.deploy.common import dryrun, gc_image, mirror
from det.deploy.common.errors import DeployError
from det.deploy.common.masteryaml import DEFAULT_CPU_ENV_IMAGE
from det.deploy.common.rollout import Login
from det.deploy.gcp import image_mirror as gcp_mirror
from det.deploy.gcp import program as gcp_program

ECR = "123456789012.dkr.ecr.us-west-2.amazonaws.com/det-c1"
AR = "us-west1-docker.pkg.dev/proj/det-c1-mirror"
GC_ECR = f"{ECR}/library/det-checkpoint-gc:py3.11"


@pytest.mark.parametrize(
    ("image", "path", "mirrored"),
    [
        ("determinedai/pytorch-ngc:0.38.1", "determinedai/pytorch-ngc",
         f"{ECR}/determinedai/pytorch-ngc:0.38.1"),
        ("docker.io/determinedai/pytorch-ngc:0.38.1", "determinedai/pytorch-ngc",
         f"{ECR}/determinedai/pytorch-ngc:0.38.1"),
        ("python:3.11", "library/python", f"{ECR}/library/python:3.11"),
        ("ubuntu", "library/ubuntu", f"{ECR}/library/ubuntu:latest"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvidia/pytorch", f"{ECR}/nvidia/pytorch:24.01-py3"),
        ("localhost:5000/team/task:v1", "team/task", f"{ECR}/team/task:v1"),
        ("team/task@sha256:" + "a" * 64, "team/task", f"{ECR}/team/task@sha256:" + "a" * 64),
    ],
)  # fmt: skip
def test_a_mirror_keeps_the_path_and_tag(image: str, path: str, mirrored: str) -> None:
    assert mirror.repository_path(image) == path
    assert mirror.mirrored(image, ECR) == mirrored


def test_the_pools_defaults_point_at_the_mirror() -> None:
    aws = dataclasses.replace(AWS, mirror_registry=ECR)
    assert aws.source_env_images == (DEFAULT_CPU_ENV_IMAGE,) * 2
    assert aws.env_images == (f"{ECR}/determinedai/pytorch-ngc:0.38.1",) * 2
    assert AWS.env_images == (DEFAULT_CPU_ENV_IMAGE,) * 2  # without the flag: Docker Hub
    gcp = dataclasses.replace(GCP, mirror_images=True)
    assert gcp.env_images == (f"{AR}/determinedai/pytorch-ngc:0.38.1",) * 2
    assert gcp_mirror.registry(gcp) == AR
    # The same image for both device types is copied once.
    assert mirror.plan(aws.source_env_images, ECR) == [
        (DEFAULT_CPU_ENV_IMAGE, f"{ECR}/determinedai/pytorch-ngc:0.38.1")
    ]


def _tcd(master_yaml: str) -> dict[str, Any]:
    return dict(yaml.safe_load(master_yaml)["task_container_defaults"])


def _images_in(master_yaml: str) -> dict[str, str]:
    return dict(_tcd(master_yaml)["image"])


def test_aws_mirror_repositories_let_the_agents_pull_and_nothing_else() -> None:
    cfg = dataclasses.replace(AWS, mirror_registry=ECR)
    graph = dryrun.render(lambda: aws_program.build(cfg), aws_program.MOCK_CALLS)
    repos = graph.of_type("aws:ecr/repository:Repository")
    # The task image and det's checkpoint-GC image, one repository each.
    assert sorted(r.inputs["name"] for r in repos) == [
        "det-c1/determinedai/pytorch-ngc",
        "det-c1/library/det-checkpoint-gc",
    ]
    for repo in repos:
        assert repo.inputs["imageTagMutability"] == "IMMUTABLE"
        assert repo.inputs["imageScanningConfiguration"] == {"scanOnPush": True}
    policies = graph.of_type("aws:ecr/repositoryPolicy:RepositoryPolicy")
    assert len(policies) == 2
    agent_role = next(r for r in graph.of_type("aws:iam/role:Role") if r.name.endswith("-agent"))
    for policy in policies:
        (statement,) = json.loads(policy.inputs["policy"])["Statement"]
        assert statement["Effect"] == "Allow"
        assert statement["Principal"] == {
            "AWS": f"arn:aws:iam:us-west-2:123456789012:{agent_role.name}"
        }
        assert sorted(statement["Action"]) == sorted(aws_mirror.PULL_ACTIONS)
        assert not any(a.startswith("ecr:") and a not in aws_mirror.PULL_ACTIONS
                       for a in statement["Action"])  # fmt: skip
    # The agents' own role policy grants no push anywhere.
    actions = [a for s in iam.agent_policy("arn:aws:s3:::b", "us-west-2", None)["Statement"]
               for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]  # fmt: skip
    assert not {"ecr:PutImage", "ecr:InitiateLayerUpload", "ecr:CompleteLayerUpload"} & set(actions)
    assert _images_in(graph.outputs["master_yaml"]) == {
        "cpu": f"{ECR}/determinedai/pytorch-ngc:0.38.1",
        "cuda": f"{ECR}/determinedai/pytorch-ngc:0.38.1",
    }
    assert graph.outputs["mirror_images"] == {
        DEFAULT_CPU_ENV_IMAGE: f"{ECR}/determinedai/pytorch-ngc:0.38.1",
        gc_image.IMAGE: GC_ECR,
    }
    assert _tcd(graph.outputs["master_yaml"])["checkpoint_gc_image"] == GC_ECR


def test_aws_without_the_flag_has_no_mirror(aws_graph: dryrun.Rendered) -> None:
    assert not aws_graph.of_type("aws:ecr/repository:Repository")
    assert "mirror_images" not in aws_graph.outputs
    assert _images_in(aws_graph.outputs["master_yaml"])["cpu"] == DEFAULT_CPU_ENV_IMAGE
    # det publishes no GC image: without a mirror or --checkpoint-gc-image, GC keeps the task
    # image (no key), rather than naming an image no agent could pull.
    assert "checkpoint_gc_image" not in _tcd(aws_graph.outputs["master_yaml"])


def test_aws_serverless_mirrors_too() -> None:
    cfg = dataclasses.replace(AWS, mirror_registry=ECR, master="serverless", tls=False)
    graph = dryrun.render(lambda: aws_program.build(cfg), aws_program.MOCK_CALLS)
    names = {r.inputs["name"] for r in graph.of_type("aws:ecr/repository:Repository")}
    assert "det-c1/determinedai/pytorch-ngc" in names
    assert "det-c1/library/det-checkpoint-gc" in names
    for policy in graph.of_type("aws:ecr/repositoryPolicy:RepositoryPolicy"):
        assert "-agent" in json.loads(policy.inputs["policy"])["Statement"][0]["Principal"]["AWS"]
    assert _tcd(graph.outputs["master_yaml"])["checkpoint_gc_image"] == GC_ECR


def test_gcp_mirror_repository_is_readable_by_the_agents_only() -> None:
    cfg = dataclasses.replace(GCP, mirror_images=True)
    graph = dryrun.render(lambda: gcp_program.build(cfg), gcp_program.MOCK_CALLS)
    (repo,) = graph.of_type("gcp:artifactregistry/repository:Repository")
    assert repo.inputs["repositoryId"] == "det-c1-mirror"
    assert repo.inputs["format"] == "DOCKER" and repo.inputs["location"] == "us-west1"
    members = graph.of_type("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember")
    (member,) = members
    assert member.inputs["role"] == gcp_mirror.READER_ROLE
    assert member.inputs["member"] == f"serviceAccount:{graph.outputs['agent_service_account']}"
    assert member.inputs["repository"] == "det-c1-mirror"
    assert _images_in(graph.outputs["master_yaml"])["cuda"] == (
        f"{AR}/determinedai/pytorch-ngc:0.38.1"
    )
    # One repository holds both; the GC image is mirrored and named for every pool.
    assert (
        graph.outputs["mirror_images"][gc_image.IMAGE] == f"{AR}/library/det-checkpoint-gc:py3.11"
    )
    assert _tcd(graph.outputs["master_yaml"])["checkpoint_gc_image"] == (
        f"{AR}/library/det-checkpoint-gc:py3.11"
    )


def test_gcp_without_the_flag_has_no_mirror(gcp_graph: dryrun.Rendered) -> None:
    assert not gcp_graph.of_type("gcp:artifactregistry/repository:Repository")
    assert _images_in(gcp_graph.outputs["master_yaml"])["cpu"] == DEFAULT_CPU_ENV_IMAGE
    assert "checkpoint_gc_image" not in _tcd(gcp_graph.outputs["master_yaml"])


MINE = "registry.example.com/ops/det-checkpoint-gc:py3.11"


def test_a_gc_image_of_the_deployers_is_named_as_given_or_mirrored() -> None:
    aws = dataclasses.replace(AWS, checkpoint_gc_image=MINE)
    graph = dryrun.render(lambda: aws_program.build(aws), aws_program.MOCK_CALLS)
    assert _tcd(graph.outputs["master_yaml"])["checkpoint_gc_image"] == MINE
    gcp = dataclasses.replace(GCP, checkpoint_gc_image=MINE)
    graph = dryrun.render(lambda: gcp_program.build(gcp), gcp_program.MOCK_CALLS)
    assert _tcd(graph.outputs["master_yaml"])["checkpoint_gc_image"] == MINE
    # With --mirror-images it is copied like the task images (pulled from its registry).
    mirrored = dataclasses.replace(aws, mirror_registry=ECR)
    assert mirrored.mirror_sources == (DEFAULT_CPU_ENV_IMAGE, DEFAULT_CPU_ENV_IMAGE, MINE)
    assert mirrored.gc_image == f"{ECR}/ops/det-checkpoint-gc:py3.11"


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_a_bad_gc_image_flag_is_one_line(cloud: str) -> None:
    cfg: Any = AWS if cloud == "aws" else GCP
    with pytest.raises(DeployError, match=r"^--checkpoint-gc-image: must be a Docker image"):
        dataclasses.replace(cfg, checkpoint_gc_image="Ops GC").validate()


def test_up_says_where_checkpoint_gc_runs() -> None:
    out = io.StringIO()
    gc_image.report(None, out)
    assert "Checkpoint GC runs in the task image (det publishes no GC image" in out.getvalue()
    out = io.StringIO()
    gc_image.report(GC_ECR, out)
    assert out.getvalue() == f"Checkpoint GC image: {GC_ECR}\n"


class _Docker:
    """Records the docker commands (the copy needs a registry account to run for real)."""

    def __init__(self, fail: str | None = None, present: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[list[str], str | None, str | None]] = []
        self.fail = fail
        self.present = present

    def __call__(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        env = kw.get("env") or {}
        self.calls.append((argv[1:], kw.get("input"), env.get("DOCKER_CONFIG")))
        code = 1 if self.fail and argv[1] == self.fail else 0
        if argv[1] == "manifest":  # not in the mirror yet, unless listed
            code = 0 if argv[-1] in self.present else 1
        return subprocess.CompletedProcess(
            argv, code, "", "denied: requested access" if code else ""
        )


def test_the_copy_logs_in_with_the_token_on_stdin_then_pulls_tags_and_pushes() -> None:
    docker = _Docker()
    pairs = [(DEFAULT_CPU_ENV_IMAGE, f"{ECR}/determinedai/pytorch-ngc:0.38.1")]
    out = io.StringIO()
    mirror.copy_images(pairs, Login("123456789012.dkr.ecr.us-west-2.amazonaws.com", "AWS", "tok"),
                       out, run_=docker)  # fmt: skip
    argvs = [c[0] for c in docker.calls]
    assert argvs == [
        ["login", "--username", "AWS", "--password-stdin",
         "123456789012.dkr.ecr.us-west-2.amazonaws.com"],
        ["manifest", "inspect", pairs[0][1]],
        ["pull", DEFAULT_CPU_ENV_IMAGE],
        ["tag", DEFAULT_CPU_ENV_IMAGE, pairs[0][1]],
        ["push", pairs[0][1]],
    ]  # fmt: skip
    assert docker.calls[0][1] == "tok" and all("tok" not in a for a in argvs)
    configs = {c[2] for c in docker.calls}
    assert len(configs) == 1 and None not in configs  # a throwaway config, never ~/.docker
    assert "Mirroring determinedai/pytorch-ngc:0.38.1" in out.getvalue()


def test_a_failed_push_names_the_step() -> None:
    pairs = [(DEFAULT_CPU_ENV_IMAGE, f"{ECR}/determinedai/pytorch-ngc:0.38.1")]
    with pytest.raises(DeployError, match=r"--mirror-images: docker push .*denied"):
        mirror.copy_images(pairs, Login("r", "u", "p"), io.StringIO(), run_=_Docker(fail="push"))


def test_an_image_already_mirrored_is_kept() -> None:
    # A second up --mirror-images: the mirror's tags are immutable, so nothing is pushed again.
    target = f"{ECR}/determinedai/pytorch-ngc:0.38.1"
    docker = _Docker(present=(target,))
    out = io.StringIO()
    mirror.copy_images([(DEFAULT_CPU_ENV_IMAGE, target)], Login("r", "u", "p"), out, run_=docker)
    assert [c[0][0] for c in docker.calls] == ["login", "manifest"]
    assert f"{target} is already mirrored." in out.getvalue()


def test_the_gc_image_is_built_here_when_missing_then_pushed_never_pulled() -> None:
    """det publishes no image: a missing GC image is built from Python's official image with
    wheels downloaded on this host, then tagged and pushed like a pulled one."""
    docker = _Docker(fail="image")  # `docker image inspect`: not in the local engine
    out = io.StringIO()
    mirror.copy_images([(gc_image.IMAGE, GC_ECR)], Login("r", "u", "p"), out, run_=docker)
    argvs = [c[0] for c in docker.calls]
    assert argvs[:3] == [
        ["login", "--username", "u", "--password-stdin", "r"],
        ["manifest", "inspect", GC_ECR],
        ["image", "inspect", gc_image.IMAGE],
    ]
    download = argvs[3]  # python -m pip download, on this host
    assert download[:4] == ["-m", "pip", "download", "--quiet"]
    assert {"--only-binary=:all:", "boto3", "google-cloud-storage", "cp311"} <= set(download)
    build = argvs[4]
    assert build[:5] == ["build", "--quiet", "-t", gc_image.IMAGE, "--build-arg"]
    assert build[5] == f"BASE_IMAGE={gc_image.DEFAULT_BASE}"
    assert argvs[5:] == [["tag", gc_image.IMAGE, GC_ECR], ["push", GC_ECR]]
    assert not any(a[0] == "pull" for a in argvs)
    assert f"Building the checkpoint-GC image {gc_image.IMAGE}" in out.getvalue()


def test_a_gc_image_in_the_local_engine_is_pushed_as_it_is() -> None:
    docker = _Docker()
    mirror.copy_images([(gc_image.IMAGE, GC_ECR)], Login("r", "u", "p"), io.StringIO(), run_=docker)
    assert [c[0][:2] for c in docker.calls] == [
        ["login", "--username"],
        ["manifest", "inspect"],
        ["image", "inspect"],
        ["tag", gc_image.IMAGE],
        ["push", GC_ECR],
    ]


def test_a_failed_gc_image_build_is_one_line() -> None:
    docker = _Docker(fail="build")

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        if argv[:3] == ["docker", "image", "inspect"]:  # not in the local engine
            return subprocess.CompletedProcess(argv, 1, "", "No such image")
        return docker(argv, **kw)

    with pytest.raises(
        DeployError, match=r"^cannot build the checkpoint-GC image .*: docker build: denied"
    ):
        mirror.copy_images(
            [(gc_image.IMAGE, GC_ECR)], Login("r", "u", "p"), io.StringIO(), run_=run
        )
    assert not any(c[0][0] in ("tag", "push") for c in docker.calls)
