"""The price table the control-plane estimate of ``up --dry-run`` reads (``costs.py``).

A snapshot, not a live price: on-demand list prices in US dollars for the default region of each
cloud (AWS us-west-2, GCP us-west1), as the providers' public pricing pages below published them
in 2025. Nothing here is fetched at run time; prices change, and other regions differ. Free tiers
are left out (the estimate is what a busy billing account pays). Update the figures and
:data:`AS_OF` together, from the pages in :data:`SOURCES`.
"""

from __future__ import annotations

AS_OF = "2025"
HOURS_PER_MONTH = 730

SOURCES = {
    "aws": (
        "https://aws.amazon.com/ec2/pricing/on-demand/",
        "https://aws.amazon.com/ebs/pricing/",
        "https://aws.amazon.com/vpc/pricing/ (public IPv4 addresses)",
        "https://aws.amazon.com/rds/postgresql/pricing/",
        "https://aws.amazon.com/rds/aurora/pricing/",
        "https://aws.amazon.com/fargate/pricing/",
        "https://aws.amazon.com/elasticloadbalancing/pricing/",
        "https://aws.amazon.com/cloudfront/pricing/",
        "https://aws.amazon.com/secrets-manager/pricing/",
        "https://aws.amazon.com/ecr/pricing/",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "https://aws.amazon.com/eventbridge/pricing/ (Scheduler)",
    ),
    "gcp": (
        "https://cloud.google.com/compute/vm-instance-pricing",
        "https://cloud.google.com/compute/disks-image-pricing",
        "https://cloud.google.com/vpc/network-pricing (external IP addresses)",
        "https://cloud.google.com/sql/pricing",
        "https://cloud.google.com/run/pricing (instance-based billing, tier 1)",
        "https://cloud.google.com/secret-manager/pricing",
        "https://cloud.google.com/artifact-registry/pricing",
        "https://cloud.google.com/tasks/pricing",
    ),
}

REGION = {"aws": "us-west-2", "gcp": "us-west1"}

# AWS, us-west-2.
# EC2 on-demand, Linux, per hour.
AWS_EC2: dict[str, float] = {
    "m6i.large": 0.096,
    "m6i.xlarge": 0.192,
    "m7i.large": 0.1008,
    "t3.medium": 0.0416,
}
# RDS for PostgreSQL, single-AZ, per hour.
AWS_RDS: dict[str, float] = {"db.m7g.large": 0.168, "db.t4g.micro": 0.016, "db.t4g.small": 0.032}
AWS: dict[str, float] = {
    "ebs_gp3_gb_month": 0.08,
    "public_ipv4_hour": 0.005,
    "rds_gp3_gb_month": 0.115,
    # Aurora PostgreSQL (Aurora Standard): Serverless v2 capacity and storage; I/O ($0.20 per
    # million requests) is left out: an idle cluster makes none.
    "aurora_acu_hour": 0.12,
    "aurora_storage_gb_month": 0.10,
    # Fargate, Linux/x86.
    "fargate_vcpu_hour": 0.04048,
    "fargate_gb_hour": 0.004445,
    "alb_hour": 0.0225,
    "alb_lcu_hour": 0.008,
    "secret_month": 0.40,
    "ecr_gb_month": 0.10,
    "alarm_month": 0.10,
    # CloudFront and EventBridge Scheduler charge per request only: nothing while idle.
}

# GCP, us-west1.
GCP_GCE: dict[str, float] = {
    "n1-standard-2": 0.0950,
    "n1-standard-4": 0.1900,
    "e2-standard-2": 0.0670,
}
# Cloud SQL shared-core tiers, per hour.
GCP_SQL_SHARED: dict[str, float] = {"db-f1-micro": 0.0105, "db-g1-small": 0.0350}
GCP: dict[str, float] = {
    "pd_balanced_gb_month": 0.10,
    "external_ip_hour": 0.005,
    # Cloud SQL Enterprise edition: custom tiers per vCPU and GB of memory.
    "sql_vcpu_hour": 0.0413,
    "sql_gb_hour": 0.0070,
    "sql_ssd_gb_month": 0.17,
    # Cloud Run, instance-based billing (CPU always allocated), tier 1 regions.
    "run_vcpu_second": 0.000018,
    "run_gib_second": 0.000002,
    "secret_version_month": 0.06,
    "artifact_gb_month": 0.10,
    # Cloud Tasks charges per operation (the first million a month free): nothing while idle.
}
