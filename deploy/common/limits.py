"""What a real cloud refuses that our fakes (moto, the fake GCE, Pulumi's mocks) accept.

Each rule below is a documented limit, checked by a pure function that returns the problem as
one line (or None). ``det deploy`` checks user input against them before anything is created
(``aws.config``, ``gcp.config``), and the unit tests check every name the programs build from
the longest cluster id the CLI accepts. docs/deploy.md ("Limits checked") lists them with their
sources.

Names Pulumi makes up (no explicit name given) are the logical name plus a random suffix: the
bridged providers' default is ``-`` and 7 hexadecimal digits (:data:`AUTONAME_SUFFIX`); an RDS
instance's identifier gets the 7 digits without the ``-`` (:data:`RDS_AUTONAME_SUFFIX`). The
S3 bucket's autoname is lower-cased, an RDS identifier's is not.
"""

from __future__ import annotations

import re

AUTONAME_SUFFIX = 8
RDS_AUTONAME_SUFFIX = 7

# EC2 RunInstances / ModifyInstanceAttribute: user data is limited to 16 KB, raw (before base64).
EC2_USER_DATA_MAX = 16 * 1024
# GCE metadata: 256 KB per value, 512 KB for all entries together.
GCE_METADATA_VALUE_MAX = 256 * 1024
GCE_METADATA_TOTAL_MAX = 512 * 1024
# EC2, IAM, S3, RDS: at most 50 tags per resource; key 1-128, value 0-256 characters.
AWS_MAX_TAGS = 50
# The tags det itself puts on an agent (provisioner.aws.instance_tags + the deploy's tag and the
# config hash): what is left of AWS_MAX_TAGS is for --add-tag.
AWS_OWN_AGENT_TAGS = 7
# GCE and GCS: at most 64 labels per resource.
GCP_MAX_LABELS = 64
GCP_OWN_LABELS = 4  # det-cluster, managed-by, det-role / det-config-hash (and one spare)
# RDS for PostgreSQL on gp3: 20 GiB to 64 TiB.
RDS_GP3_MIN_GIB = 20
RDS_GP3_MAX_GIB = 65536

_IAM_NAME = re.compile(r"^[\w+=,.@-]+$", re.ASCII)
# Security group names and descriptions (EC2-VPC) and security group rule descriptions: the
# rules' set has no '&', so the stricter set serves for all.
_SG_TEXT = re.compile(r"^[a-zA-Z0-9 ._\-:/()#,@\[\]+=;{}!$*]*$")
# IAM, RDS, S3, Secrets Manager and CloudWatch Logs tags share this set (EC2 accepts more).
_AWS_TAG = re.compile(r"^[\w .:/=+\-@]*$")
_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_GCP_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]*$")
_GCP_LABEL_VALUE = re.compile(r"^[a-z0-9_-]*$")


def _length(what: str, name: str, low: int, high: int) -> str | None:
    if not low <= len(name) <= high:
        return f"{what} {name!r} is {len(name)} characters (allowed: {low}-{high})"
    return None


def iam_name(name: str, high: int) -> str | None:
    """IAM role (64), instance profile (128) and inline policy (128) names."""
    if not _IAM_NAME.match(name):
        return f"IAM name {name!r} has characters other than letters, digits and +=,.@_-"
    return _length("IAM name", name, 1, high)


def s3_bucket(name: str) -> str | None:
    """S3 general purpose bucket names (3-63, lower case, no '_', no '..', reserved affixes)."""
    if problem := _length("S3 bucket name", name, 3, 63):
        return problem
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*[a-z0-9]", name) or ".." in name:
        return f"S3 bucket name {name!r}: only a-z, 0-9, '.' and '-', a letter or digit at each end"
    if name.startswith(("xn--", "sthree-", "amzn-s3-demo-")) or name.endswith(
        ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
    ):
        return f"S3 bucket name {name!r} uses a reserved prefix or suffix"
    return None


def rds_identifier(name: str, high: int = 63) -> str | None:
    """RDS DB instance identifiers (1-63) and snapshot identifiers (1-255): letters, digits and
    '-', a letter first, no '--', no '-' at the end; Terraform's check (which Pulumi runs) also
    wants an instance identifier in lower case."""
    if problem := _length("RDS identifier", name, 1, high):
        return problem
    if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
        return f"RDS identifier {name!r}: lower-case letters, digits and '-', a letter first"
    if "--" in name or name.endswith("-"):
        return f"RDS identifier {name!r}: no '--' and no '-' at the end"
    return None


