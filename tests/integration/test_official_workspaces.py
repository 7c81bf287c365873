"""Workspaces, projects, configuration templates, experiment move/labels/continue and model
edits, driven by the official ``determined==0.38.1`` CLI and SDK (issue 12), with our own
``det`` beside it. Every answer the official package reads goes through its generated bindings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.compat.official import ensure_official_venv
from tests.integration import cli_support
from tests.integration.cli_support import Det, exp_state, sim_config
from tests.integration.conftest import ADMIN_PASSWORD, Master
from tests.integration.test_official_client_answers import Official

pytestmark = pytest.mark.integration
cli_master = cli_support.threaded_cli_master
det = cli_support.det
sim_agents = cli_support.sim_agents


@pytest.fixture(scope="module")
def official(cli_master: Master, tmp_path_factory: pytest.TempPathFactory) -> Official:
    o = Official(ensure_official_venv(), cli_master, tmp_path_factory.mktemp("official-home"))
    o("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    return o


@pytest.fixture(scope="module")
def finished(cli_master: Master, sim_agents: object) -> Iterator[int]:
    """A finished one-trial experiment with checkpoints."""
    eid = cli_support.create_via_api(cli_master, sim_config("ws-finished", trials=1))
    cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_COMPLETED", 90, "completion")
    yield eid


@pytest.fixture(scope="module")
def registered_source(cli_master: Master, sim_agents: object) -> Iterator[int]:
    """Another finished experiment, whose checkpoints the model tests register."""
    eid = cli_support.create_via_api(cli_master, sim_config("ws-models", trials=1))
    cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_COMPLETED", 90, "completion")
    yield eid


def _set(d: dict[str, Any]) -> dict[str, Any]:
    """A message as the bindings' ``to_json`` gives it, without the optional fields it adds
    as null."""
    return {k: v for k, v in d.items() if v is not None}


def _status(master: Master, method: str, path: str, token: str | None = None, **kw: Any) -> Any:
    r = requests.request(
        method,
        master.url + path,
        headers={"Authorization": f"Bearer {token or master.token}"},
        timeout=10,
        **kw,
    )
    return r


def test_default_workspace_and_project_parse_in_the_bindings(
    cli_master: Master, official: Official
) -> None:
    got = official.python(
        """
        ws = client.get_workspace("Uncategorized")
        projects = [(p.id, p.name, p.workspace_id) for p in ws.list_projects()]
        raw = session.get("/api/v1/workspaces/1").json()
        w = bindings.v1GetWorkspaceResponse.from_json(raw).workspace
        p = bindings.get_GetProject(session, id=1).project
        print(json.dumps({"ws": [ws.id, ws.name], "projects": projects,
                          "immutable": [w.immutable, p.immutable], "key": p.key}))
        """
    )
    assert got["ws"] == [1, "Uncategorized"]
    assert got["projects"] == [[1, "Uncategorized", 1]]
    assert got["immutable"] == [True, True]
    assert got["key"] == "UNCAT"
    # The defaults cannot be archived, renamed or deleted.
    for method, path, body in (
        ("POST", "/api/v1/workspaces/1/archive", None),
        ("DELETE", "/api/v1/projects/1", None),
        ("PATCH", "/api/v1/workspaces/1", {"name": "Mine"}),
    ):
        r = _status(cli_master, method, path, json=body)
        assert r.status_code == 409, (path, r.text)
        assert "default" in r.json()["message"]


def test_workspace_and_project_commands_of_the_official_cli(
    cli_master: Master, official: Official, finished: int
) -> None:
    created = json.loads(official("workspace", "create", "team-a", "--json"))
    assert created["name"] == "team-a" and created["immutable"] is False
    names = [w["name"] for w in json.loads(official("workspace", "list", "--json"))]
    assert names[:1] == ["Uncategorized"] and "team-a" in names
    assert json.loads(official("workspace", "describe", "team-a", "--json"))["id"] == created["id"]
    edited = json.loads(official("workspace", "edit", "team-a", "--name", "team-b", "--json"))
    assert edited["name"] == "team-b"
    assert official.run("workspace", "describe", "team-a").returncode != 0

    p = json.loads(
        official("project", "create", "team-b", "vision", "--description", "cnn", "--json")
    )
    assert (p["name"], p["description"], p["workspaceId"]) == ("vision", "cnn", created["id"])
    assert p["key"] == "VISIO"
    listed = json.loads(official("project", "list", "team-b", "--json"))
    assert [x["name"] for x in listed] == ["vision"]
    out = official("project", "edit", "team-b", "vision", "--description", "resnets", "--json")
    assert json.loads(out)["description"] == "resnets"

    # Move the finished experiment there: the experiment's wire format follows.
    assert "Moved experiment" in official("experiment", "move", str(finished), "team-b", "vision")
    exp = cli_master.get(f"/api/v1/experiments/{finished}")["experiment"]
    assert (exp["projectId"], exp["projectName"]) == (p["id"], "vision")
    assert (exp["workspaceId"], exp["workspaceName"]) == (created["id"], "team-b")
    in_project = json.loads(
        official("project", "list-experiments", "team-b", "vision", "--all", "--json")
    )
    assert [e["id"] for e in in_project] == [finished]
    desc = json.loads(official("project", "describe", "team-b", "vision", "--json"))
    assert desc["numExperiments"] == 1
    default = cli_master.get("/api/v1/experiments", params={"projectId": 1})["experiments"]
    assert finished not in [e["id"] for e in default]

    official("project", "archive", "team-b", "vision")
    assert cli_master.get(f"/api/v1/projects/{p['id']}")["project"]["archived"] is True
    assert cli_master.get(f"/api/v1/experiments/{finished}")["experiment"]["parentArchived"]
    # Nothing moves into an archived project.
    r = official.run("experiment", "move", str(finished), "Uncategorized", "Uncategorized")
    assert r.returncode == 0, r.stderr  # moving out is allowed
    r = official.run("experiment", "move", str(finished), "team-b", "vision")
    assert r.returncode != 0 and "archived" in r.stderr
    official("project", "unarchive", "team-b", "vision")
    official("experiment", "move", str(finished), "team-b", "vision")

    official("workspace", "archive", "team-b")
    assert cli_master.get(f"/api/v1/workspaces/{created['id']}")["workspace"]["archived"]
    official("workspace", "unarchive", "team-b")

    # Deleting a project deletes its (finished) experiments.
    official("project", "create", "team-b", "empty")
    assert "Successfully deleted" in official("project", "delete", "team-b", "empty", "--yes")
    assert "Successfully deleted" in official("project", "delete", "team-b", "vision", "--yes")
    r = _status(cli_master, "GET", f"/api/v1/experiments/{finished}")
    assert r.status_code == 404
    assert "Successfully deleted" in official("workspace", "delete", "team-b", "--yes")
    assert official.run("workspace", "describe", "team-b").returncode != 0


def test_sdk_workspace_project_and_move_to_project(cli_master: Master, official: Official) -> None:
    eid = cli_support.create_via_api(cli_master, sim_config("sdk-move"), activate=False)
    got = official.python(
        f"""
        ws = client.create_workspace("sdk-ws")
        proj = ws.create_project("sdk-proj", description="d")
        exp = client.get_experiment({eid})
        exp.move_to_project("sdk-ws", "sdk-proj")
        listed = [e.id for e in proj.list_experiments()]
        fresh = client.get_experiment({eid})
        print(json.dumps({{"ws": ws.id, "proj": proj.id, "listed": listed,
                          "moved": [exp.project_id, exp.workspace_id],
                          "fresh": [fresh.project_id, fresh.workspace_id],
                          "names": [p.name for p in client.get_workspace("sdk-ws").list_projects()]
                          }}))
        """
    )
    assert got["listed"] == [eid]
    assert got["moved"] == got["fresh"] == [got["proj"], got["ws"]]
    assert got["names"] == ["sdk-proj"]
    # A running or paused experiment keeps its project from being deleted.
    r = _status(cli_master, "DELETE", f"/api/v1/projects/{got['proj']}")
    assert r.status_code == 409 and str(eid) in r.json()["message"]


def test_config_workspace_and_project_place_the_experiment(cli_master: Master) -> None:
    ws = cli_master.post("/api/v1/workspaces", {"name": "placed"})["workspace"]
    proj = cli_master.post(f"/api/v1/workspaces/{ws['id']}/projects", {"name": "here"})["project"]
    text = sim_config("placed") + "workspace: placed\nproject: here\n"
    eid = cli_support.create_via_api(cli_master, text, activate=False)
    exp = cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]
    assert (exp["projectId"], exp["workspaceName"]) == (proj["id"], "placed")
    for extra, field in (
        ("workspace: placed\nproject: nowhere\n", "nowhere"),
        ("workspace: placed\n", "project"),
    ):
        r = _status(
            cli_master,
            "POST",
            "/api/v1/experiments",
            json={"config": sim_config("bad") + extra, "activate": False},
        )
        assert r.status_code in (400, 404), r.text
        assert field in r.json()["message"]


def test_ownership_of_workspaces_and_projects(cli_master: Master) -> None:
    cli_master.post("/api/v1/users", {"user": {"username": "wsuser"}, "password": "wsuser-pw-123"})
    token = cli_master.login("wsuser", "wsuser-pw-123")
    mine = _status(cli_master, "POST", "/api/v1/workspaces", token, json={"name": "wsuser-ws"})
    assert mine.status_code == 200, mine.text
    wid = mine.json()["workspace"]["id"]
    assert mine.json()["workspace"]["username"] == "wsuser"
    admins = cli_master.post("/api/v1/workspaces", {"name": "admins-ws"})["workspace"]
    r = _status(cli_master, "PATCH", f"/api/v1/workspaces/{admins['id']}", token, json={})
    assert r.status_code == 403 and "admin" in r.json()["message"]
    r = _status(cli_master, "POST", "/api/v1/workspaces/1/archive", token)
    assert r.status_code == 403
    # Anyone may add a project to a workspace; its creator owns it, the admin may change it.
    r = _status(
        cli_master, "POST", f"/api/v1/workspaces/{admins['id']}/projects", token, json={"name": "x"}
    )
    assert r.status_code == 200, r.text
    pid = r.json()["project"]["id"]
    r = _status(cli_master, "POST", f"/api/v1/projects/{pid}/archive", token)
    assert r.status_code == 200
    r = _status(cli_master, "PATCH", f"/api/v1/workspaces/{wid}", json={"name": "renamed-by-admin"})
    assert r.status_code == 200 and r.json()["workspace"]["name"] == "renamed-by-admin"


def test_bad_workspace_and_project_input_names_the_field(cli_master: Master) -> None:
    cases: list[tuple[str, str, Any, str]] = [
        ("POST", "/api/v1/workspaces", {"name": ""}, "name"),
        ("POST", "/api/v1/workspaces", {"name": "x" * 600}, "name"),
        ("POST", "/api/v1/workspaces/1/projects", {"name": "k", "key": "no-dash"}, "key"),
        ("POST", "/api/v1/projects/1/move", {"destinationWorkspaceId": "one"}, "destination"),
        ("GET", "/api/v1/workspaces?orderBy=SIDEWAYS", None, "orderBy"),
        ("GET", "/api/v1/workspaces/1/projects?archived=maybe", None, "archived"),
        ("POST", "/api/v1/templates/t1", {"config": [1]}, "config"),
        ("POST", "/api/v1/experiments/1/move", {"destinationProjectId": None}, "destination"),
    ]
    for method, path, body, field in cases:
        r = _status(cli_master, method, path, json=body)
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text)
        assert field in r.json()["message"], (path, r.text)
    r = _status(cli_master, "POST", "/api/v1/workspaces", json={"name": "Uncategorized"})
    assert r.status_code == 409


TEMPLATE = """\
description: from the template
labels: [tpl]
max_restarts: 2
hyperparameters:
  lr: {type: double, minval: 0.5, maxval: 0.6}
  width: 64
