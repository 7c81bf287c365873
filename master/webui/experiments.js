// det WebUI: the experiment list (filters, server-side sort and paging, labels, archive, batch
// actions). The filters, sort and page live in the query string, so a view can be linked.
"use strict";

const EXP_STATES = ["ACTIVE", "PAUSED", "COMPLETED", "CANCELED", "ERROR", "STOPPING_CANCELED", "STOPPING_KILLED", "STOPPING_COMPLETED", "STOPPING_ERROR"];
const PAGE_SIZES = [20, 50, 100];

const EXP_COLUMNS = [
  ["ID", "SORT_BY_ID", (e) => link("/det/experiments/" + e.id, String(e.id))],
  ["Name", "SORT_BY_NAME", (e) => [link("/det/experiments/" + e.id, e.name), " ", h("span", { class: "muted" }, e.searcherType), unmanagedMark(e), labelChips(e)]],
  ["Description", "SORT_BY_DESCRIPTION", (e) => e.description || ""],
  ["State", "SORT_BY_STATE", (e) => [badge(e.state), e.archived ? h("span", { class: "state state-ARCHIVED" }, "ARCHIVED") : null]],
  ["Trials", "SORT_BY_NUM_TRIALS", (e) => String(e.numTrials)],
  ["Progress", "SORT_BY_PROGRESS", (e) => (e.progress === null || e.progress === undefined ? "" : Math.round(e.progress * 100) + "%")],
  ["User", "SORT_BY_USER", (e) => e.username],
  ["Pool", "SORT_BY_RESOURCE_POOL", (e) => (e.unmanaged ? "" : e.resourcePool || "")],
  ["Started", "SORT_BY_START_TIME", (e) => when(e.startTime)],
  ["Ended", "SORT_BY_END_TIME", (e) => when(e.endTime)],
];

// A core_v2 script run outside the cluster: it reports here, the cluster never runs it.
function unmanagedMark(e) {
  return e.unmanaged ? h("span", { class: "state state-UNMANAGED", title: "Run outside the cluster (core_v2); the master neither schedules nor stops it" }, "UNMANAGED") : null;
}

// Columns the user chose to hide (ID and Name always show), kept in this browser.
const HIDDEN_KEY = "det.experiments.hiddenColumns";
const hiddenColumns = () => new Set(JSON.parse(localStorage.getItem(HIDDEN_KEY) || "[]"));

function columnChooser(onchange) {
  const hidden = hiddenColumns();
  return h("details", { class: "columns" }, h("summary", {}, "Columns"),
    h("div", { class: "column-list" }, EXP_COLUMNS.filter(([, key]) => key !== "SORT_BY_ID" && key !== "SORT_BY_NAME").map(([label, key]) =>
      h("label", {}, h("input", { type: "checkbox", name: "column", value: key, checked: !hidden.has(key), onchange: (ev) => {
        const now = hiddenColumns();
        ev.target.checked ? now.delete(key) : now.add(key);
        localStorage.setItem(HIDDEN_KEY, JSON.stringify([...now]));
        onchange();
      } }), label))));
}

const expPost = (id, verb) => api(`/api/v1/experiments/${id}/${verb}`, { method: "POST", body: {} });

function labelChips(e) {
  return h("span", { class: "labels" }, (e.labels || []).map((l) =>
    h("span", { class: "label-chip" },
      h("a", { href: "/det/experiments?label=" + encodeURIComponent(l), title: "Show experiments labelled " + l }, l),
      h("button", { class: "chip-x", title: "Remove label " + l, "aria-label": `remove label ${l} from ${e.id}`, onclick: () => act("remove label", () => api(`/api/v1/experiments/${e.id}/labels/${encodeURIComponent(l)}`, { method: "DELETE" })) }, "×"))),
    h("button", { class: "chip-add", title: "Add a label", "aria-label": "add label to " + e.id, onclick: () => {
      const l = prompt(`Label for experiment ${e.id}:`);
      if (l) act("add label", () => api(`/api/v1/experiments/${e.id}/labels/${encodeURIComponent(l.trim())}`, { method: "PUT" }));
    } }, "+"));
}

// Archive or Unarchive (a finished experiment's page does not refresh itself: it is reloaded).
function archiveButtons(e) {
  const onPage = /^\/det\/experiments\/\d+\/?$/.test(location.pathname);
  const post = (verb) => () => act(verb + " experiment " + e.id, () => expPost(e.id, verb), onPage ? async () => location.reload() : refresh);
  if (e.archived) return h("button", { onclick: post("unarchive") }, "Unarchive");
  return isTerminal(e.state) ? h("button", { onclick: post("archive") }, "Archive") : null;
}

