"""The AWS cluster with a serverless master (ECS Fargate), as the Pulumi engine would receive it."""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

import pytest
import yaml
from conftest import AWS

from det.common.ports import TASK_SERVICE_PORTS
from det.deploy import clouds
from det.deploy.aws import front as aws_front
from det.deploy.aws import program
from det.deploy.aws import serverless as asl
from det.deploy.common import dryrun
from det.deploy.common import serverless as sl
from det.master.config import parse_config

SERVERLESS = dataclasses.replace(AWS, master="serverless", spot=False)
DOMAIN = dataclasses.replace(SERVERLESS, domain="det.example.com", db="rds")
TASKDEF = "aws:ecs/taskDefinition:TaskDefinition"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"


def _render(cfg: Any) -> dryrun.Rendered:
    return dryrun.render(lambda: program.build(cfg), program.MOCK_CALLS)


@pytest.fixture(scope="module")
def graph() -> dryrun.Rendered:
    return _render(SERVERLESS)


@pytest.fixture(scope="module")
def domain_graph() -> dryrun.Rendered:
    return _render(DOMAIN)


def _container(graph: dryrun.Rendered, role: str) -> dict[str, Any]:
    (found,) = [r for r in graph.of_type(TASKDEF) if r.name.endswith(role)]
    (container,) = json.loads(found.inputs["containerDefinitions"])
    return container


def _policy(graph: dryrun.Rendered, suffix: str) -> dict[str, Any]:
    (found,) = [
        r for r in graph.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith(suffix)
    ]
    return json.loads(found.inputs["policy"])


def _ingress(graph: dryrun.Rendered) -> dict[str, dict[str, Any]]:
    return {r.name: r.inputs for r in graph.of_type(INGRESS)}


def _distribution(graph: dryrun.Rendered, name: str) -> dict[str, Any]:
    (found,) = [
        r.inputs
        for r in graph.of_type("aws:cloudfront/distribution:Distribution")
        if r.name == name
    ]
    return found


def _target_groups(graph: dryrun.Rendered) -> dict[str, dict[str, Any]]:
    return {r.name: r.inputs for r in graph.of_type("aws:lb/targetGroup:TargetGroup")}


def test_service_runs_the_release_image_from_the_clusters_ecr(graph, one):
    repo = one(graph, "aws:ecr/repository:Repository")
    assert repo["name"] == "det-c1/det-master" and repo["imageTagMutability"] == "IMMUTABLE"
    container = _container(graph, "service")
    assert container["image"].startswith(
        "123456789012.dkr.ecr.us-west-2.amazonaws.com/det-c1/det-master:"
    )
    assert container["image"] == graph.outputs["master_image"]
    assert container["readonlyRootFilesystem"] is True
    assert container["portMappings"] == [
        {"containerPort": sl.CONTAINER_PORT, "protocol": "tcp"},
        {"containerPort": sl.TASK_CONTAINER_PORT, "protocol": "tcp"},
    ]
    service = one(graph, "aws:ecs/service:Service")
    assert service["launchType"] == "FARGATE"
    assert [b["containerPort"] for b in service["loadBalancers"]] == [
        sl.CONTAINER_PORT,
        sl.TASK_CONTAINER_PORT,
    ]


def test_secrets_are_injected_from_secrets_manager_and_only_ecs_reads_them(graph):
    container = _container(graph, "service")
    secrets = {s["name"]: s["valueFrom"] for s in container["secrets"]}
    assert set(secrets) == {sl.DB_PASSWORD_ENV, sl.AGENT_TOKEN_ENV, sl.ADMIN_PASSWORD_ENV}
    arns = {
        r.name: f"arn:aws:secretsmanager:us-west-2:123456789012:{r.name}"
        for r in graph.of_type("aws:secretsmanager/secret:Secret")
    }
    assert set(secrets.values()) == set(arns.values())
    for version in graph.of_type("aws:secretsmanager/secretVersion:SecretVersion"):
        assert version.inputs["secretString"] == dryrun.SECRET
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert "password" not in env[sl.CONFIG_ENV]
    execution = _policy(graph, "-execution")
    (reads,) = [s for s in execution["Statement"] if s["Sid"] == "MasterSecrets"]
    assert sorted(reads["Resource"]) == sorted(arns.values())
    task = json.dumps(_policy(graph, "-task"))
    assert "secretsmanager" not in task


