"""SQL functions that write a config field's default again, and what each must answer.

A function a migration creates lives in the database; when the field is absent from a stored
config its body falls back to a literal (``det_larger_is_better``:
``coalesce((config->'searcher'->>'smaller_is_better') = 'false', false)``), which is
``searcher.smaller_is_better``'s default typed once more, in SQL. Migrations are history (a
function can only change by a new migration), so the default stays there, and two tests hold
it to the expconf model: tests/unit/master/test_defaults_once.py fails when a migration's
function reads one of the fields it judges without an entry here, and
tests/integration/test_sql_defaults.py runs each entry's function in PostgreSQL on a config
without the field, and with each value, and compares the answers with the model's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from det.common.jsontypes import JSONObject, JSONValue
from det.master.expconf.base import default_of
from det.master.expconf.searcher import _SearcherBase


@dataclass(frozen=True)
class SqlDefault:
    function: str  # the SQL function (its latest definition in the migrations)
    field: str  # the config field whose default its body writes
    default: JSONValue  # the default, read from the model that declares it
    values: tuple[JSONValue, ...]  # values of the field to try besides its absence
    config: Callable[[JSONValue], JSONObject]  # a stored config with the field at this value
    absent: JSONObject  # a stored config without the field
    query: str  # calls the function on a config (%s: the config as jsonb)
    answer: Callable[[JSONValue], JSONValue]  # what the query must give for a field's value


SQL_DEFAULTS = (
    SqlDefault(
        function="det_larger_is_better",
        field="smaller_is_better",
        default=default_of(_SearcherBase, "smaller_is_better", bool),
        values=(True, False),
        config=lambda v: {"searcher": {"name": "single", "metric": "m", "smaller_is_better": v}},
        absent={"searcher": {"name": "single", "metric": "m"}},
        query="SELECT det_larger_is_better(%s::jsonb)",
        answer=lambda smaller: smaller is False,
    ),
)
