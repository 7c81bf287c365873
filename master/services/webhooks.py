"""Webhooks (Determined's open-source edition): rows, rules, and the events they queue.

Events are queued in ``webhook_events`` in the transaction that caused them (an experiment's
state change, a task's log line, a custom event from training code), so a rolled-back change
queues nothing. Each event gets an id (a DEFAULT payload's ``event_id``) and its trigger type,
kept across every attempt and re-send. Nothing here makes a network call:
:mod:`det.master.services.webhook_delivery` sends the queue outside any transaction, one queue
per receiver. :func:`patch` changes a webhook's URL or triggers with its queued events kept;
:func:`resend` queues dead letters again. Payload shapes follow Determined 0.38's master
(``event_id``, ``event_type``, ``timestamp``, ``condition``, ``event_data``; Slack ``blocks``).

URL rule: http(s) only, with a host. Global webhooks are for admins; a webhook made by a
non-admin (a workspace's owner) is held to the egress policy (:mod:`det.master.egress`: no
loopback, private, link-local, CGNAT, unique-local... address, none of this host's own), checked
when it is made (:func:`check_url`) and at each delivery on the address connected to.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import re
import time
import uuid
from typing import Any, Literal
from urllib.parse import urlsplit

from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject, JSONValue
from det.master import db, egress, limits, states
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound
from det.master.expconf import stored
from det.master.schemas import d

DEFAULT, SLACK = "DEFAULT", "SLACK"
STATE_CHANGE, TASK_LOG, CUSTOM = "EXPERIMENT_STATE_CHANGE", "TASK_LOG", "CUSTOM"
WORKSPACE_MODE, SPECIFIC_MODE = "WORKSPACE", "SPECIFIC"
_EXPERIMENT_STATES = frozenset(
    {"ACTIVE", "PAUSED", "STOPPING_CANCELED", "STOPPING_KILLED", "STOPPING_COMPLETED",
     "STOPPING_ERROR", "COMPLETED", "CANCELED", "ERROR", "DELETING"}
)  # fmt: skip
URL_MAX = 2048
REGEX_MAX = 1024

WebhookType = Literal["DEFAULT", "SLACK"]
Mode = Literal["WORKSPACE", "SPECIFIC"]
_WIRE_TYPE: dict[WebhookType, d.v1WebhookType] = {
    "DEFAULT": "WEBHOOK_TYPE_DEFAULT",
    "SLACK": "WEBHOOK_TYPE_SLACK",
}
_WIRE_MODE: dict[Mode, d.v1WebhookMode] = {
    "WORKSPACE": "WEBHOOK_MODE_WORKSPACE",
    "SPECIFIC": "WEBHOOK_MODE_SPECIFIC",
}
_WIRE_TRIGGER: dict[str, d.v1TriggerType] = {
    STATE_CHANGE: "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
    TASK_LOG: "TRIGGER_TYPE_TASK_LOG",
    CUSTOM: "TRIGGER_TYPE_CUSTOM",
}


class Condition(TypedDict, total=False):
    """``webhook_triggers.condition``: ``{"state": S}`` (a state change), ``{"regex": R}`` (a
    task log) or ``{}`` (a custom event)."""

    state: str
    regex: str


@dataclasses.dataclass(frozen=True, slots=True)
class Trigger:
    """A ``webhook_triggers`` row."""

    id: int
    webhook_id: int
    trigger_type: str
    condition: Condition


@dataclasses.dataclass(frozen=True, slots=True)
class Webhook:
    """A ``webhooks`` row with its triggers (by id)."""

    id: int
    name: str
    url: str
    webhook_type: WebhookType
    mode: Mode
    #: None: a global webhook.
    workspace_id: int | None
    created_by: int | None
    created_at: dt.datetime
    triggers: tuple[Trigger, ...] = ()


DeliveryState = Literal["PENDING", "DELIVERED", "DEAD"]


class Delivery(TypedDict):
    """A ``webhook_events`` row as :func:`events` reads it (handed on to the JSON answer).
    ``state``: DEAD is a dead letter (retries ran out or a final 4xx) until re-sent."""

    id: int
    event_id: uuid.UUID
    event_type: str
    state: DeliveryState
    resends: int
    created_at: dt.datetime
    attempts: int
    last_status: int | None
    last_error: str | None
    last_attempt_at: dt.datetime | None
    delivered_at: dt.datetime | None
    failed_at: dt.datetime | None
    next_attempt_at: dt.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class _Hook:
    """A trigger of one kind joined with its webhook (:func:`_hooks`)."""

    trigger_id: int
    condition: Condition
    webhook_id: int
    name: str
    url: str
    webhook_type: WebhookType
    mode: Mode
    workspace_id: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Experiment:
    """An experiment as its events describe it (``_EXPERIMENT``)."""

    id: int
    name: str
    state: str
    config: JSONObject
    created_at: dt.datetime
    ended_at: dt.datetime | None
    project: str | None
    workspace: str | None
    workspace_id: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Task:
    """A trial's task with its experiment's config and workspace (``_TASK``)."""

    experiment_id: int
    trial_id: int
    config: JSONObject
    workspace_id: int


@dataclasses.dataclass(frozen=True, slots=True)
class _ExperimentHooks:
    """An experiment config's ``integrations.webhooks``: Determined's ``exclude``,
    ``webhook_id`` and ``webhook_name``."""

    exclude: bool = False
    webhook_ids: tuple[JSONValue, ...] = ()
    webhook_names: tuple[JSONValue, ...] = ()


# -- wire <-> stored names ----------------------------------------------------------------------
def _enum(field: str, value: object, prefix: str, allowed: tuple[str, ...], default: str) -> str:
    if value in (None, "", f"{prefix}UNSPECIFIED"):
        if default:
            return default
        raise InvalidArgument(
            f"{field}: required, one of " + ", ".join(prefix + a for a in allowed)
        )
    name = str(value).removeprefix(prefix)
    if name not in allowed:
        raise InvalidArgument(
            f"{field}: {value!r} is not one of " + ", ".join(prefix + a for a in allowed)
        )
    return name


def check_url(url: object, policy: egress.Policy) -> str:
    """The webhook's URL, or InvalidArgument: http(s) with a host, no credentials, and for a
    non-admin's webhook a host the egress policy lets it reach (checked again at delivery, on
    the address connected to)."""
    text = limits.text("url", url, URL_MAX, required=True)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument("url: must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise InvalidArgument("url: must not carry a user name or password")
    try:
        parts.port  # noqa: B018 (a port that is no number raises here)
    except ValueError:
        raise InvalidArgument("url: the port must be a number from 0 to 65535") from None
    why = egress.check_host(parts.hostname, policy)
    if why:
        raise InvalidArgument(
            f"url: {why}; only an admin's webhook or a host in egress.allowed_hosts may use it"
        )
    return text


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _trigger(i: int, t: d.v1Trigger, mode: str) -> tuple[str, Condition]:
    field = f"triggers[{i}]"
    if not isinstance(t, dict):
        raise InvalidArgument(f"{field}: must be an object")
    kind = _enum(
        f"{field}.triggerType",
        t.get("triggerType"),
        "TRIGGER_TYPE_",
        (STATE_CHANGE, TASK_LOG, CUSTOM, "METRIC_THRESHOLD_EXCEEDED"),
        "",
    )
    cond = t.get("condition") or {}
    if not isinstance(cond, dict):
        raise InvalidArgument(f"{field}.condition: must be an object")
    if kind == "METRIC_THRESHOLD_EXCEEDED":
        raise InvalidArgument(f"{field}.triggerType: det does not fire metric-threshold triggers")
    if kind == STATE_CHANGE:
        state = str(cond.get("state") or "").removeprefix("STATE_")
        if set(cond) != {"state"} or state not in _EXPERIMENT_STATES:
            raise InvalidArgument(
                f"{field}.condition: must be {{'state': S}} with S one of "
                + ", ".join(sorted(_EXPERIMENT_STATES))
            )
        return kind, {"state": state}
    if kind == TASK_LOG:
        regex = cond.get("regex")
        if set(cond) != {"regex"} or not isinstance(regex, str) or not regex:
            raise InvalidArgument(f"{field}.condition: must be {{'regex': '<pattern>'}}")
        if len(regex) > REGEX_MAX:
            raise InvalidArgument(f"{field}.condition.regex: longer than {REGEX_MAX} characters")
        try:
            _regex(regex)
        except re.error as e:
            raise InvalidArgument(f"{field}.condition.regex: not a valid pattern ({e})") from None
        return kind, {"regex": regex}
    if mode != SPECIFIC_MODE:
        raise InvalidArgument(f"{field}: a custom trigger needs mode WEBHOOK_MODE_SPECIFIC")
    return kind, {}


# -- rows ---------------------------------------------------------------------------------------
def create(conn: Conn, body: d.v1Webhook, user_id: int, policy: egress.Policy) -> Webhook:
    """Validates everything first; one transaction writes the webhook and its triggers.
    ``policy``: the egress policy of its creator (restricted for a non-admin)."""
    if not isinstance(body, dict):
        raise InvalidArgument("request body: the webhook as a JSON object")
    name = limits.text("name", body.get("name"), limits.NAME, required=True)
    url = check_url(body.get("url"), policy)
    kind = _enum("webhookType", body.get("webhookType"), "WEBHOOK_TYPE_", (DEFAULT, SLACK), "")
    mode = _enum(
        "mode", body.get("mode"), "WEBHOOK_MODE_", (WORKSPACE_MODE, SPECIFIC_MODE), WORKSPACE_MODE
    )
    raw = body.get("triggers")
    if not isinstance(raw, list) or not raw:
        raise InvalidArgument("triggers: at least one trigger required")
    if len(raw) > 32:
        raise InvalidArgument("triggers: at most 32")
    triggers = [_trigger(i, t, mode) for i, t in enumerate(raw)]
    workspace_id = body.get("workspaceId") or None
    cur = conn.cursor(row_factory=class_row(Webhook))
    row = cur.execute(
        "INSERT INTO webhooks (name, url, webhook_type, mode, workspace_id, created_by)"
        " VALUES (%s, %s, %s, %s, %s, %s) RETURNING " + _WEBHOOK,
        (name, url, kind, mode, workspace_id, user_id),
    ).fetchone()
    assert row is not None
    for t_kind, cond in triggers:
        conn.execute(
            "INSERT INTO webhook_triggers (webhook_id, trigger_type, condition) VALUES (%s, %s, %s)",
            (row.id, t_kind, Jsonb(cond)),
        )
    return get(conn, row.id)


_WEBHOOK = "id, name, url, webhook_type, mode, workspace_id, created_by, created_at"


def get(conn: Conn, webhook_id: int) -> Webhook:
    cur = conn.cursor(row_factory=class_row(Webhook))
    row = cur.execute(f"SELECT {_WEBHOOK} FROM webhooks WHERE id = %s", (webhook_id,)).fetchone()
    if row is None:
        raise NotFound(f"webhook {webhook_id} not found")
    triggers = conn.cursor(row_factory=class_row(Trigger)).execute(
        "SELECT id, webhook_id, trigger_type, condition FROM webhook_triggers"
        " WHERE webhook_id = %s ORDER BY id",
        (webhook_id,),
    )
    return dataclasses.replace(row, triggers=tuple(triggers))


def list_(conn: Conn) -> list[Webhook]:
    """Every webhook with its triggers, read in one statement (one snapshot): a webhook deleted
    while the list is read is in it whole or not at all. (Reading the ids and then each webhook
    made a list that raced a deletion answer 404 for the deleted webhook.)"""
    out = []
    for row in db.fetch_rows(
        conn,
        _Listed,
        f"SELECT {_WEBHOOK}, coalesce((SELECT json_agg(json_build_object("
        "'id', t.id, 'trigger_type', t.trigger_type, 'condition', t.condition) ORDER BY t.id)"
        " FROM webhook_triggers t WHERE t.webhook_id = w.id), '[]') AS trigger_rows"
        " FROM webhooks w ORDER BY id",
    ):
        triggers = tuple(Trigger(webhook_id=row.id, **t) for t in row.trigger_rows)
        fields = {f.name: getattr(row, f.name) for f in dataclasses.fields(Webhook)}
        out.append(Webhook(**{**fields, "triggers": triggers}))
    return out


class _TriggerJson(TypedDict):
    id: int
    trigger_type: str
    condition: Condition


@dataclasses.dataclass(frozen=True, slots=True)
class _Listed(Webhook):
    """A webhook as :func:`list_` reads it: its triggers as one JSON array."""

    trigger_rows: list[_TriggerJson] = dataclasses.field(default_factory=list)


def made_by_admin(conn: Conn, webhook_id: int) -> bool:
    return bool(
        db.scalar(
            conn,
            bool,
            "SELECT coalesce(u.admin, false) AS admin FROM webhooks w"
            " LEFT JOIN users u ON u.id = w.created_by WHERE w.id = %s",
            (webhook_id,),
        )
    )


def patch(
    conn: Conn, hook: Webhook, body: JSONObject, policy: egress.Policy, chosen_by: int | None
) -> Webhook:
    """Determined's PatchWebhook (``url``) and det's ``triggers`` (the whole list, replaced).
    Validates everything first, then writes in the caller's transaction. Queued events stay
    queued: they are sent to the webhook's URL at the time of each attempt, so a new URL gets
    them (an attempt already under way finishes against the old one). ``chosen_by``: a
    non-admin who sets the URL becomes the webhook's ``created_by`` (its deliveries are then
    held to the egress policy)."""
    if not isinstance(body, dict):
        raise InvalidArgument("request body: the webhook's new fields as a JSON object")
    unknown = sorted(set(body) - {"url", "triggers"})
    if unknown:
        raise InvalidArgument(f"{unknown[0]}: cannot be changed (only url and triggers)")
    if "url" not in body and "triggers" not in body:
        raise InvalidArgument("request body: give url, triggers or both")
    url = check_url(body["url"], policy) if "url" in body else None
    triggers: list[tuple[str, Condition]] | None = None
    if "triggers" in body:
        raw = body["triggers"]
        if not isinstance(raw, list) or not raw:
            raise InvalidArgument("triggers: at least one trigger required")
        if len(raw) > 32:
            raise InvalidArgument("triggers: at most 32")
        triggers = [_trigger(i, t, hook.mode) for i, t in enumerate(raw)]  # type: ignore[arg-type]
    if url is not None:
        conn.execute(
            "UPDATE webhooks SET url = %s, created_by = coalesce(%s, created_by) WHERE id = %s",
            (url, chosen_by, hook.id),
        )
        # The record of what waits follows the webhook (deliveries read the webhook's URL).
        conn.execute(
            "UPDATE webhook_events SET url = %s WHERE webhook_id = %s AND delivered_at IS NULL",
            (url, hook.id),
        )
    if triggers is not None:
        conn.execute("DELETE FROM webhook_triggers WHERE webhook_id = %s", (hook.id,))
        for t_kind, cond in triggers:
            conn.execute(
                "INSERT INTO webhook_triggers (webhook_id, trigger_type, condition)"
                " VALUES (%s, %s, %s)",
                (hook.id, t_kind, Jsonb(cond)),
            )
    conn.execute("NOTIFY det_wakeup")
    return get(conn, hook.id)


def delete(conn: Conn, webhook_id: int) -> None:
    conn.execute("DELETE FROM webhooks WHERE id = %s", (webhook_id,))


_STATE = (
    "CASE WHEN delivered_at IS NOT NULL THEN 'DELIVERED'"
    " WHEN failed_at IS NOT NULL THEN 'DEAD' ELSE 'PENDING' END"
)


def events(conn: Conn, webhook_id: int, state: DeliveryState | None = None) -> list[Delivery]:
    """The last 100 deliveries of a webhook (in ``state`` only, if given), newest first, with
    their last status."""
    return (
        conn.cursor(row_factory=class_row(Delivery))
        .execute(
            f"SELECT * FROM (SELECT id, event_id, event_type, {_STATE} AS state, resends,"
            " created_at, attempts, last_status, last_error, last_attempt_at, delivered_at,"
            " failed_at, next_attempt_at FROM webhook_events WHERE webhook_id = %s) s"
            " WHERE %s::text IS NULL OR state = %s ORDER BY id DESC LIMIT 100",
            (webhook_id, state, state),
        )
        .fetchall()
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _Letter:
    """An event asked to be resent, and whether it is a dead letter (:func:`resend`)."""

    event_id: uuid.UUID
    dead: bool


def resend(conn: Conn, webhook_id: int, event_ids: list[uuid.UUID] | None) -> list[uuid.UUID]:
    """Queues dead letters of the webhook again, with the same event ids (all of them when
    ``event_ids`` is None); returns the ids re-queued. Each gets a fresh retry clock. An id
    that is not a dead letter of this webhook is refused, and nothing changes."""
    if event_ids is not None:
        found = db.fetch_rows(
            conn,
            _Letter,
            "SELECT event_id, failed_at IS NOT NULL AND delivered_at IS NULL AS dead"
            " FROM webhook_events WHERE webhook_id = %s AND event_id = ANY(%s)",
            (webhook_id, event_ids),
        )
        dead = {r.event_id for r in found if r.dead}
        known = {r.event_id for r in found}
        for eid in event_ids:
            if eid not in known:
                raise NotFound(f"eventIds: event {eid} of webhook {webhook_id} not found")
            if eid not in dead:
                raise InvalidArgument(f"eventIds: event {eid} is not a dead letter")
    requeued = db.column(
        conn,
        uuid.UUID,
        "UPDATE webhook_events SET failed_at = NULL, attempts = 0, resends = resends + 1,"
        " retry_since = now(), next_attempt_at = now(), leased_until = NULL"
        " WHERE webhook_id = %s AND failed_at IS NOT NULL AND delivered_at IS NULL"
        " AND (%s::uuid[] IS NULL OR event_id = ANY(%s)) RETURNING event_id",
        (webhook_id, event_ids, event_ids),
    )
    if requeued:
        conn.execute("NOTIFY det_wakeup")
    return requeued


def wire(hook: Webhook) -> d.v1Webhook:
    return {
        "id": hook.id,
        "name": hook.name,
        "url": hook.url,
        "webhookType": _WIRE_TYPE[hook.webhook_type],
        "mode": _WIRE_MODE[hook.mode],
        "workspaceId": hook.workspace_id or 0,
        "triggers": [
            {
                "id": t.id,
                "triggerType": _WIRE_TRIGGER[t.trigger_type],
                "condition": dict(t.condition),
                "webhookId": hook.id,
            }
            for t in hook.triggers
        ],
    }


# -- events -------------------------------------------------------------------------------------
def _enqueue(conn: Conn, hook: _Hook, payload: JSONObject, kind: str) -> None:
    """Queues one event; its id is the DEFAULT payload's ``event_id`` (a Slack message has no
    place for one: a new id, sent in a header only)."""
    event_id = payload.get("event_id") or str(uuid.uuid4())
    conn.execute(
        "INSERT INTO webhook_events (webhook_id, url, webhook_type, payload, event_id, event_type)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (hook.webhook_id, hook.url, hook.webhook_type, json.dumps(payload), event_id, kind),
    )
    conn.execute("NOTIFY det_wakeup")


def _experiment_hooks(experiment_id: int, config: JSONObject) -> _ExperimentHooks:
    """The experiment's ``integrations.webhooks`` (read off its typed config)."""
    integrations = stored.experiment_config(experiment_id, config).integrations or {}
    hooks = integrations.get("webhooks") or {}
    if not isinstance(hooks, dict):
        return _ExperimentHooks()
    ids, names = hooks.get("webhook_id") or (), hooks.get("webhook_name") or ()
    return _ExperimentHooks(
        exclude=bool(hooks.get("exclude")),
        webhook_ids=tuple(ids) if isinstance(ids, list | tuple) else (),
        webhook_names=tuple(names) if isinstance(names, list | tuple) else (),
    )


