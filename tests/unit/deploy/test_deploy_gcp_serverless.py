"""The GCP cluster with a serverless master (Cloud Run), as the Pulumi engine would receive it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml
from conftest import GCP

from det.common.ports import TASK_SERVICE_PORTS
from det.deploy.common import dryrun
from det.deploy.common import serverless as sl
from det.deploy.gcp import program
from det.deploy.gcp import serverless as gsl
from det.master.config import parse_config

SERVERLESS = dataclasses.replace(GCP, master="serverless", db_tier="db-f1-micro", filestore=False)
SERVICE = "gcp:cloudrunv2/service:Service"
JOB = "gcp:cloudrunv2/job:Job"
PRIMITIVE = {"roles/owner", "roles/editor", "roles/viewer"}


@pytest.fixture(scope="module")
def graph() -> dryrun.Rendered:
    return dryrun.render(lambda: program.build(SERVERLESS), program.MOCK_CALLS)


def _container(inputs: dict[str, Any]) -> dict[str, Any]:
    template = inputs["template"]
    template = template.get("template", template)  # a job nests its task template
    (container,) = template["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueSource")) for e in container["envs"]}


def _service(graph: dryrun.Rendered, name: str) -> dict[str, Any]:
    (found,) = [r.inputs for r in graph.of_type(SERVICE) if r.inputs["name"] == name]
    return found


def _api(graph: dryrun.Rendered) -> dict[str, Any]:
    return _service(graph, "det-c1")


def _tasks(graph: dryrun.Rendered) -> dict[str, Any]:
    return _service(graph, "det-c1-tasks")


def test_service_runs_the_release_image_from_the_clusters_registry(graph, one):
    repo = one(graph, "gcp:artifactregistry/repository:Repository")
    assert repo["format"] == "DOCKER" and repo["repositoryId"] == "det-c1"
    image = _container(_api(graph))["image"]
    assert image == gsl.release_image(SERVERLESS)
    assert image.startswith("us-west1-docker.pkg.dev/proj/det-c1/det-master:")
    assert graph.outputs["master_image"] == image


def test_service_scales_to_zero_keeps_cpu_and_allows_long_requests(graph, one):
    service = _api(graph)
    template = service["template"]
    assert template["scaling"]["minInstanceCount"] == 0
    assert template["scaling"]["maxInstanceCount"] == gsl.API_SHAPE.instances
    assert template["timeout"] == "3600s"  # Cloud Run's maximum
    resources = _container(service)["resources"]
    assert resources["cpuIdle"] is False  # instance-based billing: the loop runs between requests
    assert _container(service)["ports"]["containerPort"] == sl.CONTAINER_PORT
    assert service["ingress"] == "INGRESS_TRAFFIC_ALL"


def test_secrets_come_from_secret_manager_and_only_the_master_reads_them(graph):
    env = _env(_container(_api(graph)))
    secret_ids = {r.inputs["secretId"] for r in graph.of_type("gcp:secretmanager/secret:Secret")}
    for var in (sl.DB_PASSWORD_ENV, sl.AGENT_TOKEN_ENV, sl.ADMIN_PASSWORD_ENV):
        ref = env[var]["secretKeyRef"]
        assert ref["secret"] in secret_ids and ref["version"] == "latest"
    for version in graph.of_type("gcp:secretmanager/secretVersion:SecretVersion"):
        assert version.inputs["secretData"] == dryrun.SECRET
    grants = graph.of_type("gcp:secretmanager/secretIamMember:SecretIamMember")
    # One grant on each of those secrets (the mocks' id of a resource is "<name>-id").
    secrets = graph.of_type("gcp:secretmanager/secret:Secret")
    assert sorted(g.inputs["secretId"] for g in grants) == sorted(f"{s.name}-id" for s in secrets)
    for grant in grants:
        assert grant.inputs["role"] == "roles/secretmanager.secretAccessor"
        assert grant.inputs["member"] == "serviceAccount:det-c1-m@proj.iam.gserviceaccount.com"
    project_roles = {r.inputs["role"] for r in graph.of_type("gcp:projects/iAMMember:IAMMember")}
    assert not any("secretmanager" in role for role in project_roles)
    # The config document in the environment carries no secret.
    assert "password" not in str(env[sl.CONFIG_ENV]).replace("ssl_mode", "")


def test_network_path_to_cloud_sql_and_agents_goes_through_the_cluster_subnet(graph, one):
    vpc = _api(graph)["template"]["vpcAccess"]
    assert vpc["egress"] == "PRIVATE_RANGES_ONLY"
    (nic,) = vpc["networkInterfaces"]
    assert nic["subnetwork"] == "det-c1-id" and nic["tags"] == ["det-c1-master"]
    sql = one(graph, "gcp:sql/databaseInstance:DatabaseInstance")
    ip = sql["settings"]["ipConfiguration"]
    assert ip["ipv4Enabled"] is False and not ip.get("authorizedNetworks")  # no public database
    assert ip["privateNetwork"] == "det-c1-id"
    assert sql["settings"]["tier"] == "db-f1-micro"
    config = yaml.safe_load(graph.outputs["master_yaml"])
    assert config["db"]["host"] == "10.200.0.3"  # Cloud SQL's private IP (the mocks')
    # The task proxy: from the subnet (the master's Direct VPC egress addresses) to the agents.
    rule = next(
        r.inputs
        for r in graph.of_type("gcp:compute/firewall:Firewall")
        if r.name.endswith("internal-agents")
    )
    assert rule["sourceRanges"] == [SERVERLESS.subnet_cidr]
    assert rule["targetTags"] == ["det-c1-agent"]
    (tcp,) = [a for a in rule["allows"] if a["protocol"] == "tcp"]
    lo, hi = (int(p) for p in tcp["ports"][0].split("-"))
    assert lo <= TASK_SERVICE_PORTS[0] and TASK_SERVICE_PORTS[-1] <= hi


def test_master_config_uses_the_public_url_without_a_pinned_certificate(graph):
    config = yaml.safe_load(graph.outputs["master_yaml"])
    url = "https://det-c1-123456789012.us-west1.run.app"
    assert graph.outputs["master_url"] == url
    assert config["master_url"] == url and config["port"] == sl.CONTAINER_PORT
    assert "security" not in config  # TLS is the platform's
    for pool in config["resource_pools"]:
        assert pool["provider"]["master_url"] == url
        assert "master_cert_name" not in pool["provider"]
    parsed = parse_config(config, env={"DET_DB_PASSWORD": "x"})  # the master accepts it
    assert parsed.db_pool_size == sl.DB_POOL_SIZE


def _rendered_shapes(graph: dryrun.Rendered) -> dict[str, sl.Shape]:
    """Each service's processes as its rendered environment sets them (the master's own
    parsing of its config and ``DET_*`` overrides) and its most instances."""
    shapes = {}
    for role, service in (("api", _api(graph)), ("tasks", _tasks(graph))):
        env = {k: v for k, v in _env(_container(service)).items() if isinstance(v, str)}
        parsed = parse_config(yaml.safe_load(env.pop(sl.CONFIG_ENV)), env=env)
        shapes[role] = sl.Shape(
            instances=service["template"]["scaling"]["maxInstanceCount"],
            pool=parsed.db_pool_size,
            user_processes=parsed.user_api_processes,
            loops=parsed.run_loops,
            fronts=parsed.api_processes,
        )
    return shapes


def test_the_services_processes_and_the_migration_fit_the_smallest_databases_connections(graph):
    """db-f1-micro (the default tier) allows 22 connections to det's user; the API service at
    its most instances, the tasks service and the migration job must fit together (one
    instance's count is measured against its Shape in
    tests/integration/test_serverless_connections.py)."""
    shapes = _rendered_shapes(graph)
    assert shapes == {"api": gsl.API_SHAPE, "tasks": gsl.TASKS_SHAPE}
    total = sum(s.connections() for s in shapes.values()) + sl.MIGRATION_CONNECTIONS
    assert total <= gsl.sql_connections("db-f1-micro") == gsl.SMALL_DB_CONNECTIONS == 22, total
    # What the services ran with before (2 instances of a front and 2 user processes with 5
    # connections each, beside the tasks service) would not, nor would a second front.
    before = sl.Shape(instances=2, pool=5, user_processes=2, loops=True)
    assert before.connections() + gsl.TASKS_SHAPE.connections() > gsl.SMALL_DB_CONNECTIONS
    two = dataclasses.replace(gsl.API_SHAPE, fronts=2)
    assert two.connections() + gsl.TASKS_SHAPE.connections() + 1 > gsl.SMALL_DB_CONNECTIONS


def test_a_larger_tier_gets_a_second_front_within_its_connections():
    """On db-custom-1-3840 (100 connections, 97 for det's user) the API service runs two front
    processes, and all of it fits twice over (a rollout's overlap); db-g1-small (47) keeps one,
    with which it fits twice over too, and would not with two."""
    cfg = dataclasses.replace(SERVERLESS, db_tier="db-custom-1-3840")
    shapes = _rendered_shapes(dryrun.render(lambda: program.build(cfg), program.MOCK_CALLS))
    assert shapes["api"] == dataclasses.replace(gsl.API_SHAPE, fronts=2)
    assert shapes["tasks"] == gsl.TASKS_SHAPE
    services = sum(s.connections() for s in shapes.values())
    assert 2 * services + sl.MIGRATION_CONNECTIONS <= gsl.sql_connections(cfg.db_tier) == 97
    assert gsl.api_shape("db-g1-small") == gsl.API_SHAPE
    one = gsl.API_SHAPE.connections() + gsl.TASKS_SHAPE.connections()
    assert 2 * one + sl.MIGRATION_CONNECTIONS <= gsl.sql_connections("db-g1-small") == 47
    assert 2 * (services - one) + 2 * one + 1 > 47


def test_provisioner_may_only_touch_the_clusters_agents(graph):
    bindings = [
        r.inputs for r in graph.resources if r.type.endswith("IAMMember") or "Iam" in r.type
    ]
    assert not {b.get("role") for b in bindings} & PRIMITIVE
    (provisioner,) = [
        r.inputs
        for r in graph.of_type("gcp:projects/iAMMember:IAMMember")
        if r.name.endswith("master-provisioner")
    ]
    expression = provisioner["condition"]["expression"]
    assert '.startsWith("det-agent-c1-")' in expression
    assert "compute.googleapis.com/Instance" in expression
    project_roles = {
        r.inputs["role"]
        for r in graph.of_type("gcp:projects/iAMMember:IAMMember")
        if r.inputs["member"].startswith("serviceAccount:det-c1-m@")
    }
    assert project_roles == {"roles/logging.logWriter", provisioner["role"]}


def test_wakeups_go_to_one_queue_the_master_alone_may_enqueue_on(graph, one):
    queue = one(graph, "gcp:cloudtasks/queue:Queue")
    assert queue["location"] == "us-west1"
    enqueuer = one(graph, "gcp:cloudtasks/queueIamMember:QueueIamMember")
    assert enqueuer["role"] == "roles/cloudtasks.enqueuer"
    assert enqueuer["member"] == "serviceAccount:det-c1-m@proj.iam.gserviceaccount.com"
    env = _env(_container(_api(graph)))
    assert env[sl.WAKEUPS_TYPE_ENV] == "cloud_tasks"
    assert env[sl.WAKEUPS_QUEUE_ENV].startswith("projects/proj/locations/us-west1/queues/")
    # The service never migrates and ends long requests before Cloud Run's limit.
    assert env[sl.MIGRATE_ON_START_ENV] == "false"
    assert env[sl.REQUEST_LIMIT_ENV] == "3600"


def test_migration_job_runs_to_completion_before_the_service_rolls(graph, one):
    job = one(graph, JOB)
    container = _container(job)
    assert container["args"] == list(sl.MIGRATE_ARGS) and not container.get("commands")
    assert container["image"] == _container(_api(graph))["image"]
    token = gsl.execution_token(container["image"])
    assert job["runExecutionToken"] == token  # Pulumi runs it and waits for completion
    # The service's revision carries the job's output: it cannot be created before the job.
    annotations = _api(graph)["template"]["annotations"]
    assert annotations[gsl.MIGRATED_ANNOTATION] == token
    assert [r.type for r in graph.resources].index(JOB) < [r.type for r in graph.resources].index(
        SERVICE
    )
    # The migration reads the database password, no other secret; the service never migrates.
    job_env = _env(container)
    assert set(job_env) == {sl.CONFIG_ENV, sl.DB_PASSWORD_ENV}
    assert "migrate" not in str(_container(_api(graph)).get("args"))


def test_first_pass_creates_the_registry_but_no_service(one):
    first = dataclasses.replace(
        SERVERLESS, rollout=sl.Rollout(release=gsl.release_image(SERVERLESS), service=None)
    )
    graph = dryrun.render(lambda: program.build(first), program.MOCK_CALLS)
    assert graph.of_type("gcp:artifactregistry/repository:Repository")
    assert not graph.of_type(SERVICE) and not graph.of_type(JOB)
    assert graph.outputs["master_image"] is None


def test_vm_master_has_no_serverless_parts(gcp_graph):
    assert not gcp_graph.of_type(SERVICE) and not gcp_graph.of_type(JOB)
    (provisioner,) = [
        r.inputs
        for r in gcp_graph.of_type("gcp:projects/iAMMember:IAMMember")
        if r.name.endswith("master-provisioner")
    ]
    assert not provisioner.get("condition")


def test_the_master_accepts_the_services_environment(graph, one):
    env = {k: v for k, v in _env(_container(_api(graph))).items() if isinstance(v, str)}
    config = parse_config(yaml.safe_load(env.pop(sl.CONFIG_ENV)), env=env)
    assert (
        config.wakeups.type == "cloud_tasks" and config.wakeups.queue == env[sl.WAKEUPS_QUEUE_ENV]
    )
    assert config.migrate_on_start is False and config.request_time_limit_seconds == 3600


TASK_URL = "https://det-c1-tasks-123456789012.us-west1.run.app"


def test_the_task_origin_is_a_service_of_its_own_on_its_deterministic_url(graph):
    assert {r.inputs["name"] for r in graph.of_type(SERVICE)} == {"det-c1", "det-c1-tasks"}
    config = yaml.safe_load(graph.outputs["master_yaml"])
    assert config["task_origin"] == TASK_URL == graph.outputs["task_url"]
    assert config["task_port"] == sl.TASK_CONTAINER_PORT
    assert config["master_url"] != config["task_origin"]
    tasks, api = _tasks(graph), _api(graph)
    # Cloud Run routes the tasks service's requests to the master's task listener only (the
    # API's port is never a container port of it); the API service's to the API's port.
    assert _container(tasks)["ports"]["containerPort"] == sl.TASK_CONTAINER_PORT
    assert _container(api)["ports"]["containerPort"] == sl.CONTAINER_PORT
    env = _env(_container(tasks))
    assert env[sl.PORT_ENV] == str(sl.CONTAINER_PORT)  # $PORT is the task listener's here
    assert env[sl.RUN_LOOPS_ENV] == "false" and env[sl.MIGRATE_ON_START_ENV] == "false"
    assert env[sl.CONFIG_ENV] == _env(_container(api))[sl.CONFIG_ENV]
    assert sl.PORT_ENV not in _env(_container(api))
    probe = _container(tasks)["startupProbe"]
    assert probe["tcpSocket"]["port"] == sl.TASK_CONTAINER_PORT
    # Same image, network path, identity and migration gate as the API's.
    for key in ("vpcAccess", "serviceAccount", "annotations", "timeout"):
        assert tasks["template"][key] == api["template"][key], key
    assert _container(tasks)["image"] == _container(api)["image"]
    assert tasks["template"]["scaling"] == {
        "minInstanceCount": 0,
        "maxInstanceCount": gsl.TASKS_MAX_INSTANCES,
    }
    # Both deterministic URLs fit a DNS label for the longest cluster id and project number.
    longest = dataclasses.replace(SERVERLESS, cluster_id="a" * 35)
    host = gsl.task_url(longest, "9" * 12).split("//", 1)[1]
    assert len(host.split(".", 1)[0]) <= 63


def test_the_tasks_service_runs_a_master_that_serves_only_the_proxy_on_its_port(graph):
    env = {k: v for k, v in _env(_container(_tasks(graph))).items() if isinstance(v, str)}
    config = parse_config(yaml.safe_load(env.pop(sl.CONFIG_ENV)), env=env)
    assert config.port == sl.CONTAINER_PORT and config.task_port == sl.TASK_CONTAINER_PORT
    assert config.run_loops is False and config.task_origin == TASK_URL
    assert config.user_api_processes == 0  # the proxy runs in the front process only
    assert config.request_time_limit_seconds == sl.REQUEST_TIMEOUT_S
