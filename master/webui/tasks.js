// det WebUI: interactive tasks (commands, notebooks, shells, TensorBoards): list, open a notebook
// or a TensorBoard, logs, kill.
"use strict";

const TASK_KINDS = [
  ["commands", "Commands", "command"],
  ["notebooks", "Notebooks", "notebook"],
  ["shells", "Shells", "shell"],
  ["tensorboards", "TensorBoards", "tensorboard"],
];
const OPENS = new Set(["notebook", "tensorboard"]);
const taskDone = (x) => stateName(x.state) === "TERMINATED";

// Opens a notebook's or a TensorBoard's page on the tasks' own origin (never this one, whose
// storage holds the session): a single-use ticket the proxy there trades for a cookie for that
// task only.
async function openNotebook(n) {
  const { url } = await api("/api/v1/proxy_tickets", { method: "POST", body: { taskId: n.id } });
  window.open(url, "_blank", "noopener,noreferrer");
}

// The kinds of task GetTask names, with their API path and noun.
const TASK_TYPES = {
  TASK_TYPE_NOTEBOOK: ["notebooks", "notebook"],
  TASK_TYPE_TENSORBOARD: ["tensorboards", "tensorboard"],
  TASK_TYPE_COMMAND: ["commands", "command"],
  TASK_TYPE_SHELL: ["shells", "shell"],
};

// Sends this tab to a task's page on the tasks' own origin (a ticket), at `path` inside it.
async function goToTask(id, path) {
  const { url } = await api("/api/v1/proxy_tickets", { method: "POST", body: { taskId: id } });
  const u = new URL(url);
  const [p, q] = String(path || "").split(/\?(.*)/s);
  u.pathname = `/proxy/${encodeURIComponent(id)}/${p.split("/").map(encodeURIComponent).join("/")}`;
  for (const [k, v] of new URLSearchParams(q || "")) if (k !== "det_ticket") u.searchParams.append(k, v);
  location.assign(u.toString());
}

// Where the links Determined's CLI opens land (/det/interactive/<id>/..., its wait page
// /det/wait/<kind>/<id>) and where the master sends a browser that opened /proxy/<id>/... on
// this origin (/det/open/<id>?path=...). It follows the task: while it starts, a waiting state
// with its state; once its page is up, the user's own task opens in this tab at once (as
// Determined opens it); another user's task (an admin's view) waits for a click on Open, so
// that another site cannot send an admin into a user's task page unawares; a task that ended or
// cannot be opened says so, with its logs.
async function openTaskPage(main, id) {
  const path = query().path || "";
  const box = h("section", { class: "open-task-state", role: "status", "aria-live": "polite" });
  render(main, h("h1", {}, "Open task ", h("code", {}, id)), box);
  const logs = link("/det/tasks/" + encodeURIComponent(id) + "/logs", "its logs");
  const fail = (...text) => {
    render(box, h("p", { class: "refused", role: "alert", "data-open": "failed" }, ...text), h("p", {}, logs));
  };
  let user;
  let stopped = false;
  const poll = async () => {
    if (stopped) return;
    let task, entity;
    try {
      user = user || (await me());
      ({ task } = await api("/api/v1/tasks/" + encodeURIComponent(id)));
      const kind = TASK_TYPES[task.taskType];
      if (!kind || !OPENS.has(kind[1])) {
        return fail(`Task ${id} is ${kind ? "a " + kind[1] : "not an interactive task"}: it has no page to open.`);
      }
      ({ [kind[1]]: entity } = await api(`/api/v1/${kind[0]}/${encodeURIComponent(id)}`));
      const noun = kind[1] === "tensorboard" ? "TensorBoard" : kind[1];
      const name = entity.description || id;
      const alloc = (task.allocations || [])[0] || {};
      if (task.endTime || stateName(entity.state) === "TERMINATED") {
        return fail(`The ${noun} ${name} has ended (${entity.exitStatus || stateName(alloc.state) || "terminated"}): there is nothing to open.`);
      }
      if (alloc.isReady !== true) {
        render(box, h("p", { "data-open": "waiting" }, `Waiting for the ${noun} ${name} to start: `, badge(entity.state),
          h("span", { class: "muted" }, " it opens here by itself once it is ready. "), logs));
        setTimeout(poll, 1500);
        return;
      }
      if (entity.userId === user.id) {
        render(box, h("p", { "data-open": "opening" }, `Opening the ${noun} ${name}…`));
        stopped = true;
        await goToTask(id, path);
        return;
      }
      render(box, h("p", { "data-open": "ready" }, `The ${noun} ${name} of ${entity.username} is ready. `,
        h("button", { class: "open-task", onclick: () => act("open task", () => goToTask(id, path), async () => {}) }, "Open"),
        h("span", { class: "muted" }, " (it is another user's: open it only if you meant to)")));
    } catch (e) {
      fail(`Cannot open task ${id}: ${e.message}`);
    }
  };
  await poll();
  return { refresh: null };
}

