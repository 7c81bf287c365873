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

// Where the master sends a browser that opened /proxy/<id>/... on this origin (Determined's CLI
// opens that URL): one click asks for a ticket and goes to the task's own origin. A click, so
// that another site cannot send a user into a task's page unawares.
async function openTaskPage(main, id) {
  const path = query().path || "";
  const go = async () => {
    const { url } = await api("/api/v1/proxy_tickets", { method: "POST", body: { taskId: id } });
    const u = new URL(url);
    const [p, q] = path.split(/\?(.*)/s);
    u.pathname = `/proxy/${encodeURIComponent(id)}/${p.split("/").map(encodeURIComponent).join("/")}`;
    for (const [k, v] of new URLSearchParams(q || "")) if (k !== "det_ticket") u.searchParams.append(k, v);
    location.assign(u.toString());
  };
  render(main, h("h1", {}, "Open task ", h("code", {}, id)),
    h("p", {}, "Interactive tasks are served on an origin of their own."),
    h("button", { class: "open-task", onclick: () => act("open task", go, async () => {}) }, "Open"));
  return { refresh: null };
}

async function tasksPage(main) {
  const showEnded = query().ended === "show";
  const all = await Promise.all(TASK_KINDS.map(([path]) => api("/api/v1/" + path).then((r) => r[path] || [])));
  const sections = TASK_KINDS.map(([path, title, noun], i) => {
    const rows = all[i].filter((x) => showEnded || !taskDone(x)).sort((a, b) => String(b.startTime).localeCompare(String(a.startTime)));
    return h("section", { class: "tasks-" + path },
      h("h2", {}, title),
      table(["ID", "Description", "State", "Owner", "Pool", "Started", "Exit", ""], rows.map((x) => [
        h("code", { title: x.id }, x.id.slice(0, 8)), x.description || "", badge(x.state), x.username, x.resourcePool || "", when(x.startTime), x.exitStatus || "",
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
