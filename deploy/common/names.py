"""Every name, tag, label and token det's Pulumi programs give a cloud, with the provider's rule.

:data:`TABLE` maps each resource type the AWS and GCP programs create (``deploy/aws``,
``deploy/gcp``, both master modes) to the inputs that name it and the rule the provider checks
them against, each cited by its documentation page. Pulumi's mocks accept anything, so
``tests/unit/deploy/test_deploy_names.py`` renders both clouds and both master modes with the
shortest and the longest cluster id ``up`` accepts and runs :func:`problems` on every resource:
a type missing from the table fails too, so a new resource comes with its rule.

A name left to Pulumi's autonaming is checked as the provider will make it: the logical name
plus :data:`AUTONAME_SUFFIX` characters (``-`` and 7 hexadecimal digits; see ``limits``).
Where a cluster id would make a name too long, :func:`fit` cuts it and adds a hash of the whole
name, so two clusters never share one. The value rules for tags and labels are ``limits``'s
(the same checks ``--add-tag`` and ``--add-label`` go through): one owner for each rule.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping

from det.deploy.common import limits
from det.deploy.common.dryrun import PropertyMap, PropertyValue

AUTONAME_SUFFIX = limits.AUTONAME_SUFFIX
_HASH = 6


def fit(name: str, high: int) -> str:
    """``name`` if it has at most ``high`` characters, else its first characters, ``-`` and 6
    hexadecimal digits of its sha256 (stable: the same name gives the same result)."""
    if len(name) <= high:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH]
    return f"{name[: high - _HASH - 1].rstrip('-')}-{digest}"


def autoname_or_fit(logical: str, high: int) -> str | None:
    """None (leave the name to Pulumi's autonaming, as before) when the autoname fits ``high``;
    else an explicit name that does (:func:`fit`). Stacks whose names fit keep them; those that
    did not could never have been created."""
    if len(logical) + AUTONAME_SUFFIX <= high:
        return None
    return fit(logical, high)


@dataclasses.dataclass(frozen=True)
class Rule:
    """A provider's rule for one kind of name: its length and characters (``pattern`` must match
    the whole name), or a check of ``limits`` (``check`` returns the problem or None)."""

    what: str
    doc: str
    low: int = 1
    high: int = 255
    pattern: str | None = None
    no_double_hyphen: bool = False
    check: Callable[[str], str | None] | None = None

    def problem(self, value: str) -> str | None:
        if self.check is not None:
            found = self.check(value)
            return f"{found} ({self.doc})" if found else None
        if not self.low <= len(value) <= self.high:
            return (
                f"{self.what} {value!r} is {len(value)} characters "
                f"(allowed {self.low}-{self.high}; {self.doc})"
            )
        if self.pattern and not re.fullmatch(self.pattern, value):
            return f"{self.what} {value!r} does not match {self.pattern} ({self.doc})"
        if self.no_double_hyphen and "--" in value:
            return f"{self.what} {value!r} has '--' ({self.doc})"
        return None


@dataclasses.dataclass(frozen=True)
class Named:
    """Input ``prop`` names the resource by ``rule``; absent, Pulumi autonames it (logical name
    plus the suffix, lower-cased when ``lower``) unless ``required``."""

    prop: str
    rule: Rule
    lower: bool = False
    required: bool = False


# --- AWS ---------------------------------------------------------------------------------------
_AWS_DOC = "https://docs.aws.amazon.com"
IAM_ROLE = Rule(
    "IAM role name",
    f"{_AWS_DOC}/IAM/latest/UserGuide/reference_iam-quotas.html",
    check=lambda v: limits.iam_name(v, 64),
)
IAM_PROFILE = Rule(
    "IAM instance profile or inline policy name",
    f"{_AWS_DOC}/IAM/latest/UserGuide/reference_iam-quotas.html",
    check=lambda v: limits.iam_name(v, 128),
)
S3_BUCKET = Rule(
    "S3 bucket name",
    f"{_AWS_DOC}/AmazonS3/latest/userguide/bucketnamingrules.html",
    check=limits.s3_bucket,
)
RDS_INSTANCE = Rule(
    "RDS DB instance identifier",
    f"{_AWS_DOC}/AmazonRDS/latest/UserGuide/CHAP_Limits.html#RDS_Limits.Constraints",
    check=limits.rds_identifier,
)
# Aurora DB cluster identifiers: 1-63 letters, digits and '-', a letter first, no '--', no '-'
# at the end (stored in lower case; Terraform's check wants it so).
AURORA_CLUSTER = Rule(
    "Aurora DB cluster identifier",
    f"{_AWS_DOC}/AmazonRDS/latest/APIReference/API_CreateDBCluster.html",
    check=limits.rds_identifier,
)
RDS_SNAPSHOT = Rule(
    "RDS final snapshot identifier",
    f"{_AWS_DOC}/AmazonRDS/latest/APIReference/API_DeleteDBInstance.html",
    check=lambda v: limits.rds_identifier(v, 255),
)
DB_SUBNET_GROUP = Rule(
    "DB subnet group name",
    f"{_AWS_DOC}/AmazonRDS/latest/APIReference/API_CreateDBSubnetGroup.html",
    high=255,
    pattern=r"[a-z0-9 ._-]+",
)
SECRETS_MANAGER = Rule(
    "Secrets Manager secret name",
    f"{_AWS_DOC}/secretsmanager/latest/apireference/API_CreateSecret.html",
    check=limits.secrets_manager_name,
)
LOG_GROUP = Rule(
    "CloudWatch Logs group name",
    f"{_AWS_DOC}/AmazonCloudWatchLogs/latest/APIReference/API_CreateLogGroup.html",
    check=limits.log_group_name,
)
SECURITY_GROUP = Rule(
    "security group name",
    f"{_AWS_DOC}/AWSEC2/latest/APIReference/API_CreateSecurityGroup.html",
    check=lambda v: limits.security_group_text("security group name", v, name=True),
)
# Load balancers and target groups: at most 32 alphanumerics and '-', no '-' at either end (a
# load balancer's may not start with "internal-").
ELB_NAME = Rule(
    "load balancer or target group name",
    f"{_AWS_DOC}/elasticloadbalancing/latest/APIReference/API_CreateTargetGroup.html",
    high=32,
    pattern=r"(?!internal-)[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?",
)
ECS_NAME = Rule(
    "ECS cluster, service or task definition family name",
    f"{_AWS_DOC}/AmazonECS/latest/APIReference/API_CreateService.html",
    high=255,
    pattern=r"[A-Za-z0-9_-]+",
)
ECR_REPOSITORY = Rule(
    "ECR repository name",
    f"{_AWS_DOC}/AmazonECR/latest/APIReference/API_CreateRepository.html",
    low=2,
    high=256,
    pattern=r"(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*",
)
CLOUDWATCH_ALARM = Rule(
    "CloudWatch alarm name",
    f"{_AWS_DOC}/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html",
    high=255,
    pattern=r"[^\x00-\x1f\x7f]+",
)
# EventBridge: rules, connections and API destinations take 1-64 of [.-_A-Za-z0-9]; event buses
# 1-256 of the same set and '/'.
EVENTS_64 = Rule(
    "EventBridge rule, connection or API destination name",
    f"{_AWS_DOC}/eventbridge/latest/APIReference/API_CreateApiDestination.html",
    high=64,
    pattern=r"[.\-_A-Za-z0-9]+",
)
EVENT_BUS = Rule(
    "EventBridge event bus name",
    f"{_AWS_DOC}/eventbridge/latest/APIReference/API_CreateEventBus.html",
    high=256,
    pattern=r"[/.\-_A-Za-z0-9]+",
)
SCHEDULE_GROUP = Rule(
    "EventBridge Scheduler schedule group name",
    f"{_AWS_DOC}/scheduler/latest/APIReference/API_CreateScheduleGroup.html",
    high=64,
    pattern=r"[0-9a-zA-Z-_.]+",
)
SCHEDULE = Rule(
    "EventBridge Scheduler schedule name",
    f"{_AWS_DOC}/scheduler/latest/APIReference/API_CreateSchedule.html",
    high=64,
    pattern=r"[0-9a-zA-Z-_.]+",
)
# Application Auto Scaling scheduled actions: 1-256, no ':', '/' or '|', no control characters,
# no space at either end.
SCHEDULED_ACTION = Rule(
    "Application Auto Scaling scheduled action name",
    f"{_AWS_DOC}/autoscaling/application/APIReference/API_PutScheduledAction.html",
    high=256,
    pattern=r"(?! )[^\x00-\x1f\x7f-\x9f:/|]+(?<! )",
)
SCALING_POLICY = Rule(
    "Application Auto Scaling policy name",
    f"{_AWS_DOC}/autoscaling/application/APIReference/API_PutScalingPolicy.html",
    high=256,
    pattern=r"[^\x00-\x1f\x7f]+",
)
CLOUDFRONT_VPC_ORIGIN = Rule(
    "CloudFront VPC origin name",
    f"{_AWS_DOC}/cloudfront/latest/APIReference/API_VpcOriginEndpointConfig.html",
    high=64,
    pattern=r"[A-Za-z0-9_.-]+",
)
AWS_TAGS_DOC = f"{_AWS_DOC}/tag-editor/latest/userguide/tagging.html"

_AWS_UNNAMED = (
    # Resources AWS gives an id of its own; no name of ours reaches the API.
    "aws:acm/certificate:Certificate",
    "aws:acm/certificateValidation:CertificateValidation",
    "aws:appautoscaling/target:Target",
    "aws:cloudfront/distribution:Distribution",
    "aws:cloudwatch/eventTarget:EventTarget",
    "aws:ec2/eip:Eip",
    "aws:ec2/instance:Instance",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/routeTable:RouteTable",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/vpc:Vpc",
    "aws:ecr/repositoryPolicy:RepositoryPolicy",
    "aws:iam/serviceLinkedRole:ServiceLinkedRole",
    "aws:lb/listener:Listener",
    "aws:lb/listenerRule:ListenerRule",
    "aws:s3/bucketObjectv2:BucketObjectv2",
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:secretsmanager/secretVersion:SecretVersion",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
)

# --- GCP ---------------------------------------------------------------------------------------
_GCP_DOC = "https://cloud.google.com"
_RFC1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"
GCE_NAME = Rule(
    "Compute Engine resource name",
    f"{_GCP_DOC}/compute/docs/naming-resources#resource-name-format",
    check=limits.gce_name,
)
GCS_BUCKET = Rule(
    "Cloud Storage bucket name",
    f"{_GCP_DOC}/storage/docs/buckets#naming",
    check=limits.gcs_bucket,
)
GCS_OBJECT = Rule(
    "Cloud Storage object name",
    f"{_GCP_DOC}/storage/docs/objects#naming",
    high=1024,
    pattern=r"(?!\.well-known/acme-challenge/)[^\r\n#\[\]*?]+",
)
SERVICE_ACCOUNT = Rule(
    "service account id",
    f"{_GCP_DOC}/iam/docs/service-accounts-create#creating",
    check=limits.gcp_service_account_id,
)
CUSTOM_ROLE = Rule(
    "custom role id",
    f"{_GCP_DOC}/iam/docs/reference/rest/v1/projects.roles/create",
    low=3,
    high=64,
    pattern=r"[a-zA-Z0-9_.]+",
)
SECRET_ID = Rule(
    "Secret Manager secret id",
    f"{_GCP_DOC}/secret-manager/docs/reference/rest/v1/projects.secrets/create",
    check=limits.secret_manager_id,
)
# Cloud SQL: a-z 0-9 '-', a letter first; project id and instance id together at most 98.
SQL_INSTANCE = Rule(
    "Cloud SQL instance id",
    f"{_GCP_DOC}/sql/docs/postgres/create-instance#create-2nd-gen",
    high=98 - 31,  # a project id has at most 30 characters, and the ':'
    pattern=_RFC1035,
)
SQL_DATABASE = Rule(
    "Cloud SQL database name",
    f"{_GCP_DOC}/sql/docs/postgres/create-manage-databases",
    high=63,
    pattern=r"[A-Za-z_][A-Za-z0-9_$]*",
)
SQL_USER = Rule(
    "Cloud SQL user name",
    f"{_GCP_DOC}/sql/docs/postgres/create-manage-users",
    high=63,
    pattern=r"[A-Za-z_][A-Za-z0-9_$]*",
)
FILESTORE = Rule(
    "Filestore instance id",
    f"{_GCP_DOC}/filestore/docs/reference/rest/v1/projects.locations.instances/create",
    high=63,
    pattern=_RFC1035,
)
ARTIFACT_REPOSITORY = Rule(
    "Artifact Registry repository id",
    f"{_GCP_DOC}/artifact-registry/docs/repositories/create-repos",
    high=63,
    pattern=_RFC1035,
)
CLOUD_TASKS_QUEUE = Rule(
    "Cloud Tasks queue id",
    f"{_GCP_DOC}/tasks/docs/reference/rest/v2/projects.locations.queues#Queue",
    high=100,
    pattern=r"[A-Za-z0-9-]+",
)
# Cloud Run: a service id has fewer than 50 characters (its revisions append a suffix to it);
# a job id at most 63; both RFC 1035 labels.
RUN_SERVICE = Rule(
    "Cloud Run service name",
    f"{_GCP_DOC}/run/docs/reference/rest/v2/projects.locations.services/create",
    high=49,
    pattern=_RFC1035,
)
RUN_JOB = Rule(
    "Cloud Run job name",
    f"{_GCP_DOC}/run/docs/reference/rest/v2/projects.locations.jobs/create",
    high=63,
    pattern=_RFC1035,
)
# A job's run/start execution token is the suffix of the execution's name: the job's name, '-'
# and the token must make a name Cloud Run accepts (lower case, digits, '-'), and "the sum of
# job name and token length must be fewer than 63 characters".
RUN_EXECUTION_TOKEN_DOC = f"{_GCP_DOC}/run/docs/reference/rest/v1/namespaces.jobs#JobSpec"
GCP_LABELS_DOC = f"{_GCP_DOC}/compute/docs/labeling-resources#requirements"


def run_execution_token(job: str, token: str) -> str | None:
    """The problem with a Cloud Run job's execution token (None: the provider accepts it)."""
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", token):
        return (
            f"Cloud Run execution token {token!r}: only a-z, 0-9 and '-' "
            f"(it ends the execution's name; {RUN_EXECUTION_TOKEN_DOC})"
        )
    if len(job) + len(token) >= 63:
        return (
            f"Cloud Run job {job!r} and execution token {token!r} make {len(job) + len(token)} "
            f"characters (fewer than 63 allowed; {RUN_EXECUTION_TOKEN_DOC})"
        )
    return None


