"""``det agent``, ``det slot`` and ``det resource-pool``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast

from det.cli import render
from det.cli._util import Handler, add_json, noun, session, verb
from det.cli.errors import UsageError

if TYPE_CHECKING:
    from det.master.schemas import d


def list_agents(args: argparse.Namespace) -> None:
    agents = cast("d.v1GetAgentsResponse", session(args).get("/api/v1/agents"))["agents"]
    if args.json:
        render.print_json(agents)
        return
    render.table(
        [
            "Agent ID",
            "Registered",
            "Slots",
            "Containers",
            "Resource Pool",
            "Enabled",
            "Draining",
            "Addresses",
        ],
        [
            [
                a["id"],
                render.when(a["registeredTime"]),
                len(a.get("slots") or {}),
                len(a.get("containers") or {}),
                ", ".join(a.get("resourcePools") or []),
                a["enabled"],
                a["draining"],
                ", ".join(a.get("addresses") or []),
            ]
            for a in agents
        ],
    )


def _agent_action(enable: bool) -> Handler:
    def run(args: argparse.Namespace) -> None:
        if bool(args.all) == bool(args.agent_id):
            raise UsageError("give an agent id or --all")
        s = session(args)
        ids = (
            [a["id"] for a in cast("d.v1GetAgentsResponse", s.get("/api/v1/agents"))["agents"]]
            if args.all
            else [args.agent_id]
        )
        for agent_id in ids:
            if enable:
                s.post(f"/api/v1/agents/{agent_id}/enable")
            else:
                s.post(f"/api/v1/agents/{agent_id}/disable", {"drain": args.drain})
            print(f"{'enabled' if enable else 'disabled'} agent {agent_id}")

    return run


def list_slots(args: argparse.Namespace) -> None:
    agents = cast("d.v1GetAgentsResponse", session(args).get("/api/v1/agents"))["agents"]
    rows: list[dict[str, Any]] = []
    for a in agents:
        pools = a.get("resourcePools") or [""]
        for s in (a.get("slots") or {}).values():
            container = s.get("container")
            device = s.get("device") or {}
            rows.append(
                {
                    "agentId": a["id"],
                    "resourcePool": pools[0],
                    "slotId": s["id"],
                    "enabled": s["enabled"],
                    "draining": s["draining"],
                    "allocationId": container.get("parent") if container else None,
                    "type": device.get("type") or "TYPE_UNSPECIFIED",
                    "brand": device.get("brand") or "",
                }
            )
    if args.json:
        render.print_json(rows)
        return
    render.table(
        [
            "Agent ID",
            "Resource Pool",
            "Slot ID",
            "Enabled",
            "Draining",
            "Allocation ID",
            "Type",
            "Device",
        ],
        [
            [
                r["agentId"],
                r["resourcePool"],
                r["slotId"],
                r["enabled"],
                r["draining"],
                r["allocationId"] or "FREE",
                r["type"].removeprefix("TYPE_"),
                r["brand"],
            ]
            for r in rows
        ],
    )


def _slot_action(enable: bool) -> Handler:
    def run(args: argparse.Namespace) -> None:
        session(args).post(
            f"/api/v1/agents/{args.agent_id}/slots/{args.slot_id}/{'enable' if enable else 'disable'}"
        )
        print(f"{'enabled' if enable else 'disabled'} slot {args.slot_id} of agent {args.agent_id}")

    return run


def list_pools(args: argparse.Namespace) -> None:
    pools = cast("d.v1GetResourcePoolsResponse", session(args).get("/api/v1/resource-pools"))[
        "resourcePools"
    ]
    if args.json:
        render.print_json(pools)
        return
    render.table(
        ["Name", "Type", "Agents", "Slots used/available", "Scheduler", "Preemptible"],
        [
            [
                p["name"],
                p["type"].removeprefix("RESOURCE_POOL_TYPE_"),
                p["numAgents"],
                f"{p['slotsUsed']}/{p['slotsAvailable']}",
                p["schedulerType"].removeprefix("SCHEDULER_TYPE_"),
                p["preemptible"],
            ]
            for p in pools or []
        ],
    )


def pool_events(args: argparse.Namespace) -> None:
    events = session(args).get(
        f"/api/v1/resource-pools/{args.pool}/events", params={"limit": args.limit}
    )["events"]
    if args.json:
        render.print_json(events)
        return
    render.table(
        ["Time", "Kind", "Message"],
        [[render.when(e["time"]), e["kind"], e["message"]] for e in events],
    )


def _bind(method: str) -> Handler:
    def run(args: argparse.Namespace) -> None:
        body = {"resourcePoolName": args.pool, "workspaceNames": list(args.workspace_names)}
        session(args).request(
            method, f"/api/v1/resource-pools/{args.pool}/workspace-bindings", json=body
        )
        names = ", ".join(args.workspace_names)
        done = {"POST": "bound to", "DELETE": "unbound from", "PUT": "bound to exactly"}[method]
        print(f"resource pool {args.pool} {done} {names}")

    return run


def list_bindings(args: argparse.Namespace) -> None:
    s = session(args)
    ids = s.get(f"/api/v1/resource-pools/{args.pool}/workspace-bindings").get("workspaceIds")
    workspaces = cast("d.v1GetWorkspacesResponse", s.get("/api/v1/workspaces"))["workspaces"]
    names = {w["id"]: w["name"] for w in workspaces}
    rows = [[i, names.get(i, "")] for i in ids or []]
    if args.json:
        render.print_json([{"id": i, "name": n} for i, n in rows])
    elif not rows:
        print(f"resource pool {args.pool} is bound to no workspace: every workspace may use it")
    else:
        render.table(["Workspace ID", "Workspace"], rows)


def pool_cost(args: argparse.Namespace) -> None:
    cost = session(args).get(f"/api/v1/resource-pools/{args.pool}/cost")
    if args.json:
        render.print_json(cost)
        return
    cap = cost["maxHourlyCost"]
    budget = cost["monthlyBudget"]
    print(f"running now:   ${cost['hourlyRate']:.2f}/h" + (f" (cap ${cap:.2f}/h)" if cap else ""))
    print(
        f"this month:    ${cost['spentThisMonth']:.2f}"
        + (f" of a ${budget:.2f} budget" if budget else "")
        + f" (since {cost['periodStart'][:10]})"
    )
    render.table(
        ["Instance", "Type", "Market", "$/h", "Hours", "Cost", "Running"],
        [
            [
                i["id"],
                i["instanceType"],
                i["market"],
                f"{i['hourlyPrice']:.3f}",
                f"{i['hoursThisMonth']:.2f}",
                f"{i['costThisMonth']:.2f}",
                i["running"],
            ]
            for i in cost["instances"]
        ],
    )


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "agent", aliases, "manage agents")
    add_json(verb(sub, "list ls", list_agents, "list agents"))
    for name, enable in (("enable", True), ("disable", False)):
        p = verb(sub, name, _agent_action(enable), f"{name} an agent")
        p.add_argument("agent_id", nargs="?")
        p.add_argument("--all", action="store_true")
        if not enable:
            p.add_argument(
                "--drain", action="store_true", help="let running work finish; place nothing new"
            )
    sub = noun(nouns, "slot", aliases, "manage slots")
    add_json(verb(sub, "list ls", list_slots, "list slots"))
    for name, enable in (("enable", True), ("disable", False)):
        p = verb(sub, name, _slot_action(enable), f"{name} a slot")
        p.add_argument("agent_id")
        p.add_argument("slot_id")
    sub = noun(nouns, "resource-pool", aliases, "resource pools")
    add_json(verb(sub, "list ls", list_pools, "list resource pools"))
    bindings = verb(sub, "bindings", lambda a: None, "bind pools to workspaces (admins)")
    bsub = bindings.add_subparsers(dest="bindings_verb", metavar="VERB")

    def bindings_help(_: argparse.Namespace) -> int:
        bindings.print_help()
        return 2

    bindings.set_defaults(func=bindings_help)
    for name, method, help_ in (
        ("add", "POST", "bind a pool to workspaces: only they may use it"),
        ("remove", "DELETE", "unbind a pool from workspaces"),
        ("replace", "PUT", "bind a pool to exactly these workspaces"),
    ):
        p = verb(bsub, name, _bind(method), help_)
        p.add_argument("pool")
        p.add_argument("workspace_names", nargs="+", metavar="WORKSPACE")
    p = verb(bsub, "list list-workspaces", list_bindings, "the workspaces bound to a pool")
    p.add_argument("pool")
    add_json(p)
    p = verb(sub, "events", pool_events, "why the pool launched, terminated or waits")
    add_json(p)
    p.add_argument("pool")
    p.add_argument("--limit", type=int, default=50, help="the newest N events (default 50)")
    p = verb(sub, "cost", pool_cost, "what the pool's instances cost this month")
    add_json(p)
    p.add_argument("pool")