resources: {priority: 7}
"""


def test_templates_with_the_official_cli_and_create_with_template(
    cli_master: Master, official: Official, det: Det, tmp_path: Path
) -> None:
    tpl = tmp_path / "tpl.yaml"
    tpl.write_text(TEMPLATE)
    assert "Set template base" in official("template", "set", "base", str(tpl))
    listed = official("template", "list")
    assert "base" in listed
    described = official("template", "describe", "base")
    assert "from the template" in described
    # ``set`` again replaces the config.
    tpl.write_text(TEMPLATE.replace("max_restarts: 2", "max_restarts: 3"))
    official("template", "set", "base", str(tpl))
    assert "max_restarts: 3" in official("template", "describe", "base")

    ctx = cli_support.context_dir(tmp_path)
    cfg = cli_support.write_config(tmp_path, sim_config("tpl-exp"))
    out = official("experiment", "create", str(cfg), str(ctx), "--template", "base", "--paused")
    eid = int(out.split("Created experiment ")[1].split()[0])
    config = cli_master.get(f"/api/v1/experiments/{eid}")["config"]
    assert config["description"] == "from the template"
    assert config["max_restarts"] == 3
    assert config["hyperparameters"]["width"] == {"type": "const", "val": 64}
    # The experiment's own values win: its lr range and name.
    assert config["hyperparameters"]["lr"]["minval"] == 0.01
    assert config["name"] == "tpl-exp"
    assert config["resources"]["priority"] == 7

    # ``template:`` in the config names it too; our CLI creates from it the same way.
    det.login()
    cfg2 = cli_support.write_config(tmp_path, sim_config("tpl-2") + "template: base\n", "t2.yaml")
    r = det.ok("experiment", "create", str(cfg2), str(ctx), "--paused")
    eid2 = int(r.out.split("Created experiment ")[1].split()[0])
    assert cli_master.get(f"/api/v1/experiments/{eid2}")["config"]["max_restarts"] == 3
    r = det("experiment", "create", str(cfg), str(ctx), "--template", "missing", "--paused")
    assert r.rc != 0 and "template" in r.err

    ours = det.ok("template", "list", "--json").json()
    assert [t["name"] for t in ours] == ["base"]
    assert det.ok("template", "describe", "base", "--json").json()["config"]["max_restarts"] == 3
    assert "Removed template base" in official("template", "remove", "base")
    assert det.ok("template", "list", "--json").json() == []
    r = official.run("template", "describe", "base")
    assert r.returncode != 0 and "not found" in (r.stdout + r.stderr)


def test_our_cli_workspace_project_template_nouns(
    cli_master: Master, official: Official, det: Det, tmp_path: Path
) -> None:
    det.login()
    det.ok("workspace", "create", "ours")
    mine = det.ok("workspace", "describe", "ours", "--json").json()
    theirs = json.loads(official("workspace", "describe", "ours", "--json"))
    assert _set(mine) == _set(theirs)
    det.ok("project", "create", "ours", "p1", "--description", "first")
    assert _set(det.ok("project", "describe", "ours", "p1", "--json").json()) == _set(
        json.loads(official("project", "describe", "ours", "p1", "--json"))
    )
    assert [p["name"] for p in det.ok("project", "list", "ours", "--json").json()] == ["p1"]
    det.ok("workspace", "create", "other")
    det.ok("project", "move", "ours", "p1", "other")
    assert [p["name"] for p in det.ok("project", "list", "other", "--json").json()] == ["p1"]
    det.ok("project", "archive", "other", "p1")
    det.ok("project", "unarchive", "other", "p1")
    det.ok("project", "edit", "other", "p1", "--new-name", "p2")
    table = det.ok("project", "list", "other").out
    assert "p2" in table
    eid = cli_support.create_via_api(cli_master, sim_config("ours-move"), activate=False)
    det.ok("experiment", "move", str(eid), "other", "p2")
    exps = det.ok("project", "list-experiments", "other", "p2", "--json").json()
    assert [e["id"] for e in exps] == [eid]
    det.ok("experiment", "kill", str(eid))
    cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_CANCELED", 30, "kill")
    det.ok("project", "delete", "other", "p2", "--yes")
    det.ok("workspace", "archive", "ours")
    assert det.ok("workspace", "list", "--json").json()[-2]["archived"] is True
    det.ok("workspace", "unarchive", "ours")
    det.ok("workspace", "delete", "ours", "--yes")
    r = det("workspace", "describe", "ours")
    assert r.rc != 0 and "ours" in r.err

    tpl = tmp_path / "t.yaml"
    tpl.write_text("max_restarts: 1\n")
    det.ok("template", "set", "mine", str(tpl))
    assert "mine" in official("template", "list")
    det.ok("template", "remove", "mine")


def test_labels_with_sdk_and_both_clis(cli_master: Master, official: Official, det: Det) -> None:
    eid = cli_support.create_via_api(cli_master, sim_config("labels"), activate=False)
    got = official.python(
        f"""
        exp = client.get_experiment({eid})
        exp.add_label("a")
        exp.add_label("b")
        exp.add_label("a")
        after_add = sorted(exp.labels)
        exp.remove_label("a")
        print(json.dumps({{"add": after_add, "remove": sorted(exp.labels)}}))
        """
    )
    assert got == {"add": ["a", "b"], "remove": ["b"]}
    official("experiment", "label", "add", str(eid), "c")
    assert cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]["labels"] == ["b", "c"]
    official("experiment", "label", "remove", str(eid), "b")
    det.login()
    det.ok("experiment", "label", "add", str(eid), "d")
    det.ok("experiment", "label", "remove", str(eid), "c")
    assert cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]["labels"] == ["d"]


def test_continue_of_an_experiment_that_has_not_ended_is_refused(
    cli_master: Master, official: Official
) -> None:
    # Continuing itself is tested in test_cli_experiments and test_cli_matches_official.
    eid = cli_support.create_via_api(cli_master, sim_config("cont"), activate=False)
    r = _status(cli_master, "POST", "/api/v1/experiments/continue", json={"id": eid})
    assert r.status_code == 409
    assert "only an experiment that ended" in r.json()["message"]
    res = official.run("experiment", "continue", str(eid))
    assert res.returncode != 0
    assert "only an experiment that ended" in res.stderr
    assert "Traceback" not in res.stderr
    assert cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_PAUSED"


def test_model_edits_with_the_sdk_and_official_cli(
    cli_master: Master, official: Official, registered_source: int
) -> None:
    ckpts = cli_master.get(f"/api/v1/experiments/{registered_source}/checkpoints")["checkpoints"]
    uuid = next(c["uuid"] for c in ckpts if c["state"] == "STATE_COMPLETED")
    cli_master.post("/api/v1/workspaces", {"name": "models-ws"})
    got = official.python(
        f"""
        m = client.create_model("edit-me", description="old")
        m.set_description("new")
        m.set_labels(["x", "y"])
        m.add_metadata({{"k": 1, "j": 2}})
        m.remove_metadata(["j"])
        m.archive()
        archived = client.get_model("edit-me").archived
        m.unarchive()
        v = m.register_version("{uuid}")
        v.set_name("v-one")
        v.set_notes("notes here")
        again = m.get_version(1)
        m.move_to_workspace("models-ws")
        fresh = client.get_model("edit-me")
        print(json.dumps({{"desc": fresh.description, "labels": fresh.labels,
                          "meta": fresh.metadata, "archived": [archived, fresh.archived],
                          "vname": again.name, "vnotes": again.notes,
                          "ws": fresh.workspace_id}}))
        """
    )
    ws = cli_master.get("/api/v1/workspaces", params={"name": "models-ws"})["workspaces"][0]
    assert got == {
        "desc": "new",
        "labels": ["x", "y"],
        "meta": {"k": 1},
        "archived": [True, False],
        "vname": "v-one",
        "vnotes": "notes here",
        "ws": ws["id"],
    }
    official("model", "move", "edit-me", "-w", "Uncategorized")
    assert cli_master.get("/api/v1/models/edit-me")["model"]["workspaceId"] == 1
    official.python(
        """
        client.get_model("edit-me").get_version(1).delete()
        print(json.dumps(len(client.get_model("edit-me").list_versions())))
        """
    )
    assert cli_master.get("/api/v1/models/edit-me/versions")["modelVersions"] == []
    official("model", "delete", "edit-me")
    r = _status(cli_master, "GET", "/api/v1/models/edit-me")
    assert r.status_code == 404


def test_our_cli_model_edits_show_in_the_official_sdk(
    cli_master: Master, official: Official, det: Det, registered_source: int
) -> None:
    det.login()
    det.ok("model", "create", "ours-model", "--description", "d")
    det.ok("model", "edit", "ours-model", "--description", "e", "--labels", "p,q")
    det.ok("model", "add-metadata", "ours-model", "k=v", "z=1")
    det.ok("model", "remove-metadata", "ours-model", "z")
    det.ok("model", "archive", "ours-model")
    cli_master.post("/api/v1/workspaces", {"name": "ours-models"})
    det.ok("model", "move", "ours-model", "-w", "ours-models")
    got = official.python(
        """
        m = client.get_model("ours-model")
        print(json.dumps([m.description, m.labels, m.metadata, m.archived, m.workspace_id]))
        """
    )
    ws = cli_master.get("/api/v1/workspaces", params={"name": "ours-models"})["workspaces"][0]
    assert got == ["e", ["p", "q"], {"k": "v"}, True, ws["id"]]
    ckpts = cli_master.get(f"/api/v1/experiments/{registered_source}/checkpoints")["checkpoints"]
    uuid = next(c["uuid"] for c in ckpts if c["state"] == "STATE_COMPLETED")
    r = det("model", "register-version", "ours-model", uuid)
    assert r.rc != 0 and "archived" in r.err
    det.ok("model", "unarchive", "ours-model")
    det.ok("model", "register-version", "ours-model", uuid)
    det.ok("model", "delete-version", "ours-model", "1")
    assert cli_master.get("/api/v1/models/ours-model/versions")["modelVersions"] == []
    det.ok("model", "delete", "ours-model")
    assert det("model", "describe", "ours-model").rc != 0


def test_model_list_filters_sorts_and_pages_as_the_bindings_ask(
    cli_master: Master, official: Official
) -> None:
    """GetModels' filters, as the official bindings send them (repeated keys for lists)."""
    ws = cli_master.post("/api/v1/workspaces", {"name": "flt-ws"})["workspace"]["id"]
    cli_master.post(
        "/api/v1/models",
        {
            "name": "flt-alpha",
            "description": "first ResNet",
            "labels": ["a", "b"],
            "workspaceId": ws,
        },
    )
    cli_master.post(
        "/api/v1/models", {"name": "flt-beta", "description": "second", "labels": ["b"]}
    )
    cli_master.post("/api/v1/models/flt-beta/archive", {})
    cli_master.post(
        "/api/v1/models", {"name": "flt-gAMMA", "description": "third resnet", "labels": ["a"]}
    )
    got = official.python(
        f"""
        B = bindings
        def names(**kw):
            r = B.get_GetModels(session, **kw)
            return [m.name for m in r.models]
        page = B.get_GetModels(session, name="flt", sortBy=B.v1GetModelsRequestSortBy.NAME,
                               offset=1, limit=1)
        print(json.dumps({{
            "name": names(name="flt-a"),
            "any_case": names(name="FLT-", sortBy=B.v1GetModelsRequestSortBy.NAME),
            "desc": names(name="flt", description="RESNET"),
            "labels": names(name="flt", labels=["a", "b"]),
            "label": names(name="flt", labels=["b"]),
            "unarchived": names(name="flt", archived=False),
            "archived": names(name="flt", archived=True),
            "ws_ids": names(name="flt", workspaceIds=[{ws}]),
            "ws_names": names(name="flt", workspaceNames=["flt-ws"]),
            "users": names(name="flt", users=["nobody-here"]),
            "user_ids": names(name="flt", userIds=[1_000_000]),
            "id": names(id=B.get_GetModel(session, modelName="flt-beta").model.id),
            "desc_order": names(name="flt", sortBy=B.v1GetModelsRequestSortBy.NAME,
                                orderBy=B.v1OrderBy.DESC),
            "page": [[m.name for m in page.models], page.pagination.total],
        }}))
        """
    )
    assert got == {
        "name": ["flt-alpha"],
        "any_case": ["flt-alpha", "flt-beta", "flt-gAMMA"],
        "desc": ["flt-alpha", "flt-gAMMA"],
        "labels": ["flt-alpha"],
        "label": ["flt-alpha", "flt-beta"],
        "unarchived": ["flt-alpha", "flt-gAMMA"],
        "archived": ["flt-beta"],
        "ws_ids": ["flt-alpha"],
        "ws_names": ["flt-alpha"],
        "users": [],
        "user_ids": [],
        "id": ["flt-beta"],
        "desc_order": ["flt-gAMMA", "flt-beta", "flt-alpha"],
        "page": [["flt-beta"], 3],
    }
    r = _status(cli_master, "GET", "/api/v1/models?sortBy=SORT_BY_SIZE")
    assert r.status_code == 400 and "sortBy" in r.json()["message"], r.text


def test_model_labels_most_used_first_with_the_sdk(cli_master: Master, official: Official) -> None:
    """client.get_model_labels(): every label on a model, the most used first (det refused
    GetModelLabels); a workspace's own when asked."""
    ws = cli_master.post("/api/v1/workspaces", {"name": "labels-ws"})["workspace"]["id"]
    for name, labels, workspace in (
        ("lab-a", ["l-vision", "l-prod"], 1),
        ("lab-b", ["l-vision"], 1),
        ("lab-c", ["l-vision", "l-audio", "l-prod"], ws),
    ):
        cli_master.post(
            "/api/v1/models", {"name": name, "labels": labels, "workspaceId": workspace}
        )
    got = official.python("print(json.dumps(client.get_model_labels()))")
    # other tests of this module label their models too: the order among these three is checked
    mine = [label for label in got if label.startswith("l-")]
    assert mine == ["l-vision", "l-prod", "l-audio"]
    only = cli_master.get("/api/v1/model/labels", params={"workspaceId": ws})["labels"]
    assert only == ["l-audio", "l-prod", "l-vision"]  # one use each: by name