def _matches(hook: _Hook, workspace_id: int | None, exp_hooks: _ExperimentHooks) -> bool:
    """Determined's matchWebhook: an experiment's ``integrations.webhooks.exclude`` silences all;
    a workspace webhook fires for its workspace only; a SPECIFIC one only for experiments that
    name it (``webhook_id`` or ``webhook_name``)."""
    if exp_hooks.exclude:
        return False
    if hook.workspace_id is not None and hook.workspace_id != workspace_id:
        return False
    if hook.mode == SPECIFIC_MODE:
        return hook.webhook_id in exp_hooks.webhook_ids or hook.name in exp_hooks.webhook_names
    return True


_EXPERIMENT = (
    "SELECT e.id, e.name, e.state, e.config, e.created_at, e.ended_at, p.name AS project,"
    " w.name AS workspace, w.id AS workspace_id FROM experiments e"
    " LEFT JOIN projects p ON p.id = e.project_id LEFT JOIN workspaces w ON w.id = p.workspace_id"
    " WHERE e.id = %s"
)


def _experiment(conn: Conn, experiment_id: int) -> _Experiment | None:
    cur = conn.cursor(row_factory=class_row(_Experiment))
    return cur.execute(_EXPERIMENT, (experiment_id,)).fetchone()


def _experiment_payload(exp: _Experiment, trial_id: int | None = None) -> JSONObject:
    resources = stored.experiment_config(exp.id, exp.config).resources
    end = exp.ended_at or dt.datetime.now(dt.UTC)
    out: JSONObject = {
        "id": exp.id,
        "state": exp.state,
        "name": exp.name,
        "duration": int((end - exp.created_at).total_seconds()) if exp.ended_at else 0,
        "resource_pool": resources.resource_pool or "default",
        "slots_per_trial": resources.slots_per_trial,
        "workspace": exp.workspace or "",
        "project": exp.project or "",
    }
    if trial_id:
        out["trial_id"] = trial_id
    return out


