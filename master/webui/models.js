// det WebUI: the model registry (models, their versions and checkpoints, notes and metadata).
"use strict";

const modelPath = (name) => "/api/v1/models/" + encodeURIComponent(name);
const modelHref = (name) => "/det/models/" + encodeURIComponent(name);

async function modelsPage(main) {
  const f = { name: query().name || "", archived: query().archived === "show" };
  const list = h("div");
  const error = h("p", { class: "form-error", role: "alert" });
  const create = h("form", { class: "inline-form create-model", onsubmit: async (ev) => {
    ev.preventDefault();
    const data = new FormData(create);
    const name = String(data.get("name") || "").trim();
    try {
      await api("/api/v1/models", { method: "POST", body: { name, description: String(data.get("description") || "") } });
      location.assign(modelHref(name));
    } catch (e) {
      error.textContent = "create model: " + e.message;
    }
  } },
  h("input", { name: "name", placeholder: "model name", "aria-label": "new model name", required: true }),
  h("input", { name: "description", placeholder: "description", "aria-label": "new model description" }),
  h("button", { type: "submit" }, "Create model"), error);
  let latest = 0; // only the newest request's answer is drawn
  const load = async () => {
    const mine = ++latest;
    const p = new URLSearchParams({ sortBy: "SORT_BY_LAST_UPDATED_TIME", orderBy: "ORDER_BY_DESC", limit: 200 });
    if (f.name) p.set("name", f.name);
    if (!f.archived) p.set("archived", "false");
    const { models } = await api("/api/v1/models?" + p);
    if (mine !== latest) return;
    render(list, table(["Name", "Description", "Versions", "Labels", "Owner", "Updated", ""], models.map((m) => [
      link(modelHref(m.name), m.name), m.description || "", String(m.numVersions), (m.labels || []).join(", "), m.username, when(m.lastUpdatedTime),
      m.archived ? h("span", { class: "state state-ARCHIVED" }, "ARCHIVED") : "",
    ]), "No models yet. Register a checkpoint from a trial's page, or create a model here."));
  };
  let typing;
  render(main, h("h1", {}, "Models"), create,
    h("form", { class: "toolbar", onsubmit: (ev) => ev.preventDefault() },
      h("label", {}, "Name ", h("input", { name: "filter", value: f.name, oninput: (ev) => { clearTimeout(typing); typing = setTimeout(() => { f.name = ev.target.value.trim(); setQuery({ name: f.name }); load(); }, 300); } })),
      h("label", {}, h("input", { type: "checkbox", name: "archived", checked: f.archived, onchange: (ev) => { f.archived = ev.target.checked; setQuery({ archived: f.archived ? "show" : "" }); load(); } }), "show archived")),
    list);
  await load();
  return { refresh: null };
}

// Notes: a text area saved with one button.
function notesEditor(notes, save) {
  const area = h("textarea", { name: "notes", rows: 5, "aria-label": "notes" });
  area.value = notes || "";
  const saved = h("span", { class: "muted saved" });
  return h("form", { class: "notes", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      await save(area.value);
      saved.textContent = "Saved.";
      showError("");
    } catch (e) {
      showError("save notes: " + e.message);
    }
  } }, area, h("div", {}, h("button", { type: "submit" }, "Save notes"), " ", saved));
}

// Metadata: a key/value table with add and remove; save(newObject) writes the whole object.
function metadataEditor(metadata, save) {
  const md = { ...(metadata || {}) };
  const rows = Object.entries(md).map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v),
    h("button", { "aria-label": "remove " + k, onclick: () => act("remove metadata", () => { delete md[k]; return save(md); }, () => location.reload()) }, "Remove")]);
  const add = h("form", { class: "inline-form metadata-add", onsubmit: (ev) => {
    ev.preventDefault();
    const data = new FormData(add);
    const key = String(data.get("key") || "").trim();
    if (!key) return;
    md[key] = String(data.get("value") || "");
    act("set metadata", () => save(md), () => location.reload());
  } }, h("input", { name: "key", placeholder: "key", "aria-label": "metadata key" }), h("input", { name: "value", placeholder: "value", "aria-label": "metadata value" }), h("button", { type: "submit" }, "Set"));
  return h("div", { class: "metadata" }, table(["Key", "Value", ""], rows, "No metadata."), add);
}

function editButton(label, current, save) {
  return h("button", { onclick: () => {
    const v = prompt(label + ":", current || "");
    if (v !== null) act("edit " + label.toLowerCase(), () => save(v), () => location.reload());
  } }, "Edit " + label.toLowerCase() + "…");
}

