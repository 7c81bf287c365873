"""Reading the agent image's Packer templates in tests (python-hcl2 keeps the quotes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

AMI_DIR = Path(__file__).resolve().parents[3] / "agent_ami"


def unquote(value: Any) -> Any:
    return value.strip('"') if isinstance(value, str) else value


def load(name: str) -> dict[str, Any]:
    import hcl2

    with open(AMI_DIR / name) as f:
        parsed: dict[str, Any] = hcl2.load(f)
    return parsed


def _commands(body: dict[str, Any]) -> list[str]:
    """A shell provisioner's commands: its ``inline`` list, or the lines of its ``script`` (as written)."""
    if "script" not in body:
        return [unquote(line) for line in body.get("inline", [])]
    script = AMI_DIR / unquote(body["script"]).removeprefix("${path.root}/")
    return [
        line
        for line in script.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def _provisioners(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    [build] = template["build"]
    return [
        body
        for provisioner in build["provisioner"]
        for name, body in provisioner.items()
        if unquote(name) == kind
    ]


def shell_lines(template: dict[str, Any]) -> list[str]:
    """Every command the template's shell provisioners run, in order."""
    return [line for body in _provisioners(template, "shell") for line in _commands(body)]


def uploads(template: dict[str, Any]) -> list[str]:
    """The ``source`` of every file provisioner."""
    return [unquote(body["source"]) for body in _provisioners(template, "file")]