function experimentActions(e) {
  const st = stateName(e.state);
  const post = (verb) => () => act(verb + " experiment " + e.id, () => expPost(e.id, verb));
  const buttons = [];
  // An unmanaged experiment (a core_v2 script run elsewhere) only archives and unarchives here.
  if (e.unmanaged) return h("span", { class: "actions" }, archiveButtons(e));
  if (st === "ACTIVE") buttons.push(h("button", { onclick: post("pause") }, "Pause"));
  if (st === "PAUSED") buttons.push(h("button", { onclick: post("activate") }, "Activate"));
  if (st === "ACTIVE" || st === "PAUSED") {
    buttons.push(h("button", { class: "danger", onclick: () => {
      if (confirm(`Kill experiment ${e.id} (${e.name})? Running trials stop without a checkpoint.`)) post("kill")();
    } }, "Kill"));
  }
  buttons.push(archiveButtons(e));
  // A TensorBoard over the experiment's trials; the tasks page opens it once it runs.
  buttons.push(h("button", { title: "Start TensorBoard over this experiment's trials", onclick: () => act("start TensorBoard for experiment " + e.id, async () => {
    await api("/api/v1/tensorboards", { method: "POST", body: { experimentIds: [e.id] } });
    location.href = "/det/tasks";
  }, async () => {}) }, "TensorBoard"));
  return h("span", { class: "actions" }, buttons);
}

function experimentFilters() {
  const q = query();
  return {
    name: q.name || "",
    state: q.state || "",
    user: q.user || "",
    label: q.label || "",
    archived: q.archived || "no",
    sort: q.sort || "SORT_BY_ID",
    desc: q.order !== "asc",
    limit: PAGE_SIZES.includes(Number(q.limit)) ? Number(q.limit) : PAGE_SIZES[0],
    offset: Math.max(0, Number(q.offset) || 0),
  };
}

function experimentsUrl(f, projectId) {
  const p = new URLSearchParams({ sortBy: f.sort, orderBy: f.desc ? "ORDER_BY_DESC" : "ORDER_BY_ASC", limit: f.limit, offset: f.offset });
  if (projectId) p.set("projectId", projectId);
  if (f.name) p.set("name", f.name);
  if (f.state) p.append("states", "STATE_" + f.state);
  for (const u of f.user.split(",").map((x) => x.trim()).filter(Boolean)) p.append("users", u);
  for (const l of f.label.split(",").map((x) => x.trim()).filter(Boolean)) p.append("labels", l);
  if (f.archived !== "any") p.set("archived", f.archived === "yes" ? "true" : "false");
  return "/api/v1/experiments?" + p.toString();
}