def test_database_is_aurora_serverless_at_zero_acu_and_private(graph, one):
    cluster = one(graph, "aws:rds/cluster:Cluster")
    assert cluster["engine"] == "aurora-postgresql" and cluster["storageEncrypted"] is True
    assert cluster["serverlessv2ScalingConfiguration"]["minCapacity"] == 0
    major, minor = (int(x) for x in cluster["engineVersion"].split(".")[:2])
    assert (major, minor) >= (16, 3)  # the 16 line supports 0 ACU from 16.3
    instance = one(graph, "aws:rds/clusterInstance:ClusterInstance")
    assert instance["instanceClass"] == "db.serverless" and instance["publiclyAccessible"] is False
    rules = _ingress(graph)
    db_rules = [r for name, r in rules.items() if name.endswith("-to-db")]
    assert db_rules == [rules["det-c1-task-to-db"]]
    assert (
        db_rules[0]["fromPort"] == 5432
        and db_rules[0]["referencedSecurityGroupId"] == "det-c1-task-id"
    )
    config = yaml.safe_load(graph.outputs["master_yaml"])
    assert config["db"]["host"] == "det-c1-db.cluster-abc.us-west-2.rds.amazonaws.com"


def test_the_services_connections_fit_what_aurora_gives_at_its_acu(graph, one):
    """At its most tasks, with a deployment's old tasks beside the new ones, and the migration
    task, the service holds no more connections than Aurora Serverless v2 gives det's user at
    the cluster's capacity range (one instance's count is measured against the Shape in
    tests/integration/test_serverless_connections.py)."""
    env = {e["name"]: e["value"] for e in _container(graph, "service")["environment"]}
    parsed = parse_config(yaml.safe_load(env.pop(sl.CONFIG_ENV)), env=env)
    tasks = one(graph, "aws:appautoscaling/target:Target")["maxCapacity"]
    shape = sl.Shape(
        tasks,
        parsed.db_pool_size,
        parsed.user_api_processes,
        parsed.run_loops,
        fronts=parsed.api_processes,
    )
    assert shape == asl.SERVICE_SHAPE
    overlap = one(graph, "aws:ecs/service:Service")["deploymentMaximumPercent"]
    scaling = one(graph, "aws:rds/cluster:Cluster")["serverlessv2ScalingConfiguration"]
    given = asl.aurora_connections(scaling["minCapacity"], scaling["maxCapacity"])
    held = asl.service_connections(shape, overlap)
    assert (held, given) == (4 * 23 + 1, 189 - 3)
    assert held <= given
    # The master's own defaults (a pool of 20) on the smallest range would not fit: the
    # budget is a real bound.
    vm_defaults = dataclasses.replace(shape, pool=20)
    assert asl.service_connections(vm_defaults, overlap) > asl.aurora_connections(0, 1)


@pytest.mark.parametrize(
    ("min_acu", "max_acu", "given"),
    [(0, 1, 186), (0, 4, 186), (0, 8, 186), (0, 16, 1997), (1, 16, 3357), (1, 20, 3357),
     (0.5, 64, 1997), (2, 128, 4997)],
)  # fmt: skip
def test_aurora_connections_follow_the_maximum_acu(min_acu, max_acu, given):
    assert asl.aurora_connections(min_acu, max_acu) == given


def test_rds_variant_is_private_too(domain_graph, one):
    db = one(domain_graph, "aws:rds/instance:Instance")
    assert db["publiclyAccessible"] is False and db["storageEncrypted"] is True
    assert not domain_graph.of_type("aws:rds/cluster:Cluster")


