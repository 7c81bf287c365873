"""The serverless master's front door on AWS: the load balancer, and CloudFront before it when
the cluster has no domain of its own.

With ``--domain``, an internet-facing ALB serves HTTPS with an ACM certificate for the domain and
``tasks.<domain>`` (the task origin), and redirects HTTP. Without one, the ALB is internal and
plain HTTP inside the VPC; two CloudFront distributions (the API's and the task origin's) reach
it through a VPC origin, each on its own ``*.cloudfront.net`` name and certificate. Either way,
one listener rule sends the task origin's requests to the task port's target group.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import pulumi
import pulumi_aws as aws

from det.deploy.aws.config import AwsConfig
from det.deploy.common import serverless as sl

# CloudFront's limit on waiting for the origin's first byte (and between bytes) is 60 s unless
# a quota increase is granted; long requests end before it (docs/deploy.md).
CLOUDFRONT_READ_TIMEOUT_S = 60
# Managed CloudFront policies (ids are the same in every account).
CACHING_DISABLED = "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
ALL_VIEWER = "216adef6-5c7f-47e4-b989-5492eafa07d3"
# Which distribution an origin request came through: each distribution sets this origin custom
# header, ``api`` or ``tasks``, and the ALB sends ``tasks`` to the task listener. CloudFront
# overwrites a viewer's header of the same name ("If a header is present, CloudFront overwrites
# the header value before forwarding the request to the origin":
# https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/add-origin-custom-headers.html),
# so no viewer of the API's distribution can have its request taken for the task origin's; and
# only these two distributions reach the internal ALB (a VPC origin of this account).
FRONT_HEADER = "X-Det-Front"
FRONT_API = "api"
FRONT_TASKS = "tasks"
TASKS_RULE_PRIORITY = 10
TLS_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"


def short_name(cfg: AwsConfig, role: str) -> str:
    """A load balancer's or target group's name (at most 32 characters): ``det-<id>-<role>``,
    a long id cut and followed by a hash of the whole id, so two clusters never share one."""
    plain = f"det-{cfg.cluster_id}-{role}"
    if len(plain) <= 32:
        return plain
    digest = hashlib.sha256(cfg.cluster_id.encode()).hexdigest()[:6]
    keep = 32 - len(f"det--{digest}-{role}")
    return f"det-{cfg.cluster_id[:keep]}-{digest}-{role}"


@dataclasses.dataclass(frozen=True)
class Front:
    """What the service and its alarms need of the front."""

    alb: aws.lb.LoadBalancer
    target: aws.lb.TargetGroup
    """The API's target group (the container's port)."""
    tasks_target: aws.lb.TargetGroup
    """The task origin's target group (the container's task port)."""
    listener: aws.lb.Listener
    rule: aws.lb.ListenerRule
    url: pulumi.Output[str]
    task_url: pulumi.Output[str]
    validation: pulumi.Output[Any]
    """The ACM certificate's DNS validation records (None without a domain)."""


@dataclasses.dataclass(frozen=True)
class FrontArgs:
    vpc_id: pulumi.Output[str]
    public_subnet_ids: list[pulumi.Output[str]]
    private_subnet_ids: list[pulumi.Output[str]]
    alb_sg: pulumi.Output[str]


@dataclasses.dataclass(frozen=True)
class _Listening:
    """The listener the rule hangs on, the rule's condition, and the two public URLs."""

    listener: aws.lb.Listener
    condition: aws.lb.ListenerRuleConditionArgs
    url: pulumi.Output[str]
    task_url: pulumi.Output[str]
    validation: pulumi.Output[Any]


