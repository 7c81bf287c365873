// det WebUI: workspaces, their projects, and a project's page (its experiments and notes).
"use strict";

const archivedBadge = (x) => (x.archived ? h("span", { class: "state state-ARCHIVED" }, "ARCHIVED") : "");

function archiveToggle(kind, x, path, after) {
  return h("button", { onclick: () => act(`${x.archived ? "unarchive" : "archive"} ${kind} ${x.name}`, () => api(`${path}/${x.archived ? "unarchive" : "archive"}`, { method: "POST", body: {} }), after) },
    x.archived ? "Unarchive" : "Archive");
}

// A one-line create form: fields [[name, placeholder, required]]; submit(values) then after().
function createForm(cls, label, fields, submit) {
  const error = h("p", { class: "form-error", role: "alert" });
  const form = h("form", { class: "inline-form " + cls, onsubmit: async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    const data = Object.fromEntries(new FormData(form));
    try {
      await submit(data);
      form.reset();
    } catch (e) {
      error.textContent = label.toLowerCase() + ": " + e.message;
    }
  } },
  fields.map(([name, placeholder, required]) => h("input", { name, placeholder, "aria-label": placeholder, required })),
  h("button", { type: "submit" }, label), error);
  return form;
}

async function workspacesPage(main) {
  let showArchived = query().archived === "show";
  const list = h("div");
  const load = async () => {
    const p = new URLSearchParams({ sortBy: "SORT_BY_NAME", limit: 200 });
    if (!showArchived) p.set("archived", "false");
    const { workspaces } = await api("/api/v1/workspaces?" + p);
    render(list, table(["Workspace", "Projects", "Experiments", "Owner", "", ""], workspaces.map((w) => [
      link("/det/workspaces/" + w.id, w.name), String(w.numProjects), String(w.numExperiments), w.username, archivedBadge(w),
      w.immutable ? "" : archiveToggle("workspace", w, "/api/v1/workspaces/" + w.id, load),
    ]), "No workspaces."));
  };
  render(main, h("h1", {}, "Workspaces"),
    createForm("create-workspace", "Create workspace", [["name", "new workspace name", true]], async (v) => {
      const { workspace } = await api("/api/v1/workspaces", { method: "POST", body: { name: v.name.trim() } });
      location.assign("/det/workspaces/" + workspace.id);
    }),
    h("form", { class: "toolbar", onsubmit: (ev) => ev.preventDefault() }, h("label", {}, h("input", { type: "checkbox", name: "archived", checked: showArchived, onchange: (ev) => {
      showArchived = ev.target.checked;
      setQuery({ archived: showArchived ? "show" : "" });
      load();
    } }), "show archived")),
    list);
  await load();
  return { refresh: load };
}

async function workspacePage(main, id) {
  const head = h("div");
  const list = h("div");
  const load = async () => {
    const [{ workspace: w }, { projects }, { resourcePools }] = await Promise.all([
      api("/api/v1/workspaces/" + id),
      api(`/api/v1/workspaces/${id}/projects?sortBy=SORT_BY_NAME&limit=200`),
      api(`/api/v1/workspaces/${id}/available-resource-pools`),
    ]);
    // The pools its experiments and tasks may use (bound to it, or to no workspace), and its
    // defaults where it has its own (else the cluster's).
    const defaults = `compute ${w.defaultComputePool || "(the cluster's)"}, aux ${w.defaultAuxPool || "(the cluster's)"}`;
    render(head, h("h1", {}, link("/det/workspaces", "Workspaces"), " / ", w.name, " ", archivedBadge(w), " ", w.immutable ? null : archiveToggle("workspace", w, "/api/v1/workspaces/" + w.id, load)),
      facts([["Owner", w.username], ["Projects", String(w.numProjects)], ["Experiments", String(w.numExperiments)],
        ["Resource pools", (resourcePools || []).join(", ") || "none"], ["Default pools", defaults]]));
    render(list, table(["Project", "Key", "Description", "Experiments", "Active", "Owner", "", ""], projects.map((p) => [
      link("/det/projects/" + p.id, p.name), p.key || "", p.description || "", String(p.numExperiments), String(p.numActiveExperiments), p.username, archivedBadge(p),
      p.immutable ? "" : archiveToggle("project", p, "/api/v1/projects/" + p.id, load),
    ]), "No projects yet."));
  };
  render(main, head, h("h2", {}, "Projects"),
    createForm("create-project", "Create project", [["name", "new project name", true], ["description", "new project description", false]], async (v) => {
      const { project } = await api(`/api/v1/workspaces/${id}/projects`, { method: "POST", body: { name: v.name.trim(), workspaceId: Number(id), description: v.description || "" } });
      location.assign("/det/projects/" + project.id);
    }),
    list);
  await load();
  return { refresh: load };
}

async function projectPage(main, id) {
  const { project: p } = await api("/api/v1/projects/" + id);
  const notes = h("div");
  const drawNotes = (list) => render(notes,
    (list || []).length ? list.map((n) => h("details", { class: "note", open: true }, h("summary", {}, n.name), h("pre", { class: "note-text" }, n.contents || ""))) : h("p", { class: "muted" }, "No notes."),
    createForm("add-note", "Add note", [["name", "note title", true], ["contents", "note text", false]], async (v) => {
      const out = await api(`/api/v1/projects/${id}/notes`, { method: "POST", body: { name: v.name.trim(), contents: v.contents || "" } });
      drawNotes(out.notes);
    }));
  const listBox = h("div");
  render(main,
    h("h1", {}, link("/det/workspaces/" + p.workspaceId, p.workspaceName || "workspace " + p.workspaceId), " / ", p.name, " ", archivedBadge(p)),
    p.description ? h("p", {}, p.description) : null,
    listBox,
    h("h2", {}, "Notes"), notes);
  drawNotes(p.notes);
  return experimentsPage(listBox, p.id, h("h2", {}, "Experiments"));
}
