"""The serverless rollout of ``up``: pass 1, push, migration, pass 2 (common.rollout).

Pulumi passes, the registry and Fargate cannot run here: the passes are a recorder, docker is a
recorder of its argv (its exit codes as docker gives them), and ECS is a stand-in that answers
RunTask/DescribeTasks as the ECS API documents them.
"""

from __future__ import annotations

import dataclasses
import io
import subprocess
from typing import Any

import pytest

from det.deploy.common import release, rollout
from det.deploy.common.boot import BootOptions
from det.deploy.common.errors import DeployError
from det.deploy.common.serverless import Rollout

NEW = "registry.example/det-c1/det-master:0.1.0-aaaaaaaaaaaa"
OLD = "registry.example/det-c1/det-master:0.1.0-bbbbbbbbbbbb"


def _steps(events: list[Any], migrate: bool = True, fail_migration: bool = False) -> rollout.Steps:
    def do_migrate(outputs: Any) -> None:
        events.append(("migrate", outputs["pass"]))
        if fail_migration:
            raise DeployError("the migration failed")

    return rollout.Steps(
        release=lambda: NEW,
        local_image=lambda: "det-master:aaaaaaaaaaaa",
        set_rollout=lambda r: events.append(("rollout", r)),
        login=lambda: rollout.Login("registry.example", "u", "p"),
        migrate=do_migrate if migrate else None,
    )


def _apply(events: list[Any]) -> Any:
    def apply() -> dict[str, Any]:
        events.append(("apply",))
        return {"pass": sum(1 for e in events if e == ("apply",))}

    return apply


def _push(events: list[Any]) -> Any:
    return lambda local, remote, login: events.append(("push", local, remote))


@pytest.mark.parametrize("previous", [None, OLD])
def test_service_rolls_only_after_the_push_and_the_migration(previous):
    events: list[Any] = []
    outputs = rollout.run(_steps(events), previous, _apply(events), io.StringIO(), _push(events))
    assert events == [
        ("rollout", Rollout(release=NEW, service=previous)),
        ("apply",),
        ("push", "det-master:aaaaaaaaaaaa", NEW),
        ("migrate", 1),
        ("rollout", Rollout(release=NEW, service=NEW)),
        ("apply",),
    ]
    assert outputs == {"pass": 2}


def test_the_image_already_running_takes_one_pass():
    events: list[Any] = []
    rollout.run(_steps(events), NEW, _apply(events), io.StringIO(), _push(events))
    assert events == [("rollout", Rollout(release=NEW, service=NEW)), ("apply",)]


def test_a_failed_migration_leaves_the_service_on_its_image():
    events: list[Any] = []
    with pytest.raises(DeployError, match="migration failed"):
        rollout.run(
            _steps(events, fail_migration=True), OLD, _apply(events), io.StringIO(), _push(events)
        )
    assert events.count(("apply",)) == 1
    assert ("rollout", Rollout(release=NEW, service=NEW)) not in events


def test_gcp_migrates_inside_pass_two():
    events: list[Any] = []
    rollout.run(_steps(events, migrate=False), None, _apply(events), io.StringIO(), _push(events))
    assert [e[0] for e in events] == ["rollout", "apply", "push", "rollout", "apply"]


