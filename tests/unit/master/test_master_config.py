"""master.yaml parsing: Determined's keys, DET_* overrides, unknown keys named."""

from __future__ import annotations

from pathlib import Path

import pytest

from det.master.config import MasterConfigError, load_config, parse_config


def test_defaults_match_determined() -> None:
    cfg = parse_config({}, env={})
    assert cfg.port == 8080
    assert cfg.resource_manager.scheduler.type == "priority"
    assert cfg.resource_manager.scheduler.default_priority == 42
    assert [p.pool_name for p in cfg.resource_pools] == ["default"]
    assert cfg.db is None  # the embedded database


def test_unknown_key_is_named_with_its_path() -> None:
    with pytest.raises(MasterConfigError, match=r"unknown key 'resource_manager.scheduler.kind'"):
        parse_config({"resource_manager": {"scheduler": {"kind": "priority"}}}, env={})


def test_wrong_type_names_the_field() -> None:
    with pytest.raises(MasterConfigError, match=r"port: "):
        parse_config({"port": "eighty"}, env={})


def test_environment_overrides_file_values() -> None:
    cfg = parse_config(
        {"port": 8080, "db": {"host": "file-host"}},
        env={"DET_PORT": "9090", "DET_DB_HOST": "env-host", "DET_DB_PASSWORD": "s3cret"},
    )
    assert cfg.port == 9090
    assert cfg.db is not None and cfg.db.host == "env-host" and cfg.db.password == "s3cret"


def test_db_password_never_appears_in_the_redacted_config() -> None:
    cfg = parse_config(
        {"db": {"password": "hunter22"}, "security": {"initial_user_password": "pw"}}, env={}
    )
    assert "hunter22" not in str(cfg.redacted())
    assert "pw" not in str(cfg.redacted()["security"])


def test_config_file_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "master.yaml"
    bad.write_text("port: [1\n")
    with pytest.raises(MasterConfigError, match="invalid YAML"):
        load_config(bad, env={})
    with pytest.raises(MasterConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", env={})


def test_config_document_from_the_environment_for_serverless_platforms(tmp_path: Path) -> None:
    # Cloud Run and Fargate give the container no file: det deploy passes master.yaml as
    # $DET_MASTER_CONFIG and the secrets as their own variables, which still win.
    env = {"DET_MASTER_CONFIG": "port: 8181\ndb:\n  host: db.internal\n", "DET_DB_PASSWORD": "s3"}
    cfg = load_config(None, env=env)
    assert cfg.port == 8181 and cfg.db is not None
    assert cfg.db.host == "db.internal" and cfg.db.password == "s3"
    given = tmp_path / "master.yaml"
    given.write_text("port: 8282\n")
    assert load_config(given, env=env).port == 8282  # a file given wins
    with pytest.raises(MasterConfigError, match=r"invalid YAML in \$DET_MASTER_CONFIG"):
        load_config(None, env={"DET_MASTER_CONFIG": "port: [1\n"})
    with pytest.raises(MasterConfigError, match="unknown key 'bogus'"):
        load_config(None, env={"DET_MASTER_CONFIG": "bogus: 1\n"})


def test_registry_password_comes_from_the_environment_and_stays_hidden() -> None:
    # det deploy writes server and username into master.yaml and the password only into the
    # master's environment file (from the cluster secret).
    cfg = parse_config(
        {
            "task_container_defaults": {
                "image": {"cpu": "r.example.com/t:1"},
                "registry_auth": {"serveraddress": "r.example.com", "username": "bot"},
            }
        },
        env={"DET_TASK_CONTAINER_DEFAULTS_REGISTRY_AUTH_PASSWORD": "reg-s3cret"},
    )
    assert cfg.task_container_defaults_for("default")["registry_auth"] == {
        "serveraddress": "r.example.com",
        "username": "bot",
        "password": "reg-s3cret",
    }
    assert cfg.task_container_defaults["image"] == {"cpu": "r.example.com/t:1"}
    assert "reg-s3cret" not in str(cfg.redacted())


AWS_POOL = {"type": "aws", "image_id": "ami-1", "instance_type": "m5.large", "max_instances": 3}


def test_a_pools_provider_block_is_parsed_once_with_the_master_config() -> None:
    cfg = parse_config(
        {"resource_pools": [{"pool_name": "static"}, {"pool_name": "c", "provider": AWS_POOL}]},
        env={},
    )
    static, cloud = cfg.resource_pools
    assert static.provider_config is None
    parsed = cloud.provider_config
    assert parsed is not None and parsed.max_instances == 3
    assert cloud.provider_config is parsed  # the same model for every reader, not re-parsed
    assert cfg.redacted()["resource_pools"][1]["provider"] == AWS_POOL  # shown as written


def test_a_bad_provider_block_stops_the_config_naming_the_pool_and_field() -> None:
    bad = {**AWS_POOL, "max_instances": -1}
    with pytest.raises(MasterConfigError) as e:
        parse_config(
            {"resource_pools": [{"pool_name": "a"}, {"pool_name": "b", "provider": bad}]}, env={}
        )
    assert str(e.value).startswith(
        "invalid master config: resource_pools[1].provider.max_instances"
    )
    with pytest.raises(MasterConfigError, match=r"resource_pools\[0\]\.provider\.type: required"):
        parse_config({"resource_pools": [{"pool_name": "a", "provider": {}}]}, env={})


def test_the_masters_checkpoint_storage_keys_are_hidden_like_every_stored_config() -> None:
    """GET /api/v1/master/config (admins only) follows the API's one masking rule: S3 keys of
    the master's checkpoint_storage were shown in clear."""
    cfg = parse_config(
        {
            "checkpoint_storage": {
                "type": "s3",
                "bucket": "ckpts",
                "access_key": "AKIA-master",
                "secret_key": "master-s3cret",
            },
            "resource_pools": [
                {
                    "pool_name": "default",
                    "task_container_defaults": {"registry_auth": {"username": "u", "auth": "x1"}},
                }
            ],
        },
        env={},
    )
    shown = cfg.redacted()
    assert shown["checkpoint_storage"] == {
        "type": "s3",
        "bucket": "ckpts",
        "access_key": "********",
        "secret_key": "********",
    }
    assert shown["resource_pools"][0]["task_container_defaults"]["registry_auth"] == {
        "username": "u",
        "auth": "********",
    }
    assert cfg.checkpoint_storage["secret_key"] == "master-s3cret"  # only the answer is masked


def test_serverless_keys_come_from_the_environment() -> None:
    cfg = parse_config(
        {},
        {
            "DET_RUN_LOOPS": "false",
            "DET_MIGRATE_ON_START": "false",
            "DET_REQUEST_TIME_LIMIT_SECONDS": "300",
            "DET_WAKEUPS_TYPE": "cloud_tasks",
            "DET_WAKEUPS_QUEUE": "projects/p/locations/l/queues/q",
        },
    )
    assert (cfg.run_loops, cfg.migrate_on_start) == (False, False)
    assert cfg.request_time_limit_seconds == 300
    assert cfg.wakeups.type == "cloud_tasks" and cfg.wakeups.queue.endswith("/queues/q")  # type: ignore[union-attr]
    defaults = parse_config({})
    assert defaults.run_loops and defaults.migrate_on_start
    assert defaults.request_time_limit_seconds is None and defaults.wakeups.type == "none"


@pytest.mark.parametrize(
    ("limit", "wanted", "expected"),
    [
        (None, None, None),  # no platform limit: a follow runs until its task ends
        (None, 30.0, 30.0),
        (300, None, 290.0),  # Cloud Run's default: 10 s before it
        (30, None, 27.0),  # CloudFront's default origin response timeout
        (60, 30.0, 30.0),  # the long-poll's own cap is shorter
        (3600, None, 3590.0),
        (3, None, 1.5),  # a tiny limit: half of it
    ],
)
def test_long_requests_end_before_the_platform_limit(
    limit: float | None, wanted: float | None, expected: float | None
) -> None:
    cfg = parse_config({"request_time_limit_seconds": limit})
    assert cfg.long_request_seconds(wanted) == expected


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"type": "http"}, "wakeups: url is required when type is http"),
        ({"type": "http", "url": "ftp://x"}, "wakeups: url must be an http:// or https:// URL"),
        ({"type": "cloud_tasks", "queue": "q"}, "wakeups: queue must be projects/PROJECT"),
        ({"type": "eventbridge", "target_arn": "a"}, "wakeups: role_arn is required"),
        ({"type": "sqs"}, "wakeups.type: Input should be"),
        (
            {
                "type": "eventbridge",
                "target_arn": "arn:aws:scheduler:::aws-sdk:cloudwatch:putMetricData",
                "role_arn": "r",
            },
            "wakeups: metric_namespace is required with the putMetricData target",
        ),
    ],
)
def test_a_bad_wakeups_block_is_one_line_naming_the_field(
    block: dict[str, str], message: str
) -> None:
    with pytest.raises(MasterConfigError) as e:
        parse_config({"wakeups": block})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_an_env_override_under_a_null_block_starts_the_block() -> None:
    # `db:` written empty (null) in master.yaml, the host from DET_DB_HOST: the block is the
    # variable's (it used to fail with a TypeError at start).
    cfg = parse_config({"db": None}, env={"DET_DB_HOST": "pg.internal"})
    assert cfg.db is not None and cfg.db.host == "pg.internal"