def _event(kind: str, condition: JSONObject, data: JSONObject) -> JSONObject:
    return {
        "event_id": str(uuid.uuid4()),
        "event_type": kind,
        "timestamp": int(time.time()),
        "condition": condition,
        "event_data": data,
    }


def _slack(text: str, fields: list[str] | None = None, color: str = "") -> JSONObject:
    block: JSONObject = {"type": "section", "text": {"type": "mrkdwn", "text": text}}
    if fields:
        block["fields"] = [{"type": "mrkdwn", "text": f} for f in fields]
    if color:
        return {"blocks": [], "attachments": [{"color": color, "blocks": [block]}]}
    return {"blocks": [block]}


def _experiment_slack(
    exp: _Experiment, custom: dict[str, str] | None, trial: int | None
) -> JSONObject:
    state = exp.state
    status, mark, color = {
        "COMPLETED": ("Your experiment completed successfully 🎉", "✅ ", "#13B670"),
        "ERROR": ("Your experiment has stopped with errors", "❌ ", "#DD5040"),
    }.get(state, (f"The status of your experiment is {state}", "", "#009bde"))
    fields = [f"*Status*: {state.capitalize()}"]
    if exp.workspace:
        fields.append(f"*Workspace*: {exp.workspace}")
    if exp.project:
        fields.append(f"*Project*: {exp.project}")
    if trial:
        fields.append(f"*Trial ID*: {trial}")
    body = _slack(f"{mark}{exp.name} (#{exp.id})", fields, color)
    message: JSONObject = {"type": "section", "text": {"type": "plain_text", "text": status}}
    if custom:
        message["fields"] = [
            {"type": "mrkdwn", "text": f"*{k.capitalize()}*: {custom.get(k, '')}"}
            for k in ("level", "title", "description")
        ]
    body["blocks"] = [message]
    return body