def test_without_a_domain_cloudfront_alone_reaches_an_internal_alb(graph, one):
    alb = one(graph, "aws:lb/loadBalancer:LoadBalancer")
    assert alb["internal"] is True and alb["subnets"] == [
        "det-c1-private-0-id",
        "det-c1-private-1-id",
    ]
    assert alb["idleTimeout"] == sl.REQUEST_TIMEOUT_S and alb["dropInvalidHeaderFields"] is True
    origin = one(graph, "aws:cloudfront/vpcOrigin:VpcOrigin")["vpcOriginEndpointConfig"]
    assert origin["arn"].endswith("det-c1-master")
    dist = _distribution(graph, "det-c1-master")
    behaviour = dist["defaultCacheBehavior"]
    assert behaviour["viewerProtocolPolicy"] == "redirect-to-https"
    assert behaviour["cachePolicyId"] == aws_front.CACHING_DISABLED
    assert {"GET", "POST", "PUT", "PATCH", "DELETE"} <= set(behaviour["allowedMethods"])
    assert dist["origins"][0]["vpcOriginConfig"]["originReadTimeout"] == 60
    assert {e["errorCode"]: e["errorCachingMinTtl"] for e in dist["customErrorResponses"]}[503] == 0
    assert graph.outputs["master_url"] == "https://d111111abcdef8.cloudfront.net"
    rules = _ingress(graph)
    alb_rules = [r for r in rules.values() if r["securityGroupId"] == "det-c1-alb-id"]
    assert alb_rules == [rules["det-c1-cloudfront-to-alb"]]
    assert alb_rules[0]["prefixListId"] == "pl-82a045eb"


def test_with_a_domain_the_alb_serves_https_with_an_acm_certificate(domain_graph, one):
    alb = one(domain_graph, "aws:lb/loadBalancer:LoadBalancer")
    assert alb["internal"] is False
    cert = one(domain_graph, "aws:acm/certificate:Certificate")
    assert cert["domainName"] == "det.example.com" and cert["validationMethod"] == "DNS"
    listeners = {
        r.inputs["port"]: r.inputs for r in domain_graph.of_type("aws:lb/listener:Listener")
    }
    assert (
        listeners[443]["protocol"] == "HTTPS"
        and listeners[443]["sslPolicy"] == aws_front.TLS_POLICY
    )
    assert listeners[80]["defaultActions"][0]["type"] == "redirect"
    assert not domain_graph.of_type("aws:cloudfront/distribution:Distribution")
    assert domain_graph.outputs["master_url"] == "https://det.example.com"
    assert domain_graph.outputs["certificate_validation"][0]["resource_record_type"] == "CNAME"


def test_no_rule_opens_tasks_agents_or_database_to_the_world(graph, domain_graph):
    for g in (graph, domain_graph):
        for name, rule in _ingress(g).items():
            if rule.get("cidrIpv4"):
                assert rule["securityGroupId"] == "det-c1-alb-id" or rule["fromPort"] == 22, name
        rules = _ingress(g)
        assert rules["det-c1-alb-to-task"]["referencedSecurityGroupId"] == "det-c1-alb-id"
        proxy = rules["det-c1-task-to-agent"]
        assert (proxy["fromPort"], proxy["toPort"]) == (
            TASK_SERVICE_PORTS[0],
            TASK_SERVICE_PORTS[-1],
        )
        assert proxy["referencedSecurityGroupId"] == "det-c1-task-id"


def test_task_role_launches_only_the_clusters_tagged_agents(graph):
    policy = _policy(graph, "-task")
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    launch = by_sid["LaunchTaggedAgents"]
    assert launch["Condition"] == {"StringEquals": {"aws:RequestTag/det-cluster": "c1"}}
    manage = by_sid["ManageOwnAgents"]
    assert manage["Condition"] == {"StringEquals": {"aws:ResourceTag/det-cluster": "c1"}}
    assert (
        by_sid["PassAgentRole"]["Condition"]["StringEquals"]["iam:PassedToService"]
        == "ec2.amazonaws.com"
    )
    for statement in policy["Statement"]:
        if statement["Resource"] == "*":
            assert all(a.startswith("ec2:Describe") for a in statement["Action"]), statement
    passed = [s["Resource"] for s in policy["Statement"] if "iam:PassRole" in s["Action"]]
    assert len(passed) == 1  # the agents' role only: the wake-ups pass no role