_GCP_UNNAMED = (
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember",
    "gcp:cloudtasks/queueIamMember:QueueIamMember",
    "gcp:projects/iAMMember:IAMMember",
    "gcp:secretmanager/secretIamMember:SecretIamMember",
    "gcp:secretmanager/secretVersion:SecretVersion",
    "gcp:serviceaccount/iAMMember:IAMMember",
    "gcp:servicenetworking/connection:Connection",
    "gcp:storage/bucketIAMMember:BucketIAMMember",
)

TABLE: Mapping[str, tuple[Named, ...]] = {
    # AWS
    "aws:iam/role:Role": (Named("name", IAM_ROLE),),
    "aws:iam/instanceProfile:InstanceProfile": (Named("name", IAM_PROFILE),),
    "aws:iam/rolePolicy:RolePolicy": (Named("name", IAM_PROFILE),),
    "aws:s3/bucket:Bucket": (Named("bucket", S3_BUCKET, lower=True),),
    "aws:rds/instance:Instance": (
        Named("identifier", RDS_INSTANCE),
        Named("finalSnapshotIdentifier", RDS_SNAPSHOT, required=True),
    ),
    "aws:rds/cluster:Cluster": (
        Named("clusterIdentifier", AURORA_CLUSTER),
        Named("finalSnapshotIdentifier", RDS_SNAPSHOT, required=True),
    ),
    "aws:rds/clusterInstance:ClusterInstance": (Named("identifier", RDS_INSTANCE),),
    "aws:rds/subnetGroup:SubnetGroup": (Named("name", DB_SUBNET_GROUP, lower=True),),
    "aws:secretsmanager/secret:Secret": (Named("name", SECRETS_MANAGER),),
    "aws:cloudwatch/logGroup:LogGroup": (Named("name", LOG_GROUP, required=True),),
    "aws:ec2/securityGroup:SecurityGroup": (Named("name", SECURITY_GROUP),),
    "aws:lb/loadBalancer:LoadBalancer": (Named("name", ELB_NAME, required=True),),
    "aws:lb/targetGroup:TargetGroup": (Named("name", ELB_NAME, required=True),),
    "aws:ecs/cluster:Cluster": (Named("name", ECS_NAME),),
    "aws:ecs/service:Service": (Named("name", ECS_NAME),),
    "aws:ecs/taskDefinition:TaskDefinition": (Named("family", ECS_NAME, required=True),),
    "aws:ecr/repository:Repository": (Named("name", ECR_REPOSITORY, required=True),),
    "aws:cloudwatch/metricAlarm:MetricAlarm": (Named("name", CLOUDWATCH_ALARM),),
    "aws:cloudwatch/eventRule:EventRule": (Named("name", EVENTS_64),),
    "aws:cloudwatch/eventConnection:EventConnection": (Named("name", EVENTS_64),),
    "aws:cloudwatch/eventApiDestination:EventApiDestination": (Named("name", EVENTS_64),),
    "aws:cloudwatch/eventBus:EventBus": (Named("name", EVENT_BUS, required=True),),
    "aws:scheduler/scheduleGroup:ScheduleGroup": (Named("name", SCHEDULE_GROUP),),
    "aws:appautoscaling/policy:Policy": (Named("name", SCALING_POLICY),),
    "aws:appautoscaling/scheduledAction:ScheduledAction": (Named("name", SCHEDULED_ACTION),),
    "aws:scheduler/schedule:Schedule": (Named("name", SCHEDULE),),
    "aws:cloudfront/vpcOrigin:VpcOrigin": (),  # named inside vpcOriginEndpointConfig: below
    **{t: () for t in _AWS_UNNAMED},
    # GCP
    "gcp:compute/network:Network": (Named("name", GCE_NAME),),
    "gcp:compute/subnetwork:Subnetwork": (Named("name", GCE_NAME),),
    "gcp:compute/firewall:Firewall": (Named("name", GCE_NAME),),
    "gcp:compute/instance:Instance": (Named("name", GCE_NAME),),
    "gcp:compute/address:Address": (Named("name", GCE_NAME),),
    "gcp:compute/globalAddress:GlobalAddress": (Named("name", GCE_NAME),),
    "gcp:storage/bucket:Bucket": (Named("name", GCS_BUCKET, lower=True),),
    "gcp:storage/bucketObject:BucketObject": (Named("name", GCS_OBJECT, required=True),),
    "gcp:serviceaccount/account:Account": (Named("accountId", SERVICE_ACCOUNT, required=True),),
    "gcp:projects/iAMCustomRole:IAMCustomRole": (Named("roleId", CUSTOM_ROLE, required=True),),
    "gcp:secretmanager/secret:Secret": (Named("secretId", SECRET_ID, required=True),),
    "gcp:sql/databaseInstance:DatabaseInstance": (Named("name", SQL_INSTANCE),),
    "gcp:sql/database:Database": (Named("name", SQL_DATABASE, required=True),),
    "gcp:sql/user:User": (Named("name", SQL_USER, required=True),),
    "gcp:filestore/instance:Instance": (Named("name", FILESTORE),),
    "gcp:artifactregistry/repository:Repository": (
        Named("repositoryId", ARTIFACT_REPOSITORY, required=True),
    ),
    "gcp:cloudtasks/queue:Queue": (Named("name", CLOUD_TASKS_QUEUE),),
    "gcp:cloudrunv2/service:Service": (Named("name", RUN_SERVICE, required=True),),
    "gcp:cloudrunv2/job:Job": (Named("name", RUN_JOB, required=True),),
    **{t: () for t in _GCP_UNNAMED},
}
"""Resource type → the inputs that name it (empty: the cloud names it; nothing to check)."""

