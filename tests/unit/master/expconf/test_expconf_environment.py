"""The environment block on Docker agents: registry secrets never shown, ignored fields noted."""

from __future__ import annotations

from typing import Any

import yaml

from det.master.expconf import (
    docker_notes,
    parse_experiment_config,
    redact,
    redact_text,
    unredact,
)

BASE: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss"},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp"},
}


def resolved(environment: dict[str, Any]) -> dict[str, Any]:
    return parse_experiment_config({**BASE, "environment": environment}).to_dict()


def test_every_registry_auth_field_of_determined_is_kept_for_the_pull() -> None:
    auth = {
        "username": "u",
        "password": "pw",
        "auth": "dTpwdw==",
        "email": "u@example.com",
        "serveraddress": "reg.example:5000",
        "identitytoken": "idt",
        "registrytoken": "rt",
    }
    assert resolved({"registry_auth": auth})["environment"]["registry_auth"] == auth


def test_redact_hides_secrets_and_leaves_the_input_alone() -> None:
    config = resolved(
        {"registry_auth": {"username": "u", "password": "pw", "identitytoken": "idt"}}
    )
    out = redact(config)
    assert out["environment"]["registry_auth"] == {
        "username": "u",
        "password": "********",
        "auth": None,
        "email": None,
        "serveraddress": None,
        "identitytoken": "********",
        "registrytoken": None,
    }
    assert config["environment"]["registry_auth"]["password"] == "pw"
    assert out["searcher"] == config["searcher"]


def test_redact_returns_configs_without_secrets_as_they_are() -> None:
    config = resolved({"registry_auth": {"username": "u"}})
    assert redact(config) is config
    plain = resolved({})
    assert redact(plain) is plain


def test_the_original_text_loses_its_password() -> None:
    text = (
        "# my experiment\n"
        "entrypoint: python3 train.py\n"
        "environment:\n"
        "  image: reg.example:5000/team/img:1\n"
        "  registry_auth:\n"
        "    username: alice\n"
        "    password: hunter2-long\n"
    )
    out = redact_text(text)
    assert "hunter2-long" not in out
    assert yaml.safe_load(out)["environment"]["registry_auth"] == {
        "username": "alice",
        "password": "********",
    }
    untouched = "# keep my comment\nentrypoint: python3 train.py\n"
    assert redact_text(untouched) == untouched
    assert redact_text("{not: yaml") == "{not: yaml"


def test_kubernetes_and_proxy_fields_load_with_a_note() -> None:
    config = resolved(
        {
            "pod_spec": {"spec": {"containers": [{"name": "determined-container"}]}},
            "proxy_ports": [{"proxy_port": 8888, "proxy_tcp": False}],
        }
    )
    notes = docker_notes(config)
    assert len(notes) == 2
    assert notes[0].startswith("environment.pod_spec is ignored")
    assert notes[1].startswith("environment.proxy_ports (8888) is ignored")
    assert docker_notes(resolved({})) == []


def test_storage_credentials_are_hidden_from_users_and_kept_for_the_trial() -> None:
    config = {
        "checkpoint_storage": {
            "type": "s3",
            "bucket": "b",
            "access_key": "AKIAEXAMPLE",
            "secret_key": "s3cret",
            "endpoint_url": None,
        },
        "environment": {"registry_auth": {"username": "u", "password": "pw"}},
    }
    shown = redact(config)
    assert shown["checkpoint_storage"] == {
        "type": "s3",
        "bucket": "b",
        "access_key": "********",
        "secret_key": "********",
        "endpoint_url": None,
    }
    assert shown["environment"]["registry_auth"]["password"] == "********"
    assert config["checkpoint_storage"]["secret_key"] == "s3cret"  # the input is left alone
    trial = redact(config, storage=False)  # the trial's own copy writes checkpoints with them
    assert trial["checkpoint_storage"] is config["checkpoint_storage"]
    assert trial["environment"]["registry_auth"]["password"] == "********"
    azure = {"checkpoint_storage": {"type": "azure", "container": "c", "connection_string": "x"}}
    assert redact(azure)["checkpoint_storage"]["connection_string"] == "********"
    text = "checkpoint_storage:\n  type: s3\n  bucket: b\n  secret_key: s3cret # keep out\n"
    assert "s3cret" not in redact_text(text) and "bucket: b" in redact_text(text)
    unset = {"checkpoint_storage": {"type": "s3", "bucket": "b", "access_key": None}}
    assert redact(unset) is unset


def test_unredact_puts_stored_secrets_back_where_the_client_sent_the_mask() -> None:
    stored = {
        "environment": {"registry_auth": {"username": "u", "password": "pw", "auth": "a"}},
        "checkpoint_storage": {"type": "s3", "bucket": "b", "access_key": "ak", "secret_key": "sk"},
    }
    sent = redact(stored)
    sent["checkpoint_storage"] = {**sent["checkpoint_storage"], "bucket": "b2"}
    sent["environment"]["registry_auth"]["auth"] = "new-auth"  # changed: kept as sent
    out = unredact(sent, stored)
    assert out["environment"]["registry_auth"] == {
        "username": "u",
        "password": "pw",
        "auth": "new-auth",
    }
    assert out["checkpoint_storage"] == {**stored["checkpoint_storage"], "bucket": "b2"}
    assert sent["checkpoint_storage"]["secret_key"] == "********"  # the input is not changed
    plain = {"environment": {"image": "x"}}
    assert unredact(plain, stored) is plain


def test_unredact_never_fills_a_mask_the_stored_config_has_no_secret_for() -> None:
    """A non-secret key or a secret absent from what is stored keeps the literal mask."""
    sent = {"checkpoint_storage": {"type": "s3", "bucket": "********", "secret_key": "********"}}
    stored = {"checkpoint_storage": {"type": "s3", "bucket": "real-bucket"}}
    assert unredact(sent, stored) == sent