async function modelPage(main, name) {
  const { model: m, modelVersions } = await api(modelPath(name) + "/versions?sortBy=SORT_BY_VERSION&orderBy=ORDER_BY_DESC");
  const patch = (body) => api(modelPath(m.name), { method: "PATCH", body });
  const archive = h("button", { onclick: () => act((m.archived ? "unarchive" : "archive") + " model", () => api(modelPath(m.name) + (m.archived ? "/unarchive" : "/archive"), { method: "POST", body: {} }), () => location.reload()) }, m.archived ? "Unarchive" : "Archive");
  const n = modelVersions.length;
  const remove = h("button", { class: "danger", onclick: () => {
    if (!confirm(`Delete model ${m.name}${n ? ` and its ${n} version${n === 1 ? "" : "s"}` : ""}? This cannot be undone (the checkpoints stay).`)) return;
    act("delete model", () => api(modelPath(m.name), { method: "DELETE" }), () => location.assign("/det/models"));
  } }, "Delete model…");
  render(main,
    h("h1", {}, "Model ", m.name, " ", m.archived ? h("span", { class: "state state-ARCHIVED" }, "ARCHIVED") : null, " ", archive, " ", remove),
    facts([
      ["Description", h("span", {}, m.description || h("span", { class: "muted" }, "none"), " ", editButton("Description", m.description, (v) => patch({ description: v })))],
      ["Labels", h("span", {}, (m.labels || []).join(", ") || h("span", { class: "muted" }, "none"), " ", editButton("Labels", (m.labels || []).join(", "), (v) => patch({ labels: v.split(",").map((x) => x.trim()).filter(Boolean) })))],
      ["Owner", m.username],
      ["Created", when(m.creationTime)],
      ["Updated", when(m.lastUpdatedTime)],
    ]),
    h("h2", {}, "Versions"),
    table(["Version", "Name", "Checkpoint", "Trial", "Batches", "Comment", "Registered by", "Registered"], modelVersions.map((v) => {
      const c = v.checkpoint || {};
      const tr = c.training || {};
      return [
        link(`${modelHref(m.name)}/versions/${v.version}`, "Version " + v.version),
        v.name || "",
        h("code", {}, c.uuid || ""),
        tr.trialId ? link("/det/trials/" + tr.trialId, `trial ${tr.trialId} (experiment ${tr.experimentId})`) : "",
        String(((c.metadata || {}).steps_completed) ?? ""),
        v.comment || "",
        v.username,
        when(v.creationTime),
      ];
    }), "No versions yet. Register a checkpoint from a trial's page."),
    h("h2", {}, "Notes"),
    notesEditor(m.notes, (notes) => patch({ notes })),
    h("h2", {}, "Metadata"),
    metadataEditor(m.metadata, (metadata) => patch({ metadata })),
  );
  return { refresh: null };
}

async function modelVersionPage(main, name, number) {
  const { modelVersion: v } = await api(`${modelPath(name)}/versions/${number}`);
  const patch = (body) => api(`${modelPath(name)}/versions/${number}`, { method: "PATCH", body });
  const c = v.checkpoint || {};
  const tr = c.training || {};
  const resources = Object.entries(c.resources || {});
  const remove = h("button", { class: "danger", onclick: () => {
    if (!confirm(`Delete version ${v.version} of model ${v.model.name}? This cannot be undone (the checkpoint stays).`)) return;
    act("delete version", () => api(`${modelPath(name)}/versions/${number}`, { method: "DELETE" }), () => location.assign(modelHref(v.model.name)));
  } }, "Delete version…");
  render(main,
    h("h1", {}, link(modelHref(v.model.name), v.model.name), ` version ${v.version}`, v.name ? ": " + v.name : "", " ", remove),
    facts([
      ["Name", h("span", {}, v.name || "", " ", editButton("Name", v.name, (x) => patch({ name: x })))],
      ["Comment", h("span", {}, v.comment || "", " ", editButton("Comment", v.comment, (x) => patch({ comment: x })))],
      ["Registered by", v.username],
      ["Registered", when(v.creationTime)],
    ]),
    h("h2", {}, "Checkpoint"),
    facts([
      ["UUID", h("code", {}, c.uuid || "")],
      ["State", stateName(c.state)],
      ["Trial", tr.trialId ? link("/det/trials/" + tr.trialId, "trial " + tr.trialId) : ""],
      ["Experiment", tr.experimentId ? link("/det/experiments/" + tr.experimentId, "experiment " + tr.experimentId) : ""],
      ["Batches", String(((c.metadata || {}).steps_completed) ?? "")],
      ["Validation", Object.entries(((tr.validationMetrics || {}).avgMetrics) || {}).map(([k, x]) => `${k}=${num(x)}`).join(" ")],
      ["Reported", when(c.reportTime)],
    ]),
    table(["File", "Bytes"], resources.map(([f, b]) => [f, String(b)]), "No files listed."),
    h("h2", {}, "Notes"),
    notesEditor(v.notes, (notes) => patch({ notes })),
    h("h2", {}, "Metadata"),
    metadataEditor(v.metadata, (metadata) => patch({ metadata })),
  );
  return { refresh: null };
}