# Types that are no cloud resource: det's components and random values computed in the engine.
_NOT_CLOUD = ("det:", "random:")


def _object(value: PropertyValue) -> PropertyMap:
    return value if isinstance(value, dict) else {}


def _tags(cloud: str, inputs: PropertyMap) -> Iterable[str | None]:
    if cloud == "aws":
        for key, value in _object(inputs.get("tags")).items():
            found = limits.aws_tag(str(key), str(value))
            yield f"{found} ({AWS_TAGS_DOC})" if found else None
    else:
        for key, value in _object(inputs.get("labels")).items():
            found = limits.gcp_label(str(key), str(value))
            yield f"{found} ({GCP_LABELS_DOC})" if found else None


def _special(type_: str, name: str, inputs: PropertyMap) -> Iterable[str | None]:
    """Names that are not one input against one rule."""
    if type_ == "gcp:cloudrunv2/job:Job":
        for key in ("runExecutionToken", "startExecutionToken"):
            if inputs.get(key):
                yield run_execution_token(str(inputs["name"]), str(inputs[key]))
    if type_ == "aws:cloudfront/vpcOrigin:VpcOrigin":
        config = _object(inputs.get("vpcOriginEndpointConfig"))
        yield CLOUDFRONT_VPC_ORIGIN.problem(str(config.get("name") or ""))


def problems(type_: str, name: str, inputs: PropertyMap) -> list[str]:
    """Each way the resource ``name`` of ``type_`` with these rendered inputs breaks a provider's
    rule, one line each (the logical name first)."""
    if type_.startswith(_NOT_CLOUD):
        return []
    if type_ not in TABLE:
        return [f"{name}: {type_} is not in det.deploy.common.names.TABLE (add its naming rule)"]
    cloud = type_.split(":", 1)[0]
    found: list[str | None] = []
    for named in TABLE[type_]:
        value = inputs.get(named.prop)
        if value is None:
            if named.required:
                found.append(f"{named.rule.what}: {named.prop} is not set")
                continue
            value = f"{name}-{'0123abc'}"
            value = value.lower() if named.lower else value
        found.append(named.rule.problem(str(value)))
    found += _special(type_, name, inputs)
    found += _tags(cloud, inputs)
    return [f"{name}: {p}" for p in found if p]
