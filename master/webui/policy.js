// det WebUI: the task container policy (what a non-admin's task may mount, add and pass in).
// Every user reads it; an admin edits it at run time (stored in the database, with its
// history); master.yaml gives its first value. The master checks every change (400 and one
// line for a bad policy, 403 for a non-admin).
"use strict";

const POLICY_PATH = "/api/v1/master/task-container-policy";

const policyValue = (v) => (v === null || v === undefined ? "not set" : Array.isArray(v) && !v.length ? "none" : typeof v === "object" ? JSON.stringify(v) : String(v));

async function policyPage(main) {
  const [user, current] = await Promise.all([me(), api(POLICY_PATH)]);
  const shown = h("section", { class: "policy-current" });
  const editor = h("section", { class: "policy-edit" });
  const history = h("section", { class: "policy-history" });
  const drawCurrent = (c) => render(shown,
    facts([
      ["From", c.source === "database" ? "set at run time (the database)" : "master.yaml (not changed since the master started with it)"],
      ["Changed", c.updatedAt ? when(c.updatedAt) : ""],
      ["By", c.updatedBy || ""],
    ]),
    table(["Key", "Value"], Object.entries(c.policy || {}).map(([k, v]) => [h("code", {}, k), h("code", { "data-key": k }, policyValue(v))]), "No keys: the defaults apply."));
  drawCurrent(current);

  const loadHistory = async () => {
    const rows = await api(POLICY_PATH + "/history");
    render(history, h("h2", {}, "History"), table(["#", "Changed", "By", "Policy"], rows.map((r) => [String(r.id), when(r.updatedAt), r.updatedBy || "", h("code", {}, JSON.stringify(r.policy))]), "No change since master.yaml's."));
  };

  if (user.admin) {
    const text = h("textarea", { name: "policy", rows: 10, spellcheck: "false", "aria-label": "the policy as JSON" }, JSON.stringify(current.policy || {}, null, 2));
    const error = h("p", { class: "form-error", role: "alert" });
    const saved = h("p", { class: "muted", role: "status" });
    const form = h("form", { class: "policy-form", onsubmit: async (ev) => {
      ev.preventDefault();
      error.textContent = "";
      saved.textContent = "";
      let policy;
      try {
        policy = JSON.parse(text.value);
      } catch (e) {
        error.textContent = "policy: not JSON (" + e.message + ")";
        return;
      }
      if (!policy || typeof policy !== "object" || Array.isArray(policy)) {
        error.textContent = "policy: a JSON object of task_container_policy's keys";
        return;
      }
      try {
        await api(POLICY_PATH, { method: "PUT", body: { policy } });
        const now = await api(POLICY_PATH);
        drawCurrent(now);
        text.value = JSON.stringify(now.policy || {}, null, 2);
        saved.textContent = "Saved: new tasks are held to it.";
        await loadHistory();
      } catch (e) {
        error.textContent = "save policy: " + e.message;
      }
    } },
    h("h2", {}, "Edit"),
    h("p", { class: "muted" }, "task_container_policy's keys as JSON: bind_mounts, add_capabilities, devices, protected_host_paths (docs/config.md). Admins' own tasks are not held to it."),
    text, h("p", {}, h("button", { type: "submit" }, "Save")), error, saved);
    render(editor, form);
  } else {
    render(editor, h("p", { class: "muted read-only" }, "Read only: an admin changes it."));
  }
  render(main, h("h1", {}, "Container policy"), shown, editor, history);
  if (user.admin) await loadHistory();
  return { refresh: null };
}