def secrets_manager_name(name: str) -> str | None:
    if not re.fullmatch(r"[A-Za-z0-9/_+=.@-]{1,512}", name):
        return f"Secrets Manager name {name!r}: 1-512 of A-Z a-z 0-9 /_+=.@-"
    return None


def log_group_name(name: str) -> str | None:
    if not re.fullmatch(r"[.\-_/#A-Za-z0-9]{1,512}", name):
        return f"CloudWatch Logs group {name!r}: 1-512 of A-Z a-z 0-9 . - _ / #"
    return None


def security_group_text(what: str, text: str, *, name: bool = False) -> str | None:
    """Security group names and descriptions, security group rule descriptions (255)."""
    if not _SG_TEXT.match(text):
        bad = sorted({c for c in text if not _SG_TEXT.match(c)})
        return f"{what} {text!r}: {''.join(bad)!r} not allowed (a-z A-Z 0-9 space ._-:/()#,@[]+=;{{}}!$*)"
    if name and text.startswith("sg-"):
        return f"{what} {text!r} may not start with 'sg-'"
    return _length(what, text, 1 if name else 0, 255)


def aws_tag(key: str, value: str) -> str | None:
    """A tag every AWS resource of the cluster accepts (EC2, IAM, S3, RDS, Secrets Manager,
    CloudWatch Logs): key 1-128, value 0-256, letters, digits, spaces and _.:/=+-@, and no
    ``aws:`` prefix."""
    if not 1 <= len(key) <= 128 or len(value) > 256:
        return f"tag {key}={value}: the key must have 1-128 characters and the value at most 256"
    if key.lower().startswith("aws:"):
        return f"tag {key}={value}: keys starting with 'aws:' are reserved"
    for part in (key, value):
        if not _AWS_TAG.match(part):
            return f"tag {key}={value}: only letters, digits, spaces and _.:/=+-@ are allowed"
    return None


def gce_name(name: str) -> str | None:
    """Compute Engine names (instances, networks, subnets, firewalls, addresses): RFC 1035."""
    if not _RFC1035.match(name) or len(name) > 63:
        return f"Compute Engine name {name!r}: 1-63 of a-z 0-9 '-', a letter first, no '-' last"
    return None


def gcs_bucket(name: str) -> str | None:
    """Cloud Storage bucket names (without dots): 3-63, a-z 0-9 - _, a letter or digit at each
    end, not starting with 'goog', not containing 'google' or a close misspelling."""
    if problem := _length("Cloud Storage bucket name", name, 3, 63):
        return problem
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*[a-z0-9]", name):
        return f"Cloud Storage bucket name {name!r}: only a-z, 0-9, '-' and '_'"
    if name.startswith("goog") or looks_like_google(name):
        return f"Cloud Storage bucket name {name!r} may not contain 'google' (or look like it)"
    return None


def looks_like_google(text: str) -> bool:
    """'google', also spelt with look-alike digits (g00gle, goog1e), which Cloud Storage refuses."""
    return "google" in text.lower().translate(str.maketrans("019", "olg"))


def gcp_service_account_id(account: str) -> str | None:
    if not re.fullmatch(r"[a-z][-a-z0-9]{4,28}[a-z0-9]", account):
        return f"service account id {account!r}: 6-30 of a-z 0-9 '-', a letter first"
    return None


def gcp_label(key: str, value: str) -> str | None:
    """GCE and GCS labels: key 1-63 (a lower-case letter first), value 0-63; lower-case
    letters, digits, '_' and '-'."""
    if not (1 <= len(key) <= 63 and _GCP_LABEL_KEY.match(key)):
        return f"label {key}={value}: the key must be 1-63 of a-z 0-9 _ -, starting with a letter"
    if len(value) > 63 or not _GCP_LABEL_VALUE.match(value):
        return f"label {key}={value}: the value must be at most 63 of a-z 0-9 _ -"
    return None


def secret_manager_id(secret_id: str) -> str | None:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,255}", secret_id):
        return f"Secret Manager id {secret_id!r}: 1-255 of A-Z a-z 0-9 _ -"
    return None


def cloud_sql_instance(name: str, project: str) -> str | None:
    """Cloud SQL instance ids: a-z 0-9 '-', a letter first; ``project:instance`` at most 98."""
    if not _RFC1035.match(name):
        return f"Cloud SQL instance {name!r}: a-z 0-9 '-', a letter first, no '-' last"
    if len(f"{project}:{name}") > 98:
        return f"Cloud SQL instance {name!r}: project id and instance id exceed 98 characters"
    return None