def build(name: str, cfg: AwsConfig, args: FrontArgs, child: pulumi.ResourceOptions) -> Front:
    """The ALB (and CloudFront without a domain); the master's public URL and its task
    origin's."""
    alb = aws.lb.LoadBalancer(
        name,
        name=short_name(cfg, "alb"),
        internal=not cfg.domain,
        load_balancer_type="application",
        subnets=args.public_subnet_ids if cfg.domain else args.private_subnet_ids,
        security_groups=[args.alb_sg],
        idle_timeout=sl.REQUEST_TIMEOUT_S,
        drop_invalid_header_fields=True,
        tags=cfg.tags,
        opts=child,
    )
    target = _target_group(name, "", cfg, args.vpc_id, "tg", sl.CONTAINER_PORT, child)
    tasks_target = _target_group(
        name, "-tasks", cfg, args.vpc_id, "tasks", sl.TASK_CONTAINER_PORT, child
    )
    forward = [aws.lb.ListenerDefaultActionArgs(type="forward", target_group_arn=target.arn)]
    on = (_with_domain if cfg.domain else _through_cloudfront)(name, cfg, alb, forward, child)
    rule = aws.lb.ListenerRule(
        f"{name}-tasks",
        listener_arn=on.listener.arn,
        priority=TASKS_RULE_PRIORITY,
        conditions=[on.condition],
        actions=[aws.lb.ListenerRuleActionArgs(type="forward", target_group_arn=tasks_target.arn)],
        tags=cfg.tags,
        opts=child,
    )
    return Front(
        alb=alb,
        target=target,
        tasks_target=tasks_target,
        listener=on.listener,
        rule=rule,
        url=on.url,
        task_url=on.task_url,
        validation=on.validation,
    )


def _target_group(
    name: str,
    suffix: str,
    cfg: AwsConfig,
    vpc_id: pulumi.Output[str],
    role: str,
    port: int,
    child: pulumi.ResourceOptions,
) -> aws.lb.TargetGroup:
    # Both answer health checks on the API's /info (the task listener has no page).
    return aws.lb.TargetGroup(
        f"{name}{suffix}",
        name=short_name(cfg, role),
        port=port,
        protocol="HTTP",
        target_type="ip",
        vpc_id=vpc_id,
        deregistration_delay=30,
        health_check=aws.lb.TargetGroupHealthCheckArgs(
            path="/info",
            port=str(sl.CONTAINER_PORT),
            interval=10,
            healthy_threshold=2,
            unhealthy_threshold=3,
            matcher="200",
        ),
        tags=cfg.tags,
        opts=child,
    )


def _with_domain(
    name: str,
    cfg: AwsConfig,
    alb: aws.lb.LoadBalancer,
    forward: list[aws.lb.ListenerDefaultActionArgs],
    child: pulumi.ResourceOptions,
) -> _Listening:
    """HTTPS on the ALB with an ACM certificate for the domain and ``tasks.<domain>``; HTTP
    redirected."""
    tags = cfg.tags
    tasks_host = f"tasks.{cfg.domain}"
    cert = aws.acm.Certificate(
        name,
        domain_name=cfg.domain,
        subject_alternative_names=[tasks_host],
        validation_method="DNS",
        tags=tags,
        opts=child,
    )
    done = aws.acm.CertificateValidation(name, certificate_arn=cert.arn, opts=child)
    listener = aws.lb.Listener(
        f"{name}-https",
        load_balancer_arn=alb.arn,
        port=443,
        protocol="HTTPS",
        ssl_policy=TLS_POLICY,
        certificate_arn=done.certificate_arn,
        default_actions=forward,
        tags=tags,
        opts=child,
    )
    aws.lb.Listener(
        f"{name}-http",
        load_balancer_arn=alb.arn,
        port=80,
        protocol="HTTP",
        default_actions=[
            aws.lb.ListenerDefaultActionArgs(
                type="redirect",
                redirect=aws.lb.ListenerDefaultActionRedirectArgs(
                    port="443", protocol="HTTPS", status_code="HTTP_301"
                ),
            )
        ],
        tags=tags,
        opts=child,
    )
    # The ALB passes the browser's Host on: a browser sends the task origin's name only for a
    # page of the task origin.
    return _Listening(
        listener=listener,
        condition=aws.lb.ListenerRuleConditionArgs(
            host_header=aws.lb.ListenerRuleConditionHostHeaderArgs(values=[tasks_host])
        ),
        url=pulumi.Output.from_input(f"https://{cfg.domain}"),
        task_url=pulumi.Output.from_input(f"https://{tasks_host}"),
        validation=cert.domain_validation_options,
    )


