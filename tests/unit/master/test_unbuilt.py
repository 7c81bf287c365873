"""Determined routes det does not serve are named in a 501's message; other paths are not."""

from __future__ import annotations

from det.master.api import _unbuilt


def test_names_the_feature_for_an_unserved_role_route_and_points_to_the_readme() -> None:
    msg = _unbuilt.message("POST", "/api/v1/roles/search/by-ids")
    assert msg is not None
    assert "det serves role search, assignment and the roles of a user or group" in msg
    assert "README" in msg


def test_no_feature_line_claims_what_det_now_serves() -> None:
    # Notebooks, shells, commands and the allocation reports are served: a Determined route
    # under them that det lacks is named by its operation, not "det does not run notebooks".
    for prefix in ("/api/v1/notebooks", "/api/v1/shells", "/api/v1/commands", "/resources"):
        assert not any(p.startswith(prefix) for p, _ in _unbuilt._FEATURES), prefix
    msg = _unbuilt.message("PUT", "/api/v1/notebooks/abc/report_idle")
    assert msg is not None and "IdleNotebook" in msg


def test_names_the_operation_for_a_route_without_a_feature_line() -> None:
    msg = _unbuilt.message("GET", "/api/v1/workspaces/3/projects")
    assert msg is not None and "GetWorkspaceProjects" in msg


def test_path_parameters_match_one_segment_only() -> None:
    assert _unbuilt.operation("POST", "/api/v1/tasks/abc/kill") == "KillGenericTask"
    assert _unbuilt.operation("POST", "/api/v1/tasks/a/b/kill") is None


def test_paths_and_methods_determined_does_not_have_get_none() -> None:
    assert _unbuilt.message("GET", "/api/v1/nothing-here") is None
    assert _unbuilt.message("PUT", "/api/v1/agents") is None


def test_a_route_det_serves_is_never_answered_501() -> None:
    served = _unbuilt.served_operations([("PATCH", "/api/v1/tokens/<int:token_id>")])
    assert "PatchAccessToken" in served
    # A malformed id matched no det rule: a plain 404, not "det does not implement".
    assert _unbuilt.message("PATCH", "/api/v1/tokens/not-a-number", served) is None