def test_the_master_may_schedule_actions_on_its_own_scalable_target_only(graph, one):
    wake = _policy(graph, "-task-wakeups")["Statement"]
    target_arn = "arn:aws:appautoscaling:us-west-2:123456789012:det-c1-master"
    assert wake == [
        {
            "Sid": "WakeUpActions",
            "Effect": "Allow",
            "Action": [
                "application-autoscaling:PutScheduledAction",
                "application-autoscaling:DeleteScheduledAction",
            ],
            "Resource": target_arn,
        },
        {
            "Sid": "ListWakeUpActions",
            "Effect": "Allow",
            "Action": "application-autoscaling:DescribeScheduledActions",
            "Resource": "*",
        },
    ]
    names = {r.name for r in graph.of_type("aws:iam/role:Role")}
    assert not {n for n in names if n.endswith(("-scheduler", "-wakeup"))}, names


def test_wakeups_are_scheduled_actions_of_the_service_not_calls_of_its_url(graph, one):
    service = one(graph, "aws:ecs/service:Service")
    cluster = one(graph, "aws:ecs/cluster:Cluster")
    target = one(graph, "aws:appautoscaling/target:Target")
    assert target["resourceId"] == f"service/{cluster['name']}/{service['name']}"
    assert service["desiredCount"] == 1  # `up`'s first task; ignored on update (the scaler's)
    env = {e["name"]: e["value"] for e in _container(graph, "service")["environment"]}
    assert env[sl.WAKEUPS_TYPE_ENV] == "scheduled_scaling"
    assert env[sl.WAKEUPS_RESOURCE_ID_ENV] == target["resourceId"]
    assert env[sl.WAKEUPS_HOLD_SECONDS_ENV] == str(asl.SLEEP_AFTER_MINUTES * 60)
    assert env[sl.MIGRATE_ON_START_ENV] == "false"
    assert env[sl.REQUEST_LIMIT_ENV] == "60"  # CloudFront's origin read timeout
    for gone in (
        "aws:cloudwatch/eventBus:EventBus",
        "aws:cloudwatch/eventRule:EventRule",
        "aws:cloudwatch/eventApiDestination:EventApiDestination",
        "aws:scheduler/scheduleGroup:ScheduleGroup",
    ):
        assert not graph.of_type(gone), gone


def test_scales_to_zero_and_wakes_on_a_request(graph, one):
    target = one(graph, "aws:appautoscaling/target:Target")
    assert target["minCapacity"] == 0 and target["maxCapacity"] == sl.MAX_INSTANCES
    alarms = {
        r.name.rsplit("-", 1)[1]: r.inputs
        for r in graph.of_type("aws:cloudwatch/metricAlarm:MetricAlarm")
    }
    policies = {
        r.name.rsplit("-", 1)[1]: r.inputs
        for r in graph.of_type("aws:appautoscaling/policy:Policy")
    }
    for which, capacity in (("wake", 1), ("sleep", 0)):
        step = policies[which]["stepScalingPolicyConfiguration"]
        assert step["adjustmentType"] == "ExactCapacity"
        assert step["stepAdjustments"][0]["scalingAdjustment"] == capacity
        assert alarms[which]["alarmActions"] == [
            f"arn:aws:appautoscaling:us-west-2:123456789012:det-c1-master-{which}"
        ]
        metrics = {
            q["id"]: q["metric"]["metricName"]
            for q in alarms[which]["metricQueries"]
            if "metric" in q
        }
        # With no task the ALB answers 503 itself and counts only HTTPCode_ELB_503_Count.
        expected = {"refused": "HTTPCode_ELB_503_Count"}
        if which == "sleep":
            expected["requests"] = "RequestCount"
        assert metrics == expected
        for q in alarms[which]["metricQueries"]:
            if "metric" in q:
                assert q["metric"]["dimensions"] == {
                    "LoadBalancer": "app/det-c1-master/50dc6c495c0c9188"
                }
    assert alarms["wake"]["evaluationPeriods"] == 1
    assert alarms["sleep"]["evaluationPeriods"] == asl.SLEEP_AFTER_MINUTES
    assert alarms["sleep"]["treatMissingData"] == "breaching"