def _through_cloudfront(
    name: str,
    cfg: AwsConfig,
    alb: aws.lb.LoadBalancer,
    forward: list[aws.lb.ListenerDefaultActionArgs],
    child: pulumi.ResourceOptions,
) -> _Listening:
    """Internal ALB: plain HTTP inside the VPC, from CloudFront's VPC origin only."""
    listener = aws.lb.Listener(
        f"{name}-http",
        load_balancer_arn=alb.arn,
        port=80,
        protocol="HTTP",
        default_actions=forward,
        tags=cfg.tags,
        opts=child,
    )
    origin = aws.cloudfront.VpcOrigin(
        name,
        vpc_origin_endpoint_config=aws.cloudfront.VpcOriginVpcOriginEndpointConfigArgs(
            name=name,
            arn=alb.arn,
            http_port=80,
            https_port=443,
            origin_protocol_policy="http-only",
            origin_ssl_protocols=aws.cloudfront.VpcOriginVpcOriginEndpointConfigOriginSslProtocolsArgs(
                items=["TLSv1.2"], quantity=1
            ),
        ),
        tags=cfg.tags,
        opts=child,
    )
    dist = distribution(name, cfg, alb, origin, FRONT_API, child)
    tasks_dist = distribution(f"{name}-tasks", cfg, alb, origin, FRONT_TASKS, child)
    return _Listening(
        listener=listener,
        condition=aws.lb.ListenerRuleConditionArgs(
            http_header=aws.lb.ListenerRuleConditionHttpHeaderArgs(
                http_header_name=FRONT_HEADER, values=[FRONT_TASKS]
            )
        ),
        url=dist.domain_name.apply(lambda d: f"https://{d}"),
        task_url=tasks_dist.domain_name.apply(lambda d: f"https://{d}"),
        validation=pulumi.Output.from_input(None),
    )


def distribution(
    name: str,
    cfg: AwsConfig,
    alb: aws.lb.LoadBalancer,
    origin: aws.cloudfront.VpcOrigin,
    front: str,
    child: pulumi.ResourceOptions,
) -> aws.cloudfront.Distribution:
    """A CloudFront distribution to the ALB (its VPC origin) on its own ``*.cloudfront.net``
    name: nothing cached, every viewer header passed on (``AllViewer``: the browser's ``Host``
    and ``Origin`` reach the master), and :data:`FRONT_HEADER` set to ``front``, overwriting
    whatever a viewer sent under that name.

    ``Host`` reaches the origin only because the policy includes it: otherwise CloudFront
    "sets the value to the domain name of the origin" (HTTP request headers and CloudFront
    behavior, https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/RequestAndResponseBehaviorCustomOrigin.html),
    the ALB's name for both distributions. So the ALB tells them apart by
    :data:`FRONT_HEADER`, not by ``Host``, and the master admits the task origin's page
    whatever ``Host`` it sees (det.master.proxy)."""
    methods = ["GET", "HEAD", "OPTIONS", "PUT", "POST", "PATCH", "DELETE"]
    return aws.cloudfront.Distribution(
        name,
        enabled=True,
        comment=f"det master ({cfg.cluster_id}, {front})",
        price_class="PriceClass_100",
        http_version="http2",
        origins=[
            aws.cloudfront.DistributionOriginArgs(
                origin_id="master",
                domain_name=alb.dns_name,
                custom_headers=[
                    aws.cloudfront.DistributionOriginCustomHeaderArgs(
                        name=FRONT_HEADER, value=front
                    )
                ],
                vpc_origin_config=aws.cloudfront.DistributionOriginVpcOriginConfigArgs(
                    vpc_origin_id=origin.id,
                    origin_read_timeout=CLOUDFRONT_READ_TIMEOUT_S,
                    origin_keepalive_timeout=60,
                ),
            )
        ],
        default_cache_behavior=aws.cloudfront.DistributionDefaultCacheBehaviorArgs(
            target_origin_id="master",
            viewer_protocol_policy="redirect-to-https",
            allowed_methods=methods,
            cached_methods=["GET", "HEAD"],
            cache_policy_id=CACHING_DISABLED,
            origin_request_policy_id=ALL_VIEWER,
            compress=True,
        ),
        # A sleeping master answers 503 until its task runs: never cache that.
        custom_error_responses=[
            aws.cloudfront.DistributionCustomErrorResponseArgs(
                error_code=c, error_caching_min_ttl=0
            )
            for c in (502, 503, 504)
        ],
        restrictions=aws.cloudfront.DistributionRestrictionsArgs(
            geo_restriction=aws.cloudfront.DistributionRestrictionsGeoRestrictionArgs(
                restriction_type="none"
            )
        ),
        viewer_certificate=aws.cloudfront.DistributionViewerCertificateArgs(
            cloudfront_default_certificate=True
        ),
        tags=cfg.tags,
        opts=child,
    )