// The experiment list; a project's page shows it for that project under its own heading.
async function experimentsPage(main, projectId = null, heading = null) {
  const selected = new Set();
  const tableBox = h("div", { class: "table-box" });
  const pager = h("div", { class: "pager" });
  const batchBar = h("div", { class: "batch" });
  const f = experimentFilters();
  const change = (values) => {
    setQuery({ offset: 0, ...values });
    load();
  };
  const typing = {}; // a pause in typing applies that filter (one timer per filter)
  const input = (key, label, placeholder) => h("label", {}, label, h("input", { name: key, value: f[key], placeholder, oninput: (ev) => {
    clearTimeout(typing[key]);
    typing[key] = setTimeout(() => change({ [key]: ev.target.value.trim() }), 300);
  } }));
  const select = (key, label, options) => h("label", {}, label, h("select", { name: key, onchange: (ev) => change({ [key]: ev.target.value }) },
    options.map(([value, text]) => h("option", { value, selected: f[key] === value }, text))));
  const toolbar = h("form", { class: "toolbar", onsubmit: (ev) => ev.preventDefault() },
    input("name", "Name", "part of the name"),
    select("state", "State", [["", "any"], ...EXP_STATES.map((x) => [x, x])]),
    input("user", "User", "user names, comma-separated"),
    input("label", "Label", "labels, comma-separated"),
    select("archived", "Archived", [["no", "hide"], ["any", "show"], ["yes", "only archived"]]),
    columnChooser(() => load(false)),
  );
  let rows = [];
  const selectedRows = () => rows.filter((e) => selected.has(e.id));
  const runBatch = async (verb, path, keep = () => true) => {
    const items = selectedRows().filter(keep).map((e) => e.id);
    if (!items.length) return showError(`${verb}: none of the selected experiments can be ${verb.toLowerCase()}d`);
    if (await batch(verb, items, "experiment", (id) => expPost(id, path))) {
      selected.clear();
      await load(false);
    }
  };
  const drawBatch = () => render(batchBar,
    h("span", { class: "muted" }, `${selected.size} selected`),
    selected.size >= 2 ? link("/det/compare?experiments=" + [...selected].join(","), `Compare ${selected.size}`) : h("button", { disabled: true, title: "select two or more" }, "Compare"),
    h("button", { disabled: !selected.size, onclick: () => runBatch("Archive", "archive", (e) => isTerminal(e.state) && !e.archived) }, "Archive"),
    h("button", { disabled: !selected.size, onclick: () => runBatch("Unarchive", "unarchive", (e) => e.archived) }, "Unarchive"),
    h("button", { disabled: !selected.size, onclick: () => runBatch("Pause", "pause", (e) => stateName(e.state) === "ACTIVE") }, "Pause"),
    h("button", { disabled: !selected.size, onclick: () => runBatch("Activate", "activate", (e) => stateName(e.state) === "PAUSED") }, "Activate"),
    h("button", { class: "danger", disabled: !selected.size, onclick: () => runBatch("Kill", "kill", (e) => !isTerminal(e.state)) }, "Kill"),
    h("button", { disabled: !selected.size, title: "Start a TensorBoard over the selected experiments", onclick: () => {
      location.assign("/det/tasks/new?kind=tensorboard&experiments=" + selectedRows().filter((e) => !e.unmanaged).map((e) => e.id).join(","));
    } }, "TensorBoard…"),
    h("button", { disabled: !selected.size, onclick: async () => {
      const l = prompt(`Label for ${selected.size} experiment(s):`);
      if (!l) return;
      await batch("Label", selectedRows().map((e) => e.id), "experiment", (id) => api(`/api/v1/experiments/${id}/labels/${encodeURIComponent(l.trim())}`, { method: "PUT" }));
      await load(false);
    } }, "Add label…"),
  );
  let latest = 0; // answers can arrive out of order: only the newest request's is drawn
  const load = async (clearSelection = true) => {
    const mine = ++latest;
    const cur = experimentFilters();
    const out = await api(experimentsUrl(cur, projectId));
    if (mine !== latest) return;
    rows = out.experiments;
    if (clearSelection) selected.clear();
    for (const id of [...selected]) if (!rows.some((e) => e.id === id)) selected.delete(id);
    const hidden = hiddenColumns();
    const all = h("input", { type: "checkbox", "aria-label": "select all", checked: rows.length > 0 && rows.every((e) => selected.has(e.id)), onchange: (ev) => {
      for (const e of rows) ev.target.checked ? selected.add(e.id) : selected.delete(e.id);
      for (const box of tableBox.querySelectorAll("input.pick")) box.checked = ev.target.checked;
      drawBatch();
    } });
    const columns = [
      { label: all, cell: (e) => h("input", { type: "checkbox", class: "pick", "aria-label": "select " + e.id, checked: selected.has(e.id), onchange: (ev) => {
        ev.target.checked ? selected.add(e.id) : selected.delete(e.id);
        drawBatch();
      } }) },
      ...EXP_COLUMNS.filter(([, key]) => !hidden.has(key)).map(([label, key, cell]) => ({ label, key, cell })),
      { label: "", cell: experimentActions },
    ];
    const onSort = (key) => {
      const desc = cur.sort === key ? !cur.desc : key === "SORT_BY_ID" || key.endsWith("_TIME");
      setQuery({ sort: key, order: desc ? "desc" : "asc", offset: 0 });
      load();
    };
    render(tableBox, sortTable(columns, rows, { key: cur.sort, desc: cur.desc }, onSort, {
      empty: "No experiments match. Create one with: det experiment create CONFIG.yaml CONTEXT_DIR",
      rowAttrs: (e) => ({ "data-id": e.id }),
    }));
    const p = out.pagination || {};
    const total = p.total ?? rows.length;
    const go = (offset) => () => {
      setQuery({ offset });
      load();
    };
    render(pager,
      h("span", { class: "range" }, total ? `${cur.offset + 1}–${cur.offset + rows.length} of ${total}` : "0 of 0"),
      h("button", { disabled: cur.offset === 0, onclick: go(Math.max(0, cur.offset - cur.limit)) }, "Previous"),
      h("button", { disabled: cur.offset + rows.length >= total, onclick: go(cur.offset + cur.limit) }, "Next"),
      h("label", {}, "Per page", h("select", { name: "limit", onchange: (ev) => change({ limit: ev.target.value }) },
        PAGE_SIZES.map((n) => h("option", { value: n, selected: n === cur.limit }, String(n))))),
    );
    drawBatch();
  };
  render(main, heading || h("h1", {}, "Experiments"), toolbar, batchBar, tableBox, pager);
  await load();
  // The list refreshes, keeping the selection, unless the user is typing in a filter.
  return { refresh: () => (toolbar.contains(document.activeElement) && document.activeElement.tagName === "INPUT" ? null : load(false)) };
}
