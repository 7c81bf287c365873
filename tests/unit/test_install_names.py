"""No instruction anywhere installs the bare name ``det``: on the public package index that name is
an unrelated project, so a reader who follows it gets a stranger's code and no ``det deploy``.
det's distribution is ``det-platform`` (det.common.distribution); the command and the import stay
``det``.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from det.common.distribution import DISTRIBUTION, WHEEL_PREFIX

REPO = Path(__file__).resolve().parents[2]
TEXT = (".md", ".py", ".sh", ".hcl", ".toml", ".yaml", ".yml", ".txt", ".cfg")
# The stand-in of the stranger's package that the boot tests' index serves (never installed).
DECOY = {"tests/fakes/package_index.py"}

PIP_INSTALL = re.compile(r"\bpip3?(?:\s+-\S+)*\s+(?:install|download|wheel)\b([^\n`]*)")
BARE = re.compile(r"^det(\[[^\]]*\])?([<>=!~@].*)?$")
QUOTED_REQUIREMENT = re.compile(r"""["']det(\[[^\]'"]*\]|\s*@|==|>=)""")
MARKDOWN_EXTRA = re.compile(r"`det\[[^\]`]*\]`")


def bare_installs(text: str) -> list[str]:
    """The lines of ``text`` that tell pip to install the bare name ``det``, or write it as a
    requirement (``"det[aws]"``, ``'det @ url'``, `` `det[deploy]` `` in prose)."""
    found = []
    for line in text.splitlines():
        hit = False
        for match in PIP_INSTALL.finditer(line):
            tokens = [t.strip("'\"\\") for t in match.group(1).split()]
            hit = hit or any(BARE.match(t) for t in tokens)
        if hit or QUOTED_REQUIREMENT.search(line) or MARKDOWN_EXTRA.search(line):
            found.append(line.strip())
    return found


def test_no_file_tells_anyone_to_install_the_bare_name() -> None:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    me = str(Path(__file__).relative_to(REPO))
    problems = []
    for name in files:
        path = REPO / name
        if name in DECOY or name == me or not path.is_file():
            continue
        if not (name.endswith(TEXT) or "Dockerfile" in name or name.startswith(".ci/")):
            continue
        problems += [f"{name}: {line}" for line in bare_installs(path.read_text(errors="replace"))]
    assert not problems, "install the distribution det-platform, never det:\n" + "\n".join(problems)


def test_the_checker_finds_each_way_of_writing_it() -> None:
    bad = [
        "pip install 'det[deploy]'",
        "python3 -m pip install --quiet det",
        "RUN pip install --no-index --find-links /w det \\",
        'requirement = "det[agent] @ http://m/x.whl"',
        '    "det[aws,gcp]",',
        "needs `det[master]` installed",
        "pip install det==0.1.0",
    ]
    good = [
        "pip install 'det-platform[deploy]'",
        "pip install ./det_platform-0.1.0-py3-none-any.whl",
        "det deploy aws up --cluster-id demo",
        "import det",
        'metadata.version("det-platform")',
        "pip install determined==0.38.1",
    ]
    assert [bare_installs(line) for line in bad] == [[line.strip()] for line in bad]
    assert [bare_installs(line) for line in good] == [[] for _ in good]


# det-platform is not published on the public index yet (anyone could register the name and the
# runbook would install theirs): docs and messages install from a clone or a wheel built from it.
BY_NAME = re.compile(r"^det-platform(\[[^\]]*\])?([<>=!~].*)?$")
PIP_INSTALL_ONLY = re.compile(r"\bpip3?(?:\s+-\S+)*\s+install\b([^\n`]*)")


def index_installs(text: str) -> list[str]:
    """The lines of ``text`` that tell pip to install ``det-platform`` by name from an index
    (not ``det-platform[x] @ <url or path>``, not a wheel file, not ``.[extras]``, not
    ``--no-index`` from a wheelhouse)."""
    found = []
    for line in text.splitlines():
        for match in PIP_INSTALL_ONLY.finditer(line):
            tokens = [t.strip("'\"\\,") for t in match.group(1).split()]
            if "--no-index" in tokens:  # from a wheelhouse of det's own build
                continue
            for i, token in enumerate(tokens):
                followed_by_url = i + 1 < len(tokens) and tokens[i + 1] == "@"
                if BARE_NAMED(token) and not followed_by_url:
                    found.append(line.strip())
    return found


def BARE_NAMED(token: str) -> bool:
    return bool(BY_NAME.match(token))


def test_no_doc_or_message_installs_det_platform_from_an_index() -> None:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    problems = []
    for name in files:
        path = REPO / name
        # Tests stage installs of their own (a fake index, a test bootstrap's pip spec).
        if name.startswith("tests/") or not path.is_file():
            continue
        if not (name.endswith(TEXT) or "Dockerfile" in name or name.startswith(".ci/")):
            continue
        problems += [f"{name}: {line}" for line in index_installs(path.read_text(errors="replace"))]
    assert not problems, "det-platform is not on the index: install from a clone\n" + "\n".join(
        problems
    )


def test_the_index_install_checker_tells_a_name_from_a_clone_or_wheel() -> None:
    bad = [
        "1. **Tools**: `pip install 'det-platform[deploy]'` and the Pulumi CLI",
        "python3 -m pip install det-platform==0.1.0",
        "\"pip install 'det-platform[master,agent,cli]'\", then run",
    ]
    good = [
        "pip install -e '.[deploy]'",
        "pip install 'dist/det_platform-0.1.0-py3-none-any.whl[deploy]'",
        "pip install 'det-platform[agent] @ http://m/det_platform-0.1.0-py3-none-any.whl'",
        "pip install determined==0.38.1",
    ]
    assert [index_installs(line) for line in bad] == [[line.strip()] for line in bad]
    assert [index_installs(line) for line in good] == [[] for _ in good]


def test_the_distribution_name_is_what_pyproject_declares() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION != "det"
    assert WHEEL_PREFIX == "det_platform"
    assert "det" in project["scripts"] or any(
        line.startswith("det =") for line in (REPO / "pyproject.toml").read_text().splitlines()
    )