def test_migration_is_its_own_task_and_the_service_never_migrates(graph):
    migrate = _container(graph, "migrate")
    assert migrate["command"] == list(sl.MIGRATE_ARGS)  # the image's entry point stays
    assert [s["name"] for s in migrate["secrets"]] == [sl.DB_PASSWORD_ENV]
    assert "command" not in _container(graph, "service")


def test_first_pass_ships_the_migration_but_leaves_the_service_on_its_image():
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/det-c1/det-master"
    new = dataclasses.replace(SERVERLESS, rollout=sl.Rollout(release=f"{image}:new", service=None))
    graph = _render(new)
    assert not graph.of_type("aws:ecs/service:Service")
    assert _container(graph, "migrate")["image"] == f"{image}:new"
    old = dataclasses.replace(
        SERVERLESS, rollout=sl.Rollout(release=f"{image}:new", service=f"{image}:old")
    )
    graph = _render(old)
    assert _container(graph, "migrate")["image"] == f"{image}:new"
    assert _container(graph, "service")["image"] == f"{image}:old"
    assert graph.outputs["master_image"] == f"{image}:old"


def test_master_config_uses_the_public_url_and_parses(graph):
    config = yaml.safe_load(graph.outputs["master_yaml"])
    url = "https://d111111abcdef8.cloudfront.net"
    assert config["master_url"] == url and "security" not in config
    for pool in config["resource_pools"]:
        assert pool["provider"]["master_url"] == url and "master_cert_name" not in pool["provider"]
    assert parse_config(config, env={}).port == sl.CONTAINER_PORT


def test_load_balancer_names_fit_in_32_characters():
    long_id = "a" * 30 + "bc"
    for role in ("alb", "tg"):
        name = aws_front.short_name(dataclasses.replace(SERVERLESS, cluster_id=long_id), role)
        assert len(name) <= 32 and name.endswith(role)
    assert aws_front.short_name(SERVERLESS, "alb") == "det-c1-alb"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--master", "serverless", "--no-tls"], "--no-tls does not apply to --master serverless"),
        (["--master", "serverless", "--port", "8443"], "--port does not apply"),
        (
            ["--master", "vm", "--domain", "det.example.com"],
            "--domain is only used with --master serverless",
        ),
        (
            ["--master", "vm", "--db", "serverless"],
            "--db serverless is only used with --master serverless",
        ),
        # serverless is the default of a new cluster: a VM-only flag without --master names it.
        (["--master-instance-type", "m6i.large"], "(the default for a new cluster)"),
        (["--master", "serverless", "--domain", "not a name"], "--domain 'not a name'"),
    ],
)
def test_flags_a_serverless_master_cannot_use_are_refused_in_one_line(flags, message):
    out, err = io.StringIO(), io.StringIO()
    argv = ["aws", "up", "--cluster-id", "c1", "--keypair", "k", "--dry-run", *flags]
    assert clouds.run(argv, out=out, err=err) == 1
    assert message in err.getvalue() and len(err.getvalue().splitlines()) == 1
    assert not out.getvalue()


@pytest.mark.parametrize(("which", "limit"), [("graph", 60), ("domain_graph", 3600)])
def test_the_master_accepts_the_services_environment(which, limit, request):
    g = request.getfixturevalue(which)
    env = {e["name"]: e["value"] for e in _container(g, "service")["environment"]}
    config = parse_config(yaml.safe_load(env.pop(sl.CONFIG_ENV)), env=env)
    assert config.wakeups.type == "scheduled_scaling"
    assert config.wakeups.resource_id == "service/det-c1/det-c1-master"
    assert config.migrate_on_start is False and config.request_time_limit_seconds == limit


