// det WebUI: start a notebook, a command or a TensorBoard (pool, slots, image, template,
// workspace), then follow it until it is ready and open it on the tasks' own origin.
"use strict";

const LAUNCH_KINDS = {
  notebook: { title: "Notebook", path: "notebooks", noun: "notebook" },
  command: { title: "Command", path: "commands", noun: "command" },
  tensorboard: { title: "TensorBoard", path: "tensorboards", noun: "tensorboard" },
};

// The launch request of the form's values, or an error naming the field.
function launchRequest(kind, v) {
  const config = {};
  const resources = {};
  if (v.slots !== "") {
    if (!/^\d+$/.test(v.slots)) throw new ApiError("slots: must be a whole number, 0 or more");
    resources.slots = Number(v.slots);
  }
  if (v.pool) resources.resource_pool = v.pool;
  if (Object.keys(resources).length) config.resources = resources;
  if (v.image.trim()) config.environment = { image: v.image.trim() };
  if (v.description.trim()) config.description = v.description.trim();
  const body = { config };
  if (v.template) body.templateName = v.template;
  if (v.workspace) body.workspaceId = Number(v.workspace);
  if (kind === "command") {
    if (!v.entrypoint.trim()) throw new ApiError("command: required (what the command runs, e.g. python3 train.py)");
    config.entrypoint = [v.entrypoint.trim()]; // one string runs through /bin/sh -c
  }
  if (kind === "tensorboard") {
    const ids = v.experiments.split(",").map((x) => x.trim()).filter(Boolean);
    if (!ids.length || !ids.every((x) => /^\d+$/.test(x))) throw new ApiError("experiments: one or more experiment ids, comma-separated");
    body.experimentIds = ids.map(Number);
  }
  return body;
}

async function launchPage(main) {
  const q = query();
  const [{ resourcePools }, { templates }, { workspaces }] = await Promise.all([
    api("/api/v1/resource-pools"),
    api("/api/v1/templates?limit=200").catch(() => ({ templates: [] })),
    api("/api/v1/workspaces?archived=false&sortBy=SORT_BY_NAME&limit=200"),
  ]);
  const home = await defaultWorkspaceId(workspaces);
  let kind = LAUNCH_KINDS[q.kind] ? q.kind : "notebook";
  const error = h("p", { class: "form-error", role: "alert" });
  const progress = h("section", { class: "launched", role: "status" });
  const input = (name, label, attrs = {}) => h("label", { class: "field-" + name }, label, h("input", { name, ...attrs }));
  const select = (name, label, options) => h("label", { class: "field-" + name }, label, h("select", { name }, options.map(([value, text, selected]) => h("option", { value, selected }, text))));
  const only = {
    command: input("entrypoint", "Command", { placeholder: "e.g. python3 train.py", autocomplete: "off" }),
    tensorboard: input("experiments", "Experiments", { placeholder: "ids, comma-separated", value: q.experiments || "" }),
  };
  const kindSelect = h("select", { name: "kind", onchange: (ev) => {
    kind = ev.target.value;
    setQuery({ kind });
    for (const [k, el] of Object.entries(only)) el.hidden = k !== kind;
  } }, Object.entries(LAUNCH_KINDS).map(([k, x]) => h("option", { value: k, selected: k === kind }, x.title)));
  for (const [k, el] of Object.entries(only)) el.hidden = k !== kind;
  const form = h("form", { class: "launch-form", onsubmit: async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    const v = Object.fromEntries(new FormData(form));
    try {
      const body = launchRequest(kind, v);
      const spec = LAUNCH_KINDS[kind];
      const out = await api("/api/v1/" + spec.path, { method: "POST", body });
      follow(progress, spec, out[spec.noun]);
    } catch (e) {
      error.textContent = `start ${LAUNCH_KINDS[kind].title.toLowerCase()}: ${e.message}`;
    }
  } },
  h("label", {}, "Kind", kindSelect),
  only.command, only.tensorboard,
  input("description", "Description", { placeholder: "optional" }),
  select("pool", "Resource pool", [["", "the default pool"], ...resourcePools.map((p) => [p.name, p.name])]),
  input("slots", "Slots", { type: "number", min: 0, step: 1, placeholder: "default (notebook 0, command 1)" }),
  input("image", "Image", { placeholder: "default task image" }),
  select("template", "Template", [["", "none"], ...(templates || []).map((t) => [t.name, t.name])]),
  select("workspace", "Workspace", [["", "Uncategorized"], ...workspaces.map((w) => [String(w.id), w.name, w.id === home])]),
  h("button", { type: "submit" }, "Start"), error);
  render(main, h("h1", {}, link("/det/tasks", "Tasks"), " / Start a task"), form, progress);
  return { refresh: null };
}

// Follows a started task until it runs (and, for a notebook or a TensorBoard, until its page is
// up), then offers to open it: the click opens the task's own origin with a ticket.
function follow(box, spec, task) {
  const id = task.id;
  const draw = (state, ready, ended) => render(box,
    h("h2", {}, `${spec.title} `, h("code", { "data-task": id }, id.slice(0, 8)), " ", badge(state)),
    ended ? h("p", {}, "It has ended. ", link("/det/tasks/" + encodeURIComponent(id) + "/logs", "Its logs")) :
      spec.noun === "command" ? h("p", {}, link("/det/tasks/" + encodeURIComponent(id) + "/logs", "Follow its logs")) :
        ready ? h("p", {}, h("button", { class: "open-task", onclick: () => act("open " + spec.noun, () => openNotebook({ id }), async () => {}) }, "Open"), " (on the tasks' own origin, in a new tab)") :
          h("p", { class: "muted" }, "Waiting for it to be ready… ", link("/det/tasks/" + encodeURIComponent(id) + "/logs", "its logs")));
  draw(task.state, false, false);
  const poll = async () => {
    try {
      const [{ [spec.noun]: now }, { task: t }] = await Promise.all([
        api(`/api/v1/${spec.path}/${encodeURIComponent(id)}`),
        api("/api/v1/tasks/" + encodeURIComponent(id)),
      ]);
      const ready = ((t.allocations || [])[0] || {}).isReady === true;
      const ended = stateName(now.state) === "TERMINATED";
      draw(now.state, ready, ended);
      if (ended || (ready && spec.noun !== "command")) return;
    } catch (e) {
      showError(e.message, "refresh");
    }
    setTimeout(poll, 2000);
  };
  setTimeout(poll, 1000);
}
