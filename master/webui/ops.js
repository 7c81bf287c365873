// det WebUI: the admin's pages: webhooks (their deliveries and dead letters), the master's log,
// agents (enable, disable, drain). The API refuses the same actions to a non-admin; the pages
// say so instead of offering them.
"use strict";

// A page only an admin may use: the refusal a non-admin sees instead (and the nav hides it).
function adminOnly(main, title, user) {
  render(main, h("h1", {}, title),
    h("p", { class: "refused", role: "alert" }, `Only an admin may use this page. You are logged in as ${user.username}, who is not an admin.`));
  return { refresh: null };
}

// ---------------------------------------------------------------- webhooks

const EXPERIMENT_STATES = ["COMPLETED", "ERROR", "CANCELED", "PAUSED", "ACTIVE", "STOPPING_COMPLETED", "STOPPING_ERROR", "STOPPING_CANCELED"];

// Triggers as text, one a line: "state COMPLETED", "log <regex>", "custom".
function triggersText(triggers) {
  return (triggers || []).map((t) => {
    const kind = String(t.triggerType || "").replace(/^TRIGGER_TYPE_/, "");
    const c = t.condition || {};
    if (kind === "EXPERIMENT_STATE_CHANGE") return "state " + String(c.state || "").replace(/^STATE_/, "");
    if (kind === "TASK_LOG") return "log " + (c.regex || "");
    if (kind === "CUSTOM") return "custom";
    return kind.toLowerCase();
  }).join("\n");
}

// The triggers of a text (triggersText's form), or an error naming the line that is wrong.
function parseTriggers(text) {
  const out = [];
  text.split("\n").map((l) => l.trim()).forEach((line, i) => {
    if (!line) return;
    const [word, ...rest] = line.split(/\s+/);
    const arg = line.slice(word.length).trim();
    const where = `triggers, line ${i + 1} (${line})`;
    if (word === "state") {
      const st = arg.toUpperCase().replace(/^STATE_/, "");
      if (rest.length !== 1 || !EXPERIMENT_STATES.includes(st)) throw new ApiError(`${where}: "state S" with S one of ${EXPERIMENT_STATES.join(", ")}`);
      out.push({ triggerType: "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", condition: { state: "STATE_" + st } });
    } else if (word === "log") {
      if (!arg) throw new ApiError(`${where}: "log <regex>" needs a pattern`);
      out.push({ triggerType: "TRIGGER_TYPE_TASK_LOG", condition: { regex: arg } });
    } else if (word === "custom") {
      out.push({ triggerType: "TRIGGER_TYPE_CUSTOM", condition: {} });
    } else {
      throw new ApiError(`${where}: begins with state, log or custom`);
    }
  });
  if (!out.length) throw new ApiError("triggers: at least one (e.g. state COMPLETED)");
  return out;
}

