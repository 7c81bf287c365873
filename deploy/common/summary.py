"""What ``--dry-run`` shows about each resource: its security-relevant settings (pure).

Inputs are the camelCase property maps Pulumi sends to the engine (see ``dryrun.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from det.common.jsontypes import JSONObject, JSONValue
from det.deploy.common.dryrun import Rendered

# What one resource shows: JSON (``--dry-run --json`` prints it as it is).
Summary = JSONObject


def _sg_rule(i: dict[str, Any]) -> Summary:
    proto = i.get("ipProtocol", "?")
    ports = (
        "all"
        if proto == "-1" or i.get("fromPort") is None
        else f"{i.get('fromPort')}-{i.get('toPort')}"
    )
    source = i.get("cidrIpv4") or i.get("cidrIpv6") or f"sg:{i.get('referencedSecurityGroupId')}"
    return {"ingress": f"{'all' if proto == '-1' else proto}/{ports} from {source}"}


def _sg(i: dict[str, Any]) -> Summary:
    egress: list[JSONValue] = [
        f"{e.get('protocol')} to {','.join(e.get('cidrBlocks', []))}" for e in i.get("egress", [])
    ]
    return {"egress": egress or "none"}


def _statements(policy: Any) -> list[JSONValue]:
    doc = json.loads(policy) if isinstance(policy, str) else policy
    out: list[JSONValue] = []
    for s in doc.get("Statement", []):
        actions = s.get("Action")
        actions = ",".join(actions) if isinstance(actions, list) else actions
        resources = s.get("Resource")
        resources = ",".join(resources) if isinstance(resources, list) else resources
        cond = (
            " if " + json.dumps(s["Condition"], separators=(",", ":")) if s.get("Condition") else ""
        )
        out.append(f"{s.get('Effect')} {actions} on {resources}{cond}")
    return out


def _rds(i: dict[str, Any]) -> Summary:
    return {
        "publiclyAccessible": i.get("publiclyAccessible", False),
        "storageEncrypted": i.get("storageEncrypted", False),
        "engine": f"{i.get('engine')} {i.get('engineVersion', '')}".strip(),
    }


def _aurora(i: dict[str, Any]) -> Summary:
    scaling = i.get("serverlessv2ScalingConfiguration") or {}
    return {
        "storageEncrypted": i.get("storageEncrypted", False),
        "engine": f"{i.get('engine')} {i.get('engineVersion', '')}".strip(),
        "capacity": f"{scaling.get('minCapacity')}-{scaling.get('maxCapacity')} ACU"
        if scaling
        else None,
    }


def _pab(i: dict[str, Any]) -> Summary:
    keys = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    return {k: i.get(k, False) for k in keys}


def _sse(i: dict[str, Any]) -> Summary:
    rules = i.get("rules", [])
    algo = [r.get("applyServerSideEncryptionByDefault", {}).get("sseAlgorithm") for r in rules]
    return {"encryption": algo or "none"}


def _ec2(i: dict[str, Any]) -> Summary:
    return {
        "instanceProfile": i.get("iamInstanceProfile"),
        "imdsTokens": i.get("metadataOptions", {}).get("httpTokens", "optional"),
        "rootVolumeEncrypted": i.get("rootBlockDevice", {}).get("encrypted", False),
        "securityGroups": i.get("vpcSecurityGroupIds"),
    }


def _firewall(i: dict[str, Any]) -> Summary:
    allows = [
        f"{a.get('protocol')}/{','.join(a.get('ports', []) or ['all'])}"
        for a in i.get("allows", [])
    ]
    return {
        "direction": i.get("direction", "INGRESS"),
        "allow": allows,
        "from": i.get("sourceRanges") or i.get("sourceTags"),
        "to": i.get("targetTags", "all instances"),
    }


def _cloudsql(i: dict[str, Any]) -> Summary:
    ip = i.get("settings", {}).get("ipConfiguration", {})
    return {
        "publicIp": ip.get("ipv4Enabled", True),
        "privateNetwork": ip.get("privateNetwork"),
        "sslMode": ip.get("sslMode", "ALLOW_UNENCRYPTED_AND_ENCRYPTED"),
    }


def _gcs(i: dict[str, Any]) -> Summary:
    return {
        "uniformBucketLevelAccess": i.get("uniformBucketLevelAccess", False),
        "publicAccessPrevention": i.get("publicAccessPrevention", "inherited"),
        "versioning": i.get("versioning", {}).get("enabled", False),
    }


def _gce(i: dict[str, Any]) -> Summary:
    nics = i.get("networkInterfaces", [])
    return {
        "serviceAccount": i.get("serviceAccount", {}).get("email"),
        "scopes": i.get("serviceAccount", {}).get("scopes"),
        "externalIp": any(n.get("accessConfigs") for n in nics),
        "tags": i.get("tags"),
        "secureBoot": i.get("shieldedInstanceConfig", {}).get("enableSecureBoot", False),
    }


def _member(i: dict[str, Any]) -> Summary:
    scope = i.get("bucket") or i.get("serviceAccountId") or i.get("secretId") or i.get("project")
    return {"role": i.get("role"), "member": i.get("member"), "on": scope}


_BY_TYPE: dict[str, Callable[[dict[str, Any]], Summary]] = {
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": _sg_rule,
    "aws:ec2/securityGroup:SecurityGroup": _sg,
    "aws:iam/rolePolicy:RolePolicy": lambda i: {"statements": _statements(i.get("policy", "{}"))},
    "aws:iam/role:Role": lambda i: {
        "assumedBy": [
            s.get("Principal")
            for s in json.loads(i.get("assumeRolePolicy", "{}")).get("Statement", [])
        ]
    },
    "aws:iam/instanceProfile:InstanceProfile": lambda i: {"role": i.get("role")},
    "aws:rds/instance:Instance": _rds,
    "aws:rds/cluster:Cluster": _aurora,
    "aws:rds/clusterInstance:ClusterInstance": lambda i: {
        "publiclyAccessible": i.get("publiclyAccessible", False),
        "instanceClass": i.get("instanceClass"),
    },
    "aws:s3/bucket:Bucket": lambda i: {"forceDestroy": i.get("forceDestroy", False)},
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": _pab,
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": _sse,
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": lambda i: {
        "objectOwnership": i.get("rule", {}).get("objectOwnership")
    },
    "aws:s3/bucketVersioning:BucketVersioning": lambda i: {
        "versioning": i.get("versioningConfiguration", {}).get("status")
    },
    "aws:ec2/instance:Instance": _ec2,
    "aws:ec2/subnet:Subnet": lambda i: {
        "cidr": i.get("cidrBlock"),
        "publicIpOnLaunch": i.get("mapPublicIpOnLaunch", False),
    },
    "aws:ec2/routeTable:RouteTable": lambda i: {
        "routes": [f"{r.get('cidrBlock')} via {r.get('gatewayId')}" for r in i.get("routes", [])]
        or "local only"
    },
    "aws:secretsmanager/secretVersion:SecretVersion": lambda i: {
        "secretString": i.get("secretString")
    },
    "gcp:compute/firewall:Firewall": _firewall,
    "gcp:sql/databaseInstance:DatabaseInstance": _cloudsql,
    "gcp:sql/user:User": lambda i: {"password": i.get("password")},
    "gcp:storage/bucket:Bucket": _gcs,
    "gcp:compute/instance:Instance": _gce,
    "gcp:projects/iAMMember:IAMMember": _member,
    "gcp:serviceaccount/iAMMember:IAMMember": _member,
    "gcp:storage/bucketIAMMember:BucketIAMMember": _member,
    "gcp:secretmanager/secretIamMember:SecretIamMember": _member,
    "gcp:projects/iAMCustomRole:IAMCustomRole": lambda i: {"permissions": i.get("permissions")},
    "gcp:secretmanager/secretVersion:SecretVersion": lambda i: {"secretData": i.get("secretData")},
}


def summarize(type_: str, inputs: dict[str, Any]) -> Summary:
    fn = _BY_TYPE.get(type_)
    return fn(inputs) if fn else {}


def to_json(rendered: Rendered, cloud: str, cluster_id: str) -> dict[str, Any]:
    return {
        "cloud": cloud,
        "clusterId": cluster_id,
        "resources": [
            {"type": r.type, "name": r.name, "security": summarize(r.type, r.inputs)}
            for r in sorted(rendered.resources, key=lambda r: (r.name, r.type))
        ],
        "outputs": rendered.outputs,
    }


def _fmt(value: Any) -> str:
    if isinstance(value, list):
        return "; ".join(_fmt(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value).lower() if isinstance(value, bool) else str(value)


def table(rows: Iterable[dict[str, Any]]) -> str:
    """One line per setting; the type and name only on a resource's first line."""
    lines: list[tuple[str, str, str]] = []
    for row in rows:
        settings = []
        for key, value in row["security"].items():
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                settings += [f"{key}: {v}" if i == 0 else f"  {v}" for i, v in enumerate(value)]
            else:
                settings.append(f"{key}: {_fmt(value)}")
        for n, setting in enumerate(settings or [""]):
            lines.append((row["type"] if n == 0 else "", row["name"] if n == 0 else "", setting))
    header = ("TYPE", "NAME", "SECURITY-RELEVANT SETTINGS")
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header[:2])]
    out = [f"{header[0]:<{widths[0]}}  {header[1]:<{widths[1]}}  {header[2]}"]
    out += [f"{t:<{widths[0]}}  {n:<{widths[1]}}  {s}".rstrip() for t, n, s in lines]
    return "\n".join(out)