def test_the_task_origin_is_a_second_distribution_whose_requests_go_to_the_task_listener(
    graph, one
):
    api, tasks = _distribution(graph, "det-c1-master"), _distribution(graph, "det-c1-master-tasks")
    # Each sets the front header itself, so a viewer's header of that name never reaches the
    # ALB (CloudFront overwrites it): through the API's distribution it always says "api".
    assert api["origins"][0]["customHeaders"] == [{"name": aws_front.FRONT_HEADER, "value": "api"}]
    assert tasks["origins"][0]["customHeaders"] == [
        {"name": aws_front.FRONT_HEADER, "value": "tasks"}
    ]
    for d in (api, tasks):
        assert (
            d["origins"][0]["vpcOriginConfig"]["vpcOriginId"]
            == api["origins"][0]["vpcOriginConfig"]["vpcOriginId"]
        )
        behaviour = d["defaultCacheBehavior"]
        assert behaviour["cachePolicyId"] == aws_front.CACHING_DISABLED
        assert behaviour["originRequestPolicyId"] == aws_front.ALL_VIEWER  # Host and Origin pass
        assert behaviour["viewerProtocolPolicy"] == "redirect-to-https"
    groups = _target_groups(graph)
    assert groups["det-c1-master"]["port"] == sl.CONTAINER_PORT
    assert groups["det-c1-master-tasks"]["port"] == sl.TASK_CONTAINER_PORT
    for group in groups.values():
        assert group["healthCheck"]["port"] == str(sl.CONTAINER_PORT)
        assert group["healthCheck"]["path"] == "/info"
    rule = one(graph, "aws:lb/listenerRule:ListenerRule")
    assert rule["conditions"] == [
        {"httpHeader": {"httpHeaderName": aws_front.FRONT_HEADER, "values": ["tasks"]}}
    ]
    (action,) = rule["actions"]
    assert action["type"] == "forward"
    assert action["targetGroupArn"].endswith(":det-c1-master-tasks")
    (listener,) = graph.of_type("aws:lb/listener:Listener")
    assert rule["listenerArn"].endswith(listener.name)
    assert listener.inputs["defaultActions"][0]["targetGroupArn"].endswith(":det-c1-master")
    config = yaml.safe_load(graph.outputs["master_yaml"])
    assert config["task_origin"] == "https://d222222abcdef8.cloudfront.net"
    assert graph.outputs["task_url"] == config["task_origin"] != config["master_url"]
    assert config["task_port"] == sl.TASK_CONTAINER_PORT
    rules = _ingress(graph)
    origin = rules["det-c1-alb-to-task-origin"]
    assert (origin["fromPort"], origin["toPort"]) == (sl.TASK_CONTAINER_PORT,) * 2
    assert origin["referencedSecurityGroupId"] == "det-c1-alb-id"


def test_with_a_domain_the_task_origin_is_tasks_dot_the_domain(domain_graph, one):
    cert = one(domain_graph, "aws:acm/certificate:Certificate")
    assert cert["subjectAlternativeNames"] == ["tasks.det.example.com"]
    names = [v["domain_name"] for v in domain_graph.outputs["certificate_validation"]]
    assert names == ["det.example.com", "tasks.det.example.com"]
    rule = one(domain_graph, "aws:lb/listenerRule:ListenerRule")
    # The browser's Host says which origin its page is on; no header a client sets is believed.
    assert rule["conditions"] == [{"hostHeader": {"values": ["tasks.det.example.com"]}}]
    assert rule["actions"][0]["targetGroupArn"].endswith(":det-c1-master-tasks")
    listeners = {r.inputs["port"]: r for r in domain_graph.of_type("aws:lb/listener:Listener")}
    assert rule["listenerArn"].endswith(listeners[443].name)
    config = yaml.safe_load(domain_graph.outputs["master_yaml"])
    assert config["task_origin"] == "https://tasks.det.example.com"
    assert config["task_port"] == sl.TASK_CONTAINER_PORT
    assert domain_graph.outputs["task_url"] == "https://tasks.det.example.com"


def test_up_ends_naming_the_task_origin(domain_graph):
    from det.deploy.common import commands

    out = io.StringIO()
    commands.finish_up(
        domain_graph.outputs, wait=False, timeout=0, password_generated=False, out=out
    )
    assert "export DET_MASTER=https://det.example.com" in out.getvalue()
    assert "open on https://tasks.det.example.com (the task origin)" in out.getvalue()