def _hooks(conn: Conn, kind: str, extra: str = "", args: tuple[str, ...] = ()) -> list[_Hook]:
    return (
        conn.cursor(row_factory=class_row(_Hook))
        .execute(
            "SELECT t.id AS trigger_id, t.condition, w.id AS webhook_id, w.name, w.url,"
            " w.webhook_type, w.mode, w.workspace_id FROM webhook_triggers t"
            " JOIN webhooks w ON w.id = t.webhook_id WHERE t.trigger_type = %s" + extra,
            (kind, *args),
        )
        .fetchall()
    )


@states.on_experiment_state
def experiment_state_changed(conn: Conn, experiment_id: int, state: str) -> None:
    """Queues the events of an experiment's move to ``state`` (``states`` calls it in the move's
    transaction: it subscribes when this module is imported, as every services import does)."""
    hooks = _hooks(conn, STATE_CHANGE, " AND t.condition->>'state' = %s", (state,))
    if not hooks:
        return
    row = _experiment(conn, experiment_id)
    if row is None:
        return
    exp = dataclasses.replace(row, state=state)
    exp_hooks = _experiment_hooks(exp.id, exp.config)
    for h in hooks:
        if not _matches(h, exp.workspace_id, exp_hooks):
            continue
        if h.webhook_type == SLACK:
            payload = _experiment_slack(exp, None, None)
        else:
            data: JSONObject = {"experiment": _experiment_payload(exp)}
            payload = _event(STATE_CHANGE, {"state": state}, data)
        _enqueue(conn, h, payload, STATE_CHANGE)