class _Docker:
    def __init__(self, missing: bool = False) -> None:
        self.calls: list[tuple[list[str], str | None, dict[str, str] | None]] = []
        self.missing = missing

    def __call__(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((argv, kw.get("input"), kw.get("env")))
        code = 1 if self.missing and argv[1:3] == ["image", "inspect"] else 0
        err = "Error: No such image: det-master:aaaaaaaaaaaa" if code else ""
        return subprocess.CompletedProcess(argv, code, "", err)


def test_push_logs_in_with_a_throwaway_config_and_never_puts_the_token_in_argv():
    docker = _Docker()
    rollout.push_image(
        "det-master:aaaaaaaaaaaa", NEW, rollout.Login("r.example", "u", "tok"), docker
    )
    verbs = [argv[1] for argv, _, _ in docker.calls]
    assert verbs == ["image", "login", "tag", "push"]
    login_argv, stdin, env = docker.calls[1]
    assert "tok" not in login_argv and stdin == "tok" and "--password-stdin" in login_argv
    assert env is not None and env["DOCKER_CONFIG"] != ""
    assert docker.calls[3][0] == ["docker", "push", NEW]


def test_push_without_the_local_image_names_how_to_build_it():
    with pytest.raises(DeployError, match=r"infra/build-images.sh master"):
        rollout.push_image(
            "det-master:aaaaaaaaaaaa", NEW, rollout.Login("r", "u", "p"), _Docker(True)
        )


def test_the_local_image_is_named_by_the_built_wheel_or_refused_without_one():
    built = release.Release("det.whl", "0123456789abcdef", "", None)
    assert rollout.local_image(built) == "det-master:0123456789ab"
    with pytest.raises(DeployError, match="det's wheel was not built: nothing to push"):
        rollout.local_image(None)


class _Ecs:
    """RunTask and DescribeTasks as the ECS API answers them (a task PROVISIONING, then
    STOPPED with its container's exit code)."""

    def __init__(self, exit_code: int | None, start_failure: str | None = None) -> None:
        self.exit_code = exit_code
        self.start_failure = start_failure
        self.polls = 0
        self.run_args: dict[str, Any] = {}

    def run_task(self, **kw: Any) -> dict[str, Any]:
        self.run_args = kw
        if self.start_failure:
            return {"tasks": [], "failures": [{"reason": self.start_failure}]}
        return {"tasks": [{"taskArn": "arn:aws:ecs:us-west-2:1:task/c/abc"}], "failures": []}

    def describe_tasks(self, **kw: Any) -> dict[str, Any]:
        self.polls += 1
        if self.polls < 3:
            return {"tasks": [{"lastStatus": "PROVISIONING", "containers": [{}]}]}
        return {
            "tasks": [
                {
                    "lastStatus": "STOPPED",
                    "stoppedReason": "Essential container in task exited",
                    "containers": [{"name": "master", "exitCode": self.exit_code}],
                }
            ]
        }


OUTPUTS = {
    "ecs_cluster": "det-c1-master",
    "migration_task_definition": "arn:aws:ecs:us-west-2:1:task-definition/det-c1-master-migrate:3",
    "task_subnet_ids": ["subnet-1", "subnet-2"],
    "task_security_group_id": "sg-1",
    "log_group": "/det/c1",
}


def test_ecs_migration_runs_the_migration_task_in_the_tasks_network():
    ecs = _Ecs(0)
    rollout.run_ecs_migration(ecs, OUTPUTS, sleep=lambda s: None)
    assert ecs.run_args["taskDefinition"] == OUTPUTS["migration_task_definition"]
    network = ecs.run_args["networkConfiguration"]["awsvpcConfiguration"]
    assert network == {
        "subnets": ["subnet-1", "subnet-2"],
        "securityGroups": ["sg-1"],
        "assignPublicIp": "ENABLED",
    }
    assert ecs.polls == 3


@pytest.mark.parametrize(
    ("ecs", "message"),
    [
        (_Ecs(1), r"the migration failed \(exit \[1\].*/det/c1 under migrate/"),
        (_Ecs(None), r"the migration failed \(exit \[None\]"),
        (_Ecs(0, start_failure="RESOURCE:ENI"), "did not start: RESOURCE:ENI"),
    ],
)
def test_ecs_migration_failures_stop_up_with_one_line(ecs, message):
    with pytest.raises(DeployError, match=message):
        rollout.run_ecs_migration(ecs, OUTPUTS, sleep=lambda s: None)


def test_the_image_is_made_before_pass_one_and_a_failed_build_creates_nothing():
    events: list[Any] = []

    def ensure(local: str, out: Any) -> None:
        events.append(("ensure", local))

    steps = dataclasses.replace(_steps(events), ensure_image=ensure)
    rollout.run(steps, None, _apply(events), io.StringIO(), _push(events))
    assert events[:3] == [
        ("ensure", "det-master:aaaaaaaaaaaa"),
        ("rollout", Rollout(release=NEW, service=None)),
        ("apply",),
    ]

    def fail(local: str, out: Any) -> None:
        raise DeployError("building the master image failed: no Docker Hub")

    events.clear()
    with pytest.raises(DeployError, match="building the master image failed"):
        rollout.run(
            dataclasses.replace(_steps(events), ensure_image=fail),
            None,
            _apply(events),
            io.StringIO(),
            _push(events),
        )
    assert ("apply",) not in events  # pass 1 never ran: nothing billed


@dataclasses.dataclass(frozen=True)
class _Cfg:
    boot: Any
    rollout: Rollout | None = None


def test_a_clouds_steps_roll_the_config_it_holds_and_push_the_built_wheels_image():
    built = release.Release("det.whl", "c" * 64, "constraints.txt", None)
    current = {"cfg": _Cfg(boot=BootOptions(release=built))}
    seen: list[Any] = []

    def release_image(cfg: _Cfg) -> str:
        seen.append(("release", cfg.rollout))
        return NEW

    def login(cfg: _Cfg) -> rollout.Login:
        seen.append(("login", cfg.rollout))
        return rollout.Login("registry.example", "u", "p")

    steps = rollout.steps(current, release_image, login)
    assert steps.migrate is None
    assert steps.ensure_image is rollout.ensure_local_image
    events: list[Any] = []
    # No docker here: the image is taken as built.
    offline = dataclasses.replace(steps, ensure_image=None)
    rollout.run(offline, OLD, _apply(events), io.StringIO(), _push(events))
    # Each pass builds from the config the steps hold, with that pass's rollout set into it.
    assert current["cfg"].rollout == Rollout(release=NEW, service=NEW)
    assert seen == [("release", None), ("login", Rollout(release=NEW, service=OLD))]
    assert events[1] == ("push", f"det-master:{'c' * 12}", NEW)
