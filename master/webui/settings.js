// det WebUI: the user's own settings: password, default workspace, access tokens.
"use strict";

// Where the WebUI keeps its settings among the user's (Determined's /api/v1/users/setting).
const WEBUI_SETTINGS = "det-webui";
const DEFAULT_WORKSPACE_KEY = "defaultWorkspaceId";

async function webuiSetting(key) {
  const { settings } = await api("/api/v1/users/setting");
  const found = (settings || []).find((s) => s.storagePath === WEBUI_SETTINGS && s.key === key);
  return found ? found.value : "";
}

const saveWebuiSetting = (key, value) =>
  api("/api/v1/users/setting", { method: "POST", body: { settings: [{ storagePath: WEBUI_SETTINGS, key, value: String(value || "") }] } });

// The user's default workspace (an id, or null when unset or no longer there).
async function defaultWorkspaceId(workspaces) {
  const value = Number(await webuiSetting(DEFAULT_WORKSPACE_KEY).catch(() => ""));
  return workspaces.some((w) => w.id === value) ? value : null;
}

// The password form: the current one is checked first (a login that is logged out again), then
// the new one is set. The master ends every session of the user on a change, this one too, so
// the page logs in again with the new password.
function passwordForm(user) {
  const status = h("p", { class: "form-status", role: "status" });
  const error = h("p", { class: "form-error", role: "alert" });
  const field = (name, label, autocomplete) => h("label", {}, label, h("input", { name, type: "password", autocomplete, required: true }));
  const login = async (password) => {
    const r = await fetch("/api/v1/auth/login", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ username: user.username, password }) });
    const out = await r.json().catch(() => ({}));
    if (r.ok) return { token: out.token };
    return { refused: r.status === 401 ? "wrong password" : out.message || `login failed (${r.status})` };
  };
  const form = h("form", { class: "settings-form change-password", onsubmit: async (ev) => {
    ev.preventDefault();
    error.textContent = status.textContent = "";
    const data = new FormData(form);
    const [current, next, again] = ["current", "password", "confirm"].map((k) => String(data.get(k) || ""));
    if (next !== again) return (error.textContent = "confirm: the two new passwords differ");
    if (next === current) return (error.textContent = "password: the new password is the current one");
    const check = await login(current);
    if (!check.token) return (error.textContent = "current password: " + check.refused);
    await fetch("/api/v1/auth/logout", { method: "POST", headers: { Authorization: "Bearer " + check.token, "Content-Type": "application/json" }, body: "{}" }).catch(() => {});
    try {
      await api(`/api/v1/users/${user.id}`, { method: "PATCH", body: { password: next } });
    } catch (e) {
      return (error.textContent = "password: " + e.message);
    }
    const fresh = await login(next);
    if (!fresh.token) return toLogin();
    localStorage.setItem(TOKEN_KEY, fresh.token);
    form.reset();
    status.textContent = "Password changed. Your other sessions and your access tokens have ended: log in again there, create new tokens.";
  } },
  h("h2", {}, "Password"),
  field("current", "Current password", "current-password"),
  field("password", "New password", "new-password"),
  field("confirm", "New password again", "new-password"),
  h("button", { type: "submit" }, "Change password"), status, error);
  return form;
}

function defaultWorkspaceForm(workspaces, current) {
  const status = h("p", { class: "form-status", role: "status" });
  const select = h("select", { name: "defaultWorkspace", "aria-label": "default workspace", onchange: (ev) => act("set the default workspace", async () => {
    await saveWebuiSetting(DEFAULT_WORKSPACE_KEY, ev.target.value);
    const w = workspaces.find((x) => String(x.id) === ev.target.value);
    status.textContent = w ? `Saved: ${w.name}.` : "Saved: none.";
  }, async () => {}) },
  h("option", { value: "" }, "none"),
  workspaces.map((w) => h("option", { value: w.id, selected: w.id === current }, w.name)));
  return h("section", { class: "settings-form default-workspace" },
    h("h2", {}, "Default workspace"),
    h("p", { class: "muted" }, "Tasks you start here go to this workspace unless you pick another."),
    h("label", {}, "Workspace", select), status);
}

function tokensSection(user) {
  const list = h("div");
  const shown = h("div", { class: "new-token", role: "status" });
  const error = h("p", { class: "form-error", role: "alert" });
  const load = async () => {
    const { tokenInfo } = await api(`/api/v1/tokens?username=${encodeURIComponent(user.username)}`);
    render(list, table(["ID", "Description", "Created", "Expires", ""], (tokenInfo || []).map((t) => [
      String(t.id), t.description || "", when(t.createdAt), when(t.expiry),
      h("button", { class: "danger", "data-token": t.id, onclick: () => {
        if (confirm(`Revoke token ${t.id}${t.description ? " (" + t.description + ")" : ""}? Whatever uses it stops working.`)) {
          act(`revoke token ${t.id}`, () => api(`/api/v1/tokens/${t.id}`, { method: "PATCH", body: { setRevoked: true } }), load);
        }
      } }, "Revoke"),
    ]), "No access tokens. Create one for scripts and the CLI (det token login)."));
  };
  const form = h("form", { class: "inline-form create-token", onsubmit: async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    const data = new FormData(form);
    try {
      const out = await api("/api/v1/tokens", { method: "POST", body: { userId: user.id, description: String(data.get("description") || ""), lifespan: String(data.get("lifespan") || "") } });
      form.reset();
      render(shown, h("p", {}, `Token ${out.tokenId} (shown once; copy it now):`), h("code", { class: "token-value" }, out.token));
      await load();
    } catch (e) {
      error.textContent = "create token: " + e.message;
    }
  } },
  h("input", { name: "description", placeholder: "description", "aria-label": "token description" }),
  h("input", { name: "lifespan", placeholder: "lifespan, e.g. 720h (default 30 days)", "aria-label": "token lifespan" }),
  h("button", { type: "submit" }, "Create token"), error);
  return { section: h("section", { class: "settings-form tokens" }, h("h2", {}, "Access tokens"), form, shown, list), load };
}

async function settingsPage(main) {
  const user = await me();
  const { workspaces } = await api("/api/v1/workspaces?archived=false&sortBy=SORT_BY_NAME&limit=200");
  const current = await defaultWorkspaceId(workspaces);
  const tokens = tokensSection(user);
  render(main, h("h1", {}, "Settings"),
    facts([["User", user.username], ["Display name", user.displayName || ""], ["Admin", user.admin ? "yes" : "no"]]),
    passwordForm(user), defaultWorkspaceForm(workspaces, current), tokens.section);
  await tokens.load();
  return { refresh: null };
}