def custom_event(
    conn: Conn, experiment_id: int, trial_id: int | None, data: d.v1CustomWebhookEventData | None
) -> None:
    """Determined's PostWebhookEventData: training code's alert, sent to the SPECIFIC webhooks
    with a CUSTOM trigger that the experiment's config names."""
    if not isinstance(data, dict):
        data = {}
    custom = {
        "title": limits.text("data.title", data.get("title") or "", 1024),
        "description": limits.text("data.description", data.get("description") or "", 8192),
        "level": str(data.get("level") or "LOG_LEVEL_INFO").removeprefix("LOG_LEVEL_"),
    }
    exp = _experiment(conn, experiment_id)
    if exp is None:
        raise NotFound(f"experiment {experiment_id} not found")
    exp_hooks = _experiment_hooks(exp.id, exp.config)
    for h in _hooks(conn, CUSTOM):
        if not _matches(h, exp.workspace_id, exp_hooks):
            continue
        if h.webhook_type == SLACK:
            payload = _experiment_slack(exp, custom, trial_id)
        else:
            data_out: JSONObject = {
                "experiment": _experiment_payload(exp, trial_id),
                "custom_data": dict[str, JSONValue](custom),
            }
            payload = _event(CUSTOM, {}, data_out)
        _enqueue(conn, h, payload, CUSTOM)