// A task's own page: what it is, its state and owner, Open (a notebook or a TensorBoard that is
// up), and its log.
async function taskPage(main, id) {
  const { task } = await api("/api/v1/tasks/" + encodeURIComponent(id));
  const kind = TASK_TYPES[task.taskType];
  const entity = kind ? (await api(`/api/v1/${kind[0]}/${encodeURIComponent(id)}`))[kind[1]] : null;
  const head = h("section", { class: "task-summary" });
  const box = h("section", { class: "logs-box" });
  const draw = (t, x) => {
    const ready = ((t.allocations || [])[0] || {}).isReady === true;
    render(head, facts([
      ["Kind", kind ? kind[1] : String(t.taskType || "").replace(/^TASK_TYPE_/, "").toLowerCase()],
      ["Description", x ? x.description : ""],
      ["State", x ? badge(x.state) : ""],
      ["Owner", x ? x.username : ""],
      ["Pool", x ? x.resourcePool : ""],
      ["Started", when(t.startTime)],
      ["Ended", when(t.endTime)],
      ["Exit", x ? x.exitStatus : ""],
    ]), kind && OPENS.has(kind[1]) && ready && !t.endTime
      ? h("p", {}, h("button", { class: "open-task", onclick: () => act("open " + kind[1], () => openNotebook({ id }), async () => {}) }, "Open"), " (on the tasks' own origin, in a new tab)")
      : null);
  };
  draw(task, entity);
  render(main, h("h1", {}, kind ? kind[1][0].toUpperCase() + kind[1].slice(1) : "Task", " ", h("code", {}, id), " ", link("/det/tasks", "all tasks")), head, box);
  logViewer(box, `/api/v1/tasks/${encodeURIComponent(id)}/logs`, "task-" + id.slice(0, 8), !task.endTime);
  // The summary follows the task (not the log viewer, which streams by itself).
  return { refresh: async () => {
    const { task: t } = await api("/api/v1/tasks/" + encodeURIComponent(id));
    draw(t, kind ? (await api(`/api/v1/${kind[0]}/${encodeURIComponent(id)}`))[kind[1]] : null);
  } };
}

async function tasksPage(main) {
  const showEnded = query().ended === "show";
  const all = await Promise.all(TASK_KINDS.map(([path]) => api("/api/v1/" + path).then((r) => r[path] || [])));
  const sections = TASK_KINDS.map(([path, title, noun], i) => {
    const rows = all[i].filter((x) => showEnded || !taskDone(x)).sort((a, b) => String(b.startTime).localeCompare(String(a.startTime)));
    return h("section", { class: "tasks-" + path },
      h("h2", {}, title),
      table(["ID", "Description", "State", "Owner", "Pool", "Started", "Exit", ""], rows.map((x) => [
        h("a", { href: "/det/tasks/" + encodeURIComponent(x.id), title: x.id }, h("code", {}, x.id.slice(0, 8))), x.description || "", badge(x.state), x.username, x.resourcePool || "", when(x.startTime), x.exitStatus || "",
        h("span", { class: "actions", "data-task": x.id },
          link("/det/tasks/" + encodeURIComponent(x.id) + "/logs", "Logs"),
          OPENS.has(noun) && stateName(x.state) === "RUNNING" ? h("button", { onclick: () => act("open " + noun, () => openNotebook(x), async () => {}) }, "Open") : null,
          taskDone(x) ? null : h("button", { class: "danger", onclick: () => {
            if (confirm(`Kill ${noun} ${x.description || x.id}?`)) act(`kill ${noun}`, () => api(`/api/v1/${path}/${encodeURIComponent(x.id)}/kill`, { method: "POST", body: {} }));
          } }, "Kill")),
      ]), `No ${title.toLowerCase()}${showEnded ? "" : " running"}. Start one here (Start a task) or with det ${noun === "command" ? "cmd run" : noun + " start"}.`));
  });
  render(main, h("h1", {}, "Tasks ", h("a", { class: "button start-task", href: "/det/tasks/new" }, "Start a task…")),
    h("form", { class: "toolbar", onsubmit: (ev) => ev.preventDefault() }, h("label", {}, h("input", { type: "checkbox", name: "ended", checked: showEnded, onchange: (ev) => {
      setQuery({ ended: ev.target.checked ? "show" : "" });
      refresh();
    } }), "show ended tasks")),
    sections);
}

async function taskLogsPage(main, id) {
  const { task } = await api("/api/v1/tasks/" + encodeURIComponent(id));
  const box = h("section", { class: "logs-box" });
  const ended = !!task.endTime;
  render(main, h("h1", {}, "Task ", h("code", {}, id), " ", link("/det/tasks", "all tasks")), box);
  logViewer(box, `/api/v1/tasks/${encodeURIComponent(id)}/logs`, "task-" + id.slice(0, 8), !ended);
  return { refresh: null };
}
