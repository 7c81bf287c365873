"""The role table is written once (det.master.authz.TABLE) and shown in docs/security.md: the
two must say the same, and the roles must nest (each allows what the weaker ones do)."""

from __future__ import annotations

import itertools
from pathlib import Path

from det.master import authz
from det.master.authz import Held, Role

DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"


def _doc_table() -> dict[str, set[Role]]:
    lines = DOC.read_text().split("## Roles: workspaces as teams", 1)[1].splitlines()
    rows: dict[str, set[Role]] = {}
    header: list[str] = []
    for line in lines:
        if line.startswith("| permission |"):
            header = [c.strip() for c in line.strip("|").split("|")]
            continue
        if header and line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = {
                authz.role_named(name)
                for name, cell in zip(header, cells, strict=True)
                if cell == "yes"
            }
        elif header and rows and not line.startswith("|"):
            break
    return rows


def test_docs_show_the_role_table_the_code_reads() -> None:
    expected = {p: {r for r in Role if p in authz.TABLE[r]} for p in authz.PERMISSIONS}
    assert _doc_table() == expected


def test_each_role_allows_what_the_weaker_roles_do() -> None:
    roles = list(Role)
    for weaker, stronger in itertools.pairwise(roles):
        assert authz.TABLE[weaker] < authz.TABLE[stronger], (weaker, stronger)


def test_an_open_workspaces_implicit_editor_does_not_apply_secrets_nor_assign_roles() -> None:
    implicit = Held(assigned=frozenset(), implicit=frozenset({Role.EDITOR}))
    assigned = Held(assigned=frozenset({Role.EDITOR}), implicit=frozenset())
    assert implicit.allows("experiment.update") and implicit.allows("task.create")
    assert not implicit.allows("template.secrets") and assigned.allows("template.secrets")
    assert not implicit.allows("workspace.assign")


def test_the_weakest_role_is_the_one_a_refusal_names() -> None:
    assert authz.weakest_with("project.view") is Role.VIEWER
    assert authz.weakest_with("experiment.update") is Role.EDITOR
    assert authz.weakest_with("experiment.delete") is Role.WORKSPACE_ADMIN
    assert authz.weakest_with("cluster.assign") is Role.CLUSTER_ADMIN
