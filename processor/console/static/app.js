// The console's frame: the login, the navigation between pages, and each page's refresh.
import { login, logout, session } from "./api.js";
import { auditPage } from "./audit.js";
import { fill, h } from "./dom.js";
import { deadLettersPage } from "./dead_letters.js";
import { offsetsPage } from "./offsets.js";
import { overviewPage } from "./overview.js";
import { sinkPage } from "./sink.js";
import { snapshotsPage } from "./snapshots.js";

const PAGES = {
  overview: overviewPage,
  snapshots: snapshotsPage,
  offsets: offsetsPage,
  "dead-letters": deadLettersPage,
  sink: sinkPage,
  audit: auditPage,
};

const main = document.getElementById("main");
let who = null;
let shown = null; // the page on screen: { stop() }

function loginPage(message) {
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  fill(document.getElementById("who"));
  const token = h("input", { id: "token", name: "token", type: "password", autocomplete: "current-password", required: true });
  const error = h("p", { id: "login-error", class: "error", role: "alert" }, message || "");
  const form = h("form", { class: "login", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title" }, "Log in"),
    h("p", {}, "Enter the pipeline's API token, or its read-only viewer token."),
    h("p", {}, h("label", { for: "token" }, "Token"), h("br"), token),
    h("p", {}, h("button", { type: "submit", id: "login-submit" }, "Log in")),
    error);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      who = await login(token.value);
      token.value = "";
      start(true);
    } catch (exc) {
      fill(error, exc.status === 429 ? `Too many failed attempts: ${exc.message}` : `Not logged in: ${exc.message}`);
      token.select();
    }
  });
  fill(main, form);
  token.focus();
}

function show() {
  if (shown) shown.stop();
  shown = null;
  const name = (location.hash.replace(/^#\/?/, "") || "overview").split("?")[0];
  const page = PAGES[name] ? name : "overview";
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.getAttribute("href") === `#/${page}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const ctx = {
    main,
    pipeline: who.pipeline,
    role: who.role,
    canWrite: who.role === "operator",
    base: `/pipelines/${encodeURIComponent(who.pipeline)}`,
  };
  fill(main);
  if (!ctx.canWrite) {
    main.append(h("p", { class: "readonly", role: "note" },
      "Read-only: you logged in with the viewer's token, so every button that changes something is disabled."));
  }
  shown = PAGES[page](ctx);
  document.title = `${document.querySelector(`#nav a[href="#/${page}"]`).textContent} · Tidemark`;
}

// Show the console; focus its page after a login (the form is gone), not on a load.
function start(focus) {
  document.getElementById("nav").hidden = false;
  document.getElementById("logout").hidden = false;
  fill(document.getElementById("pipeline"), who.pipeline);
  fill(document.getElementById("who"), who.role === "operator" ? "operator" : "viewer (read-only)");
  show();
  if (focus) main.focus({ preventScroll: true });
}

window.addEventListener("hashchange", () => {
  if (who) {
    show();
    main.focus({ preventScroll: true });
  }
});

window.addEventListener("tidemark:logged-out", () => {
  if (!who) return;
  who = null;
  if (shown) shown.stop();
  shown = null;
  loginPage("The session has ended: log in again.");
});

document.getElementById("logout").addEventListener("click", async () => {
  await logout();
  who = null;
  if (shown) shown.stop();
  shown = null;
  loginPage("Logged out.");
});

who = await session();
if (who) start(false);
else loginPage();