def test_pass_through_blocks_keep_their_json_values() -> None:
    cfg = parse_config({"telemetry": {"enabled": False, "n": 3, "r": 0.5, "tags": ["a"]}}, env={})
    assert cfg.telemetry == {"enabled": False, "n": 3, "r": 0.5, "tags": ["a"]}
    assert cfg.redacted()["telemetry"] == cfg.telemetry


def test_any_pool_takes_a_price_per_slot_hour_and_agent_hour() -> None:
    cfg = parse_config(
        {"resource_pools": [{"pool_name": "rack", "price": {"slot_hour": 1.2, "agent_hour": 3}}]},
        env={},
    )
    price = cfg.resource_pools[0].price
    assert price is not None and price.hourly(4) == pytest.approx(3 + 4 * 1.2)


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ({"price": {"slot_hour": -1}}, r"resource_pools\.0\.price\.slot_hour: .*greater than"),
        ({"price": {"slot_hours": 1}}, r"unknown key 'resource_pools\.0\.price\.slot_hours'"),
        ({"price": {"agent_hour": "cheap"}}, r"resource_pools\.0\.price\.agent_hour: "),
        ({"price": {"slot_hour": float("inf")}}, r"price\.slot_hour: .*finite"),
        ({"price": {}}, r"resource_pools\.0\.price: give slot_hour or agent_hour"),
        (
            {
                "price": {"slot_hour": 1},
                "provider": {
                    "type": "aws",
                    "region": "us-east-1",
                    "image_id": "ami-1",
                    "instance_type": "m5.large",
                    "cost": {"prices": {"m5.large": 0.1}},
                },
            },
            r"resource_pools\[0\]\.price: give a price or provider\.cost\.prices, not both",
        ),
    ],
)
def test_a_bad_pool_price_is_one_line_naming_the_key(pool: dict[str, object], message: str) -> None:
    with pytest.raises(MasterConfigError, match=message) as e:
        parse_config({"resource_pools": [{"pool_name": "rack", **pool}]}, env={})
    assert "\n" not in str(e.value)
