"""Each default of the fields below is written once, where the field is declared, and read from
there everywhere else: no class attribute, keyword default, ``.get(key, default)``,
``x if cfg else default`` / ``x or default`` or SQL ``coalesce(..., default)`` types the same
value again in master/ (live code and the SQL in it; migrations are history and not judged).

The walk is shown failing on planted lines, so a retyped default that reappears is caught."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from det.master.expconf.base import default_of
from det.master.expconf.hyperparameters import LogHP
from det.master.expconf.schema import BindMount, ExperimentConfig, Resources
from det.master.expconf.searcher import (
    UNSET_SAMPLER,
    AdaptiveAshaSearcher,
    RandomSearcher,
    _AshaBase,
    _SearcherBase,
)
from det.master.expconf.storage import SharedFSStorage, _StorageBase
from det.master.scheduler.model import DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT

REPO = Path(__file__).resolve().parents[3]
# Generated from Determined's bindings (say so in their first lines), and the migrations.
SKIPPED = ("master/schemas/_determined.py", "master/api/_determined_routes.py")
MIGRATIONS = "master/db/migrations/"


@dataclass(frozen=True)
class Field:
    names: tuple[str, ...]  # the field and the names it travels under
    value: object  # its default, read from where it is declared
    declared_in: str  # the one file that may write it


FIELDS = (
    Field(
        ("smaller_is_better", "smaller"),
        default_of(_SearcherBase, "smaller_is_better"),
        "master/expconf/searcher.py",
    ),
    Field(
        ("max_concurrent_trials",),
        default_of(RandomSearcher, "max_concurrent_trials"),
        "master/expconf/searcher.py",
    ),
    Field(("divisor",), default_of(_AshaBase, "divisor"), "master/expconf/searcher.py"),
    Field(
        ("max_rungs",), default_of(AdaptiveAshaSearcher, "max_rungs"), "master/expconf/searcher.py"
    ),
    Field(
        ("max_restarts",), default_of(ExperimentConfig, "max_restarts"), "master/expconf/schema.py"
    ),
    Field(
        ("slots_per_trial",), default_of(Resources, "slots_per_trial"), "master/expconf/schema.py"
    ),
    Field(
        ("save_trial_best", "trial_best"),
        default_of(_StorageBase, "save_trial_best"),
        "master/expconf/storage.py",
    ),
    Field(
        ("save_trial_latest", "trial_latest"),
        default_of(_StorageBase, "save_trial_latest"),
        "master/expconf/storage.py",
    ),
    Field(("mode",), default_of(AdaptiveAshaSearcher, "mode"), "master/expconf/searcher.py"),
    # Unset means uniform sampling; the searcher's model says so once.
    Field(("sampler",), UNSET_SAMPLER, "master/expconf/searcher.py"),
    # One default for a bind mount's and shared_fs storage's propagation (both models read it).
    Field(("propagation",), default_of(BindMount, "propagation"), "master/expconf/base.py"),
    # A log hyperparameter's base: expconf's model and the searcher's sampler read one default.
    Field(("base",), default_of(LogHP, "base"), "master/expconf/hyperparameters.py"),
    Field(
        ("max_aux_containers_per_agent", "max_aux", "max_aux_per_instance"),
        DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT,
        "master/scheduler/model.py",
    ),
)


def _literal(value: object) -> str:
    """The ways Python and SQL spell ``value``."""
    if isinstance(value, bool):
        return "(?:True|true)" if value else "(?:False|false)"
    if isinstance(value, float) and value.is_integer():
        return rf"{int(value)}(?:\.0+)?"
    if isinstance(value, str):
        return rf"[\"']{re.escape(value)}[\"']"
    return re.escape(str(value))


def _patterns(field: Field) -> list[re.Pattern[str]]:
    name = "(?:" + "|".join(re.escape(n) for n in field.names) + ")"
    lit = _literal(field.value) + r"(?![\w.])"
    return [
        # an attribute's or parameter's default: `name: int = 100`, `name=100`
        re.compile(rf"\b{name}\b\s*(?::[^=\n]*)?=\s*{lit}"),
        # a pydantic Field's: `name: int = Field(100, ...)`, `Field(default=100)`
        re.compile(rf"\b{name}\b[^\n]*\bField\(\s*(?:default\s*=\s*)?{lit}"),
        # a dict read's: `.get("name", 100)`, `setdefault('name', 100)`
        re.compile(rf"[\"']{name}[\"']\s*,\s*{lit}\s*\)"),
        # a fallback: `cfg.name if cfg else 100`, `raw.get("name") or 100`
        re.compile(rf"\b{name}\b[^\n]*\b(?:else|or)\s+{lit}"),
        # SQL: `coalesce((config->'searcher'->>'name')::boolean, true)`
        re.compile(rf"'{name}'[^\n]*?::\w+\s*\)?\s*,\s*{lit}\s*\)", re.I),
    ]


def retyped_defaults(root: Path) -> list[str]:
    """``path:line: field: text`` for every retyped default under ``root/master``."""
    found: list[str] = []
    files = sorted((root / "master").rglob("*.py")) + sorted((root / "master").rglob("*.sql"))
    for path in files:
        rel = path.relative_to(root).as_posix()
        if rel in SKIPPED or rel.startswith(MIGRATIONS):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for field in FIELDS:
            if rel == field.declared_in:
                continue
            patterns = _patterns(field)
            for i, line in enumerate(lines, 1):
                if any(p.search(line) for p in patterns):
                    found.append(f"{rel}:{i}: {field.names[0]}: {line.strip()}")
    return found


def test_no_default_of_the_expconf_and_pool_fields_is_typed_again() -> None:
    assert retyped_defaults(REPO) == []


def test_the_two_propagation_fields_share_one_default() -> None:
    assert default_of(SharedFSStorage, "propagation") == default_of(BindMount, "propagation")


@pytest.mark.parametrize(
    "line",
    [
        "    smaller_is_better: bool = True",
        '    smaller = raw.get("smaller_is_better", True)',
        "        \" coalesce((e.config->'searcher'->>'smaller_is_better')::boolean, true)\"",
        "        cfg.max_aux_containers_per_agent if cfg else 100,",
        "    def scale_policy(self, *, max_aux_containers_per_agent: int = 100) -> None:",
        "    max_aux_containers_per_agent: int = Field(100, ge=0)",
        '    concurrency = raw.get("max_concurrent_trials") or 16',
        "    divisor: float = 4.0",
        "    trial_best: int = 1",
        '    propagation: str = "rprivate"',
        "    sampler: str = 'random'",
        '        mode = raw.get("mode", "standard")',
        '        base = _number(raw, "base", path) if raw.get("base") is not None else 10.0',
        "    base: float = 10.0",
    ],
)
def test_a_retyped_default_is_found(tmp_path: Path, line: str) -> None:
    path = tmp_path / "master" / "services" / "planted.py"
    path.parent.mkdir(parents=True)
    path.write_text(f"x = 1\n{line}\n")
    assert [f.split(": ", 1)[0] for f in retyped_defaults(tmp_path)] == [
        "master/services/planted.py:2"
    ]


def test_the_declaring_file_and_the_migrations_are_not_judged(tmp_path: Path) -> None:
    for rel in ("master/expconf/searcher.py", "master/db/migrations/0001_x.sql"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "smaller_is_better: bool = True\ncoalesce((c->>'smaller_is_better')::boolean, true)\n"
        )
    assert retyped_defaults(tmp_path) == []
