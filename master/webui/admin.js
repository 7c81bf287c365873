// det WebUI: user administration (admins only; the API refuses the same changes to others).
"use strict";

async function usersPage(main) {
  const user = await me();
  if (!user.admin) {
    render(main, h("h1", {}, "Users"), h("p", { class: "refused", role: "alert" }, "Only an admin may manage users. You are logged in as ", user.username, ", who is not an admin."));
    return { refresh: null };
  }
  const list = h("div");
  const error = h("p", { class: "form-error", role: "alert" });
  const patch = (u, body, what) => act(`${what} ${u.username}`, () => api(`/api/v1/users/${u.id}`, { method: "PATCH", body }), load);
  const create = h("form", { class: "inline-form create-user", onsubmit: async (ev) => {
    ev.preventDefault();
    const data = new FormData(create);
    error.textContent = "";
    try {
      await api("/api/v1/users", { method: "POST", body: {
        user: { username: String(data.get("username") || "").trim(), admin: data.get("admin") === "on", active: true, displayName: String(data.get("displayName") || "") },
        password: String(data.get("password") || ""),
      } });
      create.reset();
      await load();
    } catch (e) {
      error.textContent = "create user: " + e.message;
    }
  } },
  h("input", { name: "username", placeholder: "user name", "aria-label": "new user name", required: true, autocomplete: "off" }),
  h("input", { name: "displayName", placeholder: "display name", "aria-label": "new user display name" }),
  h("input", { name: "password", type: "password", placeholder: "password", "aria-label": "new user password", autocomplete: "new-password" }),
  h("label", {}, h("input", { type: "checkbox", name: "admin" }), "admin"),
  h("button", { type: "submit" }, "Create user"), error);
  const load = async () => {
    const { users } = await api("/api/v1/users?sortBy=SORT_BY_USER_NAME");
    render(list, table(["User", "Display name", "Admin", "Active", "Changed", ""], users.map((u) => [
      u.username, u.displayName || "", u.admin ? "yes" : "no", u.active ? "yes" : "no", when(u.modifiedAt),
      h("span", { class: "actions", "data-user": u.username },
        u.id === user.id ? h("span", { class: "muted" }, "you") : [
          h("button", { class: u.active ? "danger" : "", onclick: () => {
            if (!u.active || confirm(`Deactivate ${u.username}? They can no longer log in and their sessions end.`)) patch(u, { active: !u.active }, u.active ? "deactivate" : "activate");
          } }, u.active ? "Deactivate" : "Activate"),
          h("button", { onclick: () => patch(u, { admin: !u.admin }, u.admin ? "remove admin from" : "make admin") }, u.admin ? "Remove admin" : "Make admin"),
        ],
        h("button", { onclick: () => {
          const pw = prompt(`New password for ${u.username}:`);
          if (pw) patch(u, { password: pw }, "reset the password of");
        } }, "Reset password…")),
    ])));
  };
  render(main, h("h1", {}, "Users"), create, list);
  await load();
  return { refresh: null };
}