async function webhooksPage(main) {
  const user = await me();
  if (!user.admin) return adminOnly(main, "Webhooks", user);
  const list = h("section", { class: "webhooks" });
  const detail = h("section", { class: "webhook-detail" });
  const error = h("p", { class: "form-error", role: "alert" });
  const { workspaces } = await api("/api/v1/workspaces?archived=false&sortBy=SORT_BY_NAME&limit=200");
  let open = query().webhook ? Number(query().webhook) : null;

  const create = h("form", { class: "create-webhook", onsubmit: async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    const v = Object.fromEntries(new FormData(create));
    try {
      const triggers = parseTriggers(String(v.triggers || ""));
      const mode = triggers.some((t) => t.triggerType === "TRIGGER_TYPE_CUSTOM") ? "WEBHOOK_MODE_SPECIFIC" : "WEBHOOK_MODE_WORKSPACE";
      const body = { name: String(v.name || "").trim(), url: String(v.url || "").trim(), webhookType: v.webhookType, mode, triggers };
      if (v.workspace) body.workspaceId = Number(v.workspace);
      await api("/api/v1/webhooks", { method: "POST", body });
      create.reset();
      await load();
    } catch (e) {
      error.textContent = "create webhook: " + e.message;
    }
  } },
  h("h2", {}, "New webhook"),
  h("label", {}, "Name", h("input", { name: "name", required: true, autocomplete: "off" })),
  h("label", {}, "URL", h("input", { name: "url", required: true, type: "url", placeholder: "https://…", autocomplete: "off" })),
  h("label", {}, "Type", h("select", { name: "webhookType" }, h("option", { value: "WEBHOOK_TYPE_DEFAULT" }, "default (signed JSON)"), h("option", { value: "WEBHOOK_TYPE_SLACK" }, "Slack"))),
  h("label", {}, "Workspace", h("select", { name: "workspace" }, h("option", { value: "" }, "all (a global webhook)"), workspaces.map((w) => h("option", { value: String(w.id) }, w.name)))),
  h("label", {}, "Triggers (one a line: state COMPLETED, log <regex>, custom)", h("textarea", { name: "triggers", rows: 3 }, "state COMPLETED\nstate ERROR")),
  h("button", { type: "submit" }, "Create webhook"), error);

  const load = async () => {
    const { webhooks } = await api("/api/v1/webhooks");
    const ws = Object.fromEntries(workspaces.map((w) => [w.id, w.name]));
    render(list, h("h2", {}, "Webhooks"), table(["ID", "Name", "URL", "Type", "Workspace", "Triggers", ""], webhooks.map((w) => [
      String(w.id), w.name || "", h("code", {}, w.url), String(w.webhookType || "").replace(/^WEBHOOK_TYPE_/, "").toLowerCase(),
      w.workspaceId ? ws[w.workspaceId] || String(w.workspaceId) : "all",
      h("pre", { class: "triggers" }, triggersText(w.triggers)),
      h("span", { class: "actions", "data-webhook": w.id },
        h("button", { onclick: () => { open = w.id; setQuery({ webhook: w.id }); showDetail(w); } }, "Events…"),
        h("button", { onclick: () => edit(w) }, "Edit…"),
        h("button", { class: "danger", onclick: () => {
          if (confirm(`Delete webhook ${w.name}? Its queued events are dropped.`)) act(`delete webhook ${w.name}`, () => api(`/api/v1/webhooks/${w.id}`, { method: "DELETE" }), load);
        } }, "Delete")),
    ]), "No webhooks yet."));
    const shown = webhooks.find((w) => w.id === open);
    if (shown) await showDetail(shown);
    else render(detail);
  };

  // The edit form: URL and triggers (PatchWebhook keeps the queued events).
  const edit = (w) => {
    const err = h("p", { class: "form-error", role: "alert" });
    const form = h("form", { class: "edit-webhook", "data-webhook": w.id, onsubmit: async (ev) => {
      ev.preventDefault();
      err.textContent = "";
      const v = Object.fromEntries(new FormData(form));
      try {
        const body = {};
        if (String(v.url).trim() !== w.url) body.url = String(v.url).trim();
        if (String(v.triggers).trim() !== triggersText(w.triggers).trim()) body.triggers = parseTriggers(String(v.triggers));
        if (Object.keys(body).length) await api(`/api/v1/webhooks/${w.id}`, { method: "PATCH", body });
        render(detail);
        await load();
      } catch (e) {
        err.textContent = "edit webhook: " + e.message;
      }
    } },
    h("h2", {}, "Edit webhook ", w.name),
    h("label", {}, "URL", h("input", { name: "url", value: w.url, required: true, autocomplete: "off" })),
    h("label", {}, "Triggers", h("textarea", { name: "triggers", rows: 3 }, triggersText(w.triggers))),
    h("button", { type: "submit" }, "Save"), " ", h("button", { type: "button", onclick: () => render(detail) }, "Cancel"), err);
    open = null;
    setQuery({ webhook: null });
    render(detail, form);
  };

  // A webhook's last deliveries (event id and type) and its dead letters, each re-sendable.
  const showDetail = async (w) => {
    const [{ events }, { events: dead }] = await Promise.all([
      api(`/api/v1/webhooks/${w.id}/events`),
      api(`/api/v1/webhooks/${w.id}/events?state=DEAD`),
    ]);
    const resend = (ids) => act("re-send", () => api(`/api/v1/webhooks/${w.id}/events/resend`, { method: "POST", body: ids ? { eventIds: ids } : {} }), load);
    const status = (e) => (e.last_status ? String(e.last_status) : e.last_error || "");
    render(detail,
      h("h2", {}, "Webhook ", w.name, ": dead letters"),
      h("p", { class: "muted" }, "Events the receiver did not take before det gave up; re-sent with the same event id."),
      dead.length ? h("p", {}, h("button", { class: "resend-all", onclick: () => resend(null) }, `Re-send all ${dead.length}`)) : null,
      h("div", { class: "dead-letters" }, table(["Event id", "Type", "Created", "Tries", "Last answer", "Given up", ""], dead.map((e) => [
        h("code", {}, e.event_id), e.event_type, when(e.created_at), String(e.attempts), status(e), when(e.failed_at),
        h("button", { "data-event": e.event_id, onclick: () => resend([e.event_id]) }, "Re-send"),
      ]), "No dead letters.")),
      h("h2", {}, "Last deliveries"),
      h("div", { class: "webhook-events" }, table(["Event id", "Type", "State", "Created", "Tries", "Last answer", "Delivered", "Re-sent"], events.map((e) => [
        h("code", {}, e.event_id), e.event_type, e.state, when(e.created_at), String(e.attempts), status(e), when(e.delivered_at), String(e.resends || 0),
      ]), "No events yet.")),
    );
  };

  render(main, h("h1", {}, "Webhooks"), list, detail, create);
  await load();
  // The lists refresh unless a form is being filled in.
  return { refresh: () => (detail.querySelector("form") || create.contains(document.activeElement) ? null : load()) };
}

