"""Each default of the fields below is written once, where the field is declared, and read from
there everywhere else: no class attribute, keyword default, ``.get(key, default)``,
``x if cfg else default`` / ``x or default`` or SQL ``coalesce(..., default)`` types the same
value again in master/ (live code and the SQL in it; migrations are history and not judged).

Migrations are history, but the functions they create run on every query: a function whose body
reads one of these fields (and so falls back to a default of its own) must be listed in
tests/sql_defaults.py, whose entries tests/integration/test_sql_defaults.py runs in PostgreSQL
against the model's default. One model per concept: the hyperparameter classes are declared in
expconf/hyperparameters.py only, and a module-level constant (``TRAINING = "training"``) is
bound in one module of master/, harness/, cli/ and agent/, imported everywhere else.

Each walk is shown failing on planted lines, so a retyped default that reappears is caught."""

from __future__ import annotations

import ast
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
from tests.sql_defaults import SQL_DEFAULTS

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


# -- SQL functions: a field read in a function body falls back to a default of its own ---------

_FUNCTION = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)\s*\(.*?\$\$(.*?)\$\$", re.I | re.S
)


def sql_functions(root: Path) -> dict[str, tuple[str, str]]:
    """Each function the migrations create: ``name -> (migration, body)``, the latest one."""
    found: dict[str, tuple[str, str]] = {}
    for path in sorted((root / MIGRATIONS).glob("*.sql")):
        for m in _FUNCTION.finditer(path.read_text(encoding="utf-8")):
            found[m.group(1)] = (path.name, m.group(2))
    return found


def unchecked_sql_defaults(root: Path) -> list[str]:
    """``function: field (migration)`` for a function reading a judged field, not listed."""
    listed = {(e.function, e.field) for e in SQL_DEFAULTS}
    names = [n for f in FIELDS for n in f.names]
    return [
        f"{fn}: {name} ({migration})"
        for fn, (migration, body) in sorted(sql_functions(root).items())
        for name in names
        if re.search(rf"'{re.escape(name)}'", body) and (fn, name) not in listed
    ]


def test_every_sql_function_that_reads_a_judged_field_is_checked_against_its_default() -> None:
    assert unchecked_sql_defaults(REPO) == []


def test_each_listed_sql_function_exists_and_reads_its_field() -> None:
    functions = sql_functions(REPO)
    for entry in SQL_DEFAULTS:
        assert entry.function in functions, entry.function
        assert f"'{entry.field}'" in functions[entry.function][1], entry
        assert entry.field in {n for f in FIELDS for n in f.names}, entry.field


def test_a_function_reading_a_field_with_no_entry_is_found(tmp_path: Path) -> None:
    folder = tmp_path / MIGRATIONS
    folder.mkdir(parents=True)
    (folder / "0001_x.sql").write_text(
        "CREATE FUNCTION det_restarts(config jsonb) RETURNS int LANGUAGE sql AS $$\n"
        "    SELECT coalesce((config->>'max_restarts')::int, 5)\n$$;\n"
    )
    # A later migration replacing a listed function keeps it listed, under its new body.
    (folder / "0002_y.sql").write_text(
        "CREATE OR REPLACE FUNCTION det_larger_is_better(config jsonb) RETURNS boolean\n"
        "LANGUAGE sql AS $$ SELECT (config->'searcher'->>'smaller_is_better') = 'false' $$;\n"
    )
    assert unchecked_sql_defaults(tmp_path) == ["det_restarts: max_restarts (0001_x.sql)"]
    assert sql_functions(tmp_path)["det_larger_is_better"][0] == "0002_y.sql"


# -- one model per concept: hyperparameter classes and module constants --------------------------

HP_MODEL_FILE = "master/expconf/hyperparameters.py"
_HP_CLASS = re.compile(r"(?:HP|HParam\w*)$")


def hp_model_classes(root: Path) -> list[str]:
    """``path: Class`` for each class modelling a hyperparameter (``...HP``, ``HParam...``)."""
    found: list[str] = []
    for path in sorted((root / "master").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _HP_CLASS.search(node.name):
                found.append(f"{path.relative_to(root).as_posix()}: {node.name}")
    return found


def test_hyperparameters_are_modelled_once() -> None:
    assert {f.split(": ")[0] for f in hp_model_classes(REPO)} == {HP_MODEL_FILE}


def test_a_second_hyperparameter_model_is_found(tmp_path: Path) -> None:
    path = tmp_path / "master" / "searcher" / "hparams.py"
    path.parent.mkdir(parents=True)
    path.write_text("from dataclasses import dataclass\n\n@dataclass\nclass IntHP:\n    x: int\n")
    assert hp_model_classes(tmp_path) == ["master/searcher/hparams.py: IntHP"]


CONSTANT_ROOTS = ("master", "harness", "cli", "agent")
# Bound twice, each for a reason (the name and value agree, the things differ) or as known debt.
TWICE: dict[str, str] = {
    "DEFAULT_ID": "the default workspace's id and the default project's: two rows",
    "COMPLETED": "a trial state (states.py) and the pure searcher's exit marker (searcher.py)",
    "DEFAULT_WORKDIR": "debt: the agent's and the task's default workdir, one det.common constant",
    "HIDDEN": "debt: the agent's and expconf's redaction mask, one det.common constant",
    "PATH": "debt: the task-container-policy route, in the CLI and the master's api",
}


def repeated_constants(root: Path) -> dict[str, list[str]]:
    """``NAME = literal`` bound at module level to the same value in more than one module."""
    where: dict[tuple[str, str], list[str]] = {}
    for top in CONSTANT_ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel in SKIPPED:
                continue
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                target = node.targets[0] if isinstance(node, ast.Assign) else None
                if isinstance(node, ast.AnnAssign):
                    target = node.target
                value = getattr(node, "value", None)
                if not isinstance(target, ast.Name) or not target.id.isupper() or value is None:
                    continue
                try:
                    literal = repr(ast.literal_eval(value))
                except ValueError:
                    continue
                where.setdefault((target.id, literal), []).append(rel)
    return {name: sorted(files) for (name, _), files in where.items() if len(files) > 1}


def test_a_module_constant_is_bound_in_one_module() -> None:
    repeated = repeated_constants(REPO)
    assert sorted(set(repeated) - set(TWICE)) == []
    assert sorted(set(TWICE) - set(repeated)) == [], "a debt paid: drop it from TWICE"


def test_a_constant_bound_again_is_found(tmp_path: Path) -> None:
    for i, rel in enumerate(("harness/core/_train.py", "master/services/trials.py")):
        path = tmp_path / rel
        path.parent.mkdir(parents=True)
        path.write_text(f'TRAINING = "training"\nOTHER: int = {i}\n')
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "x.py").write_text("OTHER = 2\ndef f():\n    TRAINING = 'training'\n")
    assert repeated_constants(tmp_path) == {
        "TRAINING": ["harness/core/_train.py", "master/services/trials.py"]
    }
