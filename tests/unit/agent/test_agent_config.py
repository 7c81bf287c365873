from __future__ import annotations

from pathlib import Path

import pytest

from det.agent.config import AgentConfigError, load_config

MASTER = ["--master-url", "http://master:8080"]


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "node-7")
    cfg = load_config(MASTER, environ={})
    assert cfg.agent_id == "node-7"
    assert cfg.resource_pool == "default"
    assert cfg.slot_type == "auto"
    assert cfg.container_network_mode == "host"
    assert cfg.preemption_notice == "none" and cfg.notice_url() is None
    assert cfg.artificial_slots == 0


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    f = tmp_path / "agent.yaml"
    f.write_text(
        "master_url: http://from-file:8080/\n"
        "agent_id: file-id\n"
        "resource_pool: gpu-pool\n"
        "labels: {zone: a}\n"
        "heartbeat_seconds: 3\n"
    )
    env = {"DET_AGENT_ID": "env-id", "DET_RESOURCE_POOL": "env-pool", "DET_LABELS": "zone=b,rack=7"}
    cfg = load_config(["--config-file", str(f), "--agent-id", "flag-id"], environ=env)
    assert cfg.master_url == "http://from-file:8080"  # trailing slash dropped
    assert cfg.agent_id == "flag-id"
    assert cfg.resource_pool == "env-pool"
    assert cfg.labels == {"zone": "b", "rack": "7"}
    assert cfg.heartbeat_seconds == 3.0


def test_config_file_from_environment(tmp_path: Path) -> None:
    f = tmp_path / "agent.yaml"
    f.write_text("master_url: http://m:1\nartificial_slots: 4\nslot_type: cpu\n")
    cfg = load_config([], environ={"DET_CONFIG_FILE": str(f)})
    assert (cfg.artificial_slots, cfg.slot_type) == (4, "cpu")


def test_unknown_key_in_file_is_rejected_by_name(tmp_path: Path) -> None:
    f = tmp_path / "agent.yaml"
    f.write_text("master_url: http://m:1\nslot_typo: gpu\n")
    with pytest.raises(AgentConfigError, match=r"slot_typo .*unknown key"):
        load_config(["--config-file", str(f)], environ={})


def test_bad_value_names_field_and_origin() -> None:
    with pytest.raises(AgentConfigError, match=r"slot_type \(from \$DET_SLOT_TYPE\)"):
        load_config(MASTER, environ={"DET_SLOT_TYPE": "tpu"})


def test_master_url_needs_a_scheme() -> None:
    with pytest.raises(AgentConfigError, match=r"master_url.*http://"):
        load_config(["--master-url", "master:8080"], environ={})


def test_missing_master_url() -> None:
    with pytest.raises(AgentConfigError, match="master_url"):
        load_config([], environ={})


def test_labels_flag_repeatable_and_json_env() -> None:
    cfg = load_config([*MASTER, "--label", "a=1", "--label", "b=2"], environ={})
    assert cfg.labels == {"a": "1", "b": "2"}
    cfg = load_config(MASTER, environ={"DET_LABELS": '{"x": "y"}'})
    assert cfg.labels == {"x": "y"}
    with pytest.raises(AgentConfigError, match="DET_LABELS"):
        load_config(MASTER, environ={"DET_LABELS": "novalue"})


def test_token_from_file(tmp_path: Path) -> None:
    token_file = tmp_path / "agent_token"
    token_file.write_text("s3cret\n")
    cfg = load_config([*MASTER, "--agent-token-file", str(token_file)], environ={})
    assert cfg.token() == "s3cret"
    assert load_config([*MASTER, "--agent-token", "direct"], environ={}).token() == "direct"


def test_unreadable_token_file_is_a_config_error(tmp_path: Path) -> None:
    cfg = load_config([*MASTER, "--agent-token-file", str(tmp_path / "missing")], environ={})
    with pytest.raises(AgentConfigError, match="agent_token_file"):
        cfg.token()


def test_preemption_notice_default_urls() -> None:
    aws = load_config([*MASTER, "--preemption-notice", "aws"], environ={})
    assert aws.notice_url() == "http://169.254.169.254"
    gcp = load_config(
        [*MASTER, "--preemption-notice", "gcp", "--preemption-metadata-url", "http://127.0.0.1:9"],
        environ={},
    )
    assert gcp.notice_url() == "http://127.0.0.1:9"


def test_negative_artificial_slots_rejected() -> None:
    with pytest.raises(AgentConfigError, match="artificial_slots"):
        load_config([*MASTER, "--artificial-slots", "-1"], environ={})


def test_no_task_mounts_the_config_file_that_holds_the_token(tmp_path: Path) -> None:
    # A deployed agent's agent.yaml (written 0600 by its bootstrap) carries agent_token: the
    # agent refuses a task's mount of it, of its directory or of anything above, as it does for
    # its state and a token file. Before, only agent_token_file was protected.
    from det.agent.mount_guard import MountGuard, MountRefused

    etc = tmp_path / "etc" / "det"
    etc.mkdir(parents=True)
    agent_yaml = etc / "agent.yaml"
    agent_yaml.write_text("agent_token: s3cret\n")
    cfg = load_config(
        [*MASTER, "--config-file", str(agent_yaml), "--state-dir", str(tmp_path / "state")],
        environ={},
    )
    assert cfg.token() == "s3cret" and cfg.config_file == agent_yaml
    guard = MountGuard(cfg.own_paths())
    for source in (agent_yaml, etc, tmp_path / "etc"):
        with pytest.raises(MountRefused, match=f"exposes {agent_yaml}"):
            guard.check([{"hostPath": str(source), "containerPath": "/x"}])
    guard.check([{"hostPath": str(tmp_path / "data"), "containerPath": "/data"}])  # allowed
    from_env = load_config(MASTER, environ={"DET_CONFIG_FILE": str(agent_yaml)})
    assert from_env.config_file == agent_yaml and agent_yaml in from_env.own_paths()


def test_context_after_start_is_on_unless_a_flag_or_the_file_turns_it_off(tmp_path: Path) -> None:
    assert load_config(MASTER, environ={}).context_after_start is True
    assert (
        load_config([*MASTER, "--no-context-after-start"], environ={}).context_after_start is False
    )
    f = tmp_path / "agent.yaml"
    f.write_text("context_after_start: false\n")
    cfg = load_config([*MASTER, "--config-file", str(f)], environ={})
    assert cfg.context_after_start is False