// ---------------------------------------------------------------- master logs

async function masterLogsPage(main) {
  const user = await me();
  if (!user.admin) return adminOnly(main, "Master logs", user);
  const out = h("pre", { class: "logs master-logs", tabindex: 0, "aria-label": "master log lines" });
  const status = h("span", { class: "muted log-status" });
  const follow = h("input", { type: "checkbox", name: "follow", checked: true });
  let controller = null;
  let lastId = 0;
  const add = (entries) => {
    const atEnd = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    for (const e of entries) {
      if (e.id <= lastId) continue;
      lastId = e.id;
      const level = String(e.level || "").replace(/^LOG_LEVEL_/, "");
      out.appendChild(h("span", { class: "log-line lvl-" + level }, `${e.timestamp || ""} ${level} ${e.message || ""}\n`));
    }
    if (atEnd) out.scrollTop = out.scrollHeight;
  };
  // One request: the last lines, then (following) new ones as the master logs them. The master
  // ends a followed answer after its request time limit; it is asked again from there.
  const run = async () => {
    if (controller) controller.abort();
    controller = new AbortController();
    const signal = controller.signal;
    try {
      while (!signal.aborted) {
        const p = new URLSearchParams({ offset: lastId ? "-200" : "-500" });
        if (follow.checked) p.set("follow", "true");
        status.textContent = follow.checked ? "following…" : "loading…";
        const r = await fetch("/api/v1/master/logs?" + p, { headers: { Authorization: "Bearer " + token() }, signal });
        if (!r.ok) throw new ApiError(((await r.json().catch(() => ({}))).message) || r.status + " " + r.statusText);
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        let rest = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          rest += dec.decode(value, { stream: true });
          const cut = rest.lastIndexOf("\n");
          if (cut < 0) continue;
          add(rest.slice(0, cut).split("\n").filter(Boolean).map((l) => JSON.parse(l).result.logEntry));
          rest = rest.slice(cut + 1);
        }
        if (!follow.checked) {
          status.textContent = `${out.childElementCount} lines (the master keeps its latest ones)`;
          return;
        }
        await new Promise((done) => setTimeout(done, 1000));
      }
    } catch (e) {
      if (e.name !== "AbortError") showError("master logs: " + e.message, "logs");
    }
  };
  follow.addEventListener("change", () => {
    if (!follow.checked && controller) controller.abort();
    status.textContent = follow.checked ? "following…" : `${out.childElementCount} lines; not following`;
    if (follow.checked) run();
  });
  render(main, h("h1", {}, "Master logs"), h("p", { class: "toolbar" }, h("label", {}, follow, "follow"), " ", status), out);
  run();
  return { refresh: null };
}

// ---------------------------------------------------------------- agents

function agentStatus(a) {
  if (!a.connected) return "disconnected";
  if (!a.enabled) return a.draining ? "draining" : "disabled";
  return a.preemptionNotice ? "preemption notice" : "ready";
}

async function agentsPage(main) {
  const [user, { agents }] = await Promise.all([me(), api("/api/v1/agents")]);
  const call = (a, verb, body) => act(`${verb} agent ${a.id}`, () => api(`/api/v1/agents/${encodeURIComponent(a.id)}/${verb === "enable" ? "enable" : "disable"}`, { method: "POST", body: body || {} }));
  render(main, h("h1", {}, "Agents"),
    user.admin ? h("p", { class: "muted" }, "Disable stops the agent's tasks now (they are re-queued); drain lets them finish and gives the agent no new ones.") : null,
    table(["Agent", "Pool", "Slots in use", "Status", "Last heartbeat", "Address", ""], agents.map((a) => {
      const slots = Object.values(a.slots || {});
      const used = slots.filter((x) => x.container).length;
      return [a.id, (a.resourcePools || []).join(", "), `${used}/${slots.length}`, h("span", { class: "agent-status" }, agentStatus(a)), when(a.lastHeartbeat), (a.addresses || []).join(", "),
        user.admin ? h("span", { class: "actions", "data-agent": a.id },
          a.enabled ? [
            h("button", { onclick: () => { if (confirm(`Drain agent ${a.id}? Its tasks finish; it gets no new ones.`)) call(a, "drain", { drain: true }); } }, "Drain"),
            h("button", { class: "danger", onclick: () => { if (confirm(`Disable agent ${a.id}? Its tasks stop now and are re-queued.`)) call(a, "disable", { drain: false }); } }, "Disable"),
          ] : h("button", { onclick: () => call(a, "enable") }, "Enable")) : ""];
    }), "No agents connected."));
}