_TASK = (
    "SELECT t.experiment_id, t.id AS trial_id, e.config, p.workspace_id FROM trials t"
    " JOIN experiments e ON e.id = t.experiment_id JOIN projects p ON p.id = e.project_id"
    " WHERE t.task_id = %s"
)


#: A statement answering whether any trigger watches log lines (one row, one boolean).
ANY_LOG_TRIGGER = (
    f"SELECT EXISTS (SELECT 1 FROM webhook_triggers WHERE trigger_type = '{TASK_LOG}')"
)


def logs_arrived(conn: Conn, rows: list[tuple[Any, ...]]) -> None:
    """Queues a TASK_LOG event for the first line of a task that matches a trigger's regex
    (once per task and trigger, as Determined does). Rows as ``task_logs.insert`` takes them."""
    hooks = _hooks(conn, TASK_LOG)
    if not hooks:
        return
    tasks: dict[str, _Task | None] = {}
    for row in rows:
        task_id, agent_id, line = row[0], row[2], row[5]
        for h in hooks:
            regex = h.condition.get("regex") or ""
            if not _regex(regex).search(line or ""):
                continue
            if task_id not in tasks:
                cur = conn.cursor(row_factory=class_row(_Task))
                tasks[task_id] = cur.execute(_TASK, (task_id,)).fetchone()
            task = tasks[task_id]
            workspace_id = task.workspace_id if task else None
            exp_hooks = _experiment_hooks(task.experiment_id, task.config) if task else _NO_HOOKS
            if h.mode == SPECIFIC_MODE and task is None:
                continue
            if not _matches(h, workspace_id, exp_hooks):
                continue
            fired = conn.execute(
                "INSERT INTO webhook_task_log_fired (task_id, trigger_id) VALUES (%s, %s)"
                " ON CONFLICT DO NOTHING RETURNING 1",
                (task_id, h.trigger_id),
            ).fetchone()
            if fired is None:
                continue
            if h.webhook_type == SLACK:
                where = (
                    f"Experiment ID `{task.experiment_id}`, Trial ID `{task.trial_id}`"
                    if task
                    else f"Task ID `{task_id}`"
                )
                text = (
                    f"{where}, running on node `{agent_id or ''}`, reported a log\n"
                    f"```{line}```\nThis log matched the regex\n```{regex}```\n"
                )
                payload = _slack(text)
            else:
                data: JSONObject = {
                    "task_log": {
                        "task_id": task_id,
                        "node_name": agent_id or "",
                        "triggering_log": line,
                    }
                }
                payload = _event(TASK_LOG, {"regex": regex}, data)
            _enqueue(conn, h, payload, TASK_LOG)


_NO_HOOKS = _ExperimentHooks()


def test_payload(hook: Webhook) -> JSONObject:
    """What TestWebhook sends (Determined's shapes)."""
    if hook.webhook_type == SLACK:
        return {"blocks": [{"type": "section", "text": {"type": "plain_text", "text": "test"}}]}
    return _event(STATE_CHANGE, {"state": "COMPLETED"}, {"data": "test"})
