// Snapshots: start one (the API checks the form), pause, resume and stop, follow each
// table's progress, and read the notifications in Debezium's format.
import { api } from "./api.js";
import { badge, changed, confirmed, duration, fill, h, keyedRows, number, paged, scrolling, table, when } from "./dom.js";
import { every, report } from "./refresh.js";

function keyText(key) {
  return key === null || key === undefined ? "–" : JSON.stringify(key);
}

export function snapshotsPage(ctx) {
  const problem = h("p", { class: "error", role: "alert" });
  const formError = h("p", { id: "snapshot-error", class: "error", role: "alert" });
  const notice = h("p", { id: "snapshot-notice", class: "notice", role: "status" });
  const paused = h("span", { id: "snapshots-paused" });
  const tables = h("input", { id: "snapshot-tables", name: "tables", required: true, size: 50, placeholder: "public.orders, public.customers", "aria-describedby": "snapshot-tables-hint" });
  const filter = h("input", { id: "snapshot-filter", name: "filter", size: 50, placeholder: "status = 'open'", "aria-describedby": "snapshot-filter-hint" });
  const surrogate = h("input", { id: "snapshot-key", name: "surrogate-key", size: 30 });
  const start = h("button", { type: "submit", id: "snapshot-start", disabled: !ctx.canWrite }, "Start snapshot");

  const form = h("form", { class: "grid", "aria-labelledby": "start-title" },
    h("label", { for: "snapshot-tables" }, "Tables"),
    h("div", {}, tables, h("div", { id: "snapshot-tables-hint", class: "hint" }, "schema.table, separated by commas")),
    h("label", { for: "snapshot-filter" }, "Filter"),
    h("div", {}, filter, h("div", { id: "snapshot-filter-hint", class: "hint" }, "optional: a SQL condition on each table's rows")),
    h("label", { for: "snapshot-key" }, "Surrogate key"),
    h("div", {}, surrogate),
    h("span"), h("div", {}, start));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const names = tables.value.split(",").map((t) => t.trim()).filter(Boolean);
    const body = { "data-collections": names, type: "incremental" };
    if (filter.value.trim()) body["additional-conditions"] = names.map((t) => ({ "data-collection": t, filter: filter.value.trim() }));
    if (surrogate.value.trim()) body["surrogate-key"] = surrogate.value.trim();
    try {
      const accepted = await api.post("/snapshots", body);
      fill(formError);
      fill(notice, `Snapshot requested: ${accepted.request_id}`);
      refresh.now();
    } catch (exc) {
      fill(notice);
      fill(formError, exc.message);
    }
  });

  async function act(action, label, collections) {
    const what = collections ? `table ${collections[0]}` : "every table";
    if (action === "stop" && !(await confirmed(`Stop the snapshot of ${what}?`, h("p", {}, "Rows read so far stay emitted; the rest is not read.")))) return;
    try {
      await api.post(`/snapshots/${action}`, collections ? { "data-collections": collections, type: "incremental" } : { type: "incremental" });
      fill(formError);
      fill(notice, `${label}: signal sent.`);
      refresh.now();
    } catch (exc) {
      fill(formError, `${label} refused: ${exc.message}`);
    }
  }

  const controls = h("div", { class: "actions" },
    h("button", { type: "button", id: "snapshots-pause", class: "secondary", disabled: !ctx.canWrite, onclick: () => act("pause", "Pause") }, "Pause all"),
    h("button", { type: "button", id: "snapshots-resume", class: "secondary", disabled: !ctx.canWrite, onclick: () => act("resume", "Resume") }, "Resume all"),
    h("button", { type: "button", id: "snapshots-stop", class: "danger", disabled: !ctx.canWrite, onclick: () => act("stop", "Stop") }, "Stop all"));

  const progress = table("Tables", ["Table", "Status", "Progress", "#Rows", "#Chunks", "ETA", "Request", "Parts being read", "Last key", "Action"], "snapshot-progress");
  const pages = paged("snapshot-progress", "tables");
  let shownTables = []; // the last refresh's, shown again at once when the filter or the page changes
  pages.onChange(() => showTables(shownTables));
  const notes = table("Notifications, newest first", ["Time", "Type", "Request", "Table", "Data"]);
  const requestFilter = h("select", { id: "notification-request" }, h("option", { value: "" }, "every request"));
  requestFilter.addEventListener("change", () => refresh.now());

  fill(ctx.main.appendChild(h("div")),
    h("h1", {}, "Snapshots"),
    problem,
    h("section", { "aria-labelledby": "start-title" }, h("h2", { id: "start-title" }, "Start a snapshot"), form, formError, notice),
    h("section", { "aria-labelledby": "progress-title" },
      h("h2", { id: "progress-title" }, "Progress"),
      h("p", {}, "Snapshots are ", paused, "."),
      controls,
      pages.el,
      scrolling(progress)),
    h("section", { "aria-labelledby": "notes-title" },
      h("h2", { id: "notes-title" }, "Notifications"),
      h("p", {}, h("label", { for: "notification-request" }, "Request "), " ", requestFilter),
      scrolling(notes)));

  function showTables(found) {
    shownTables = found;
    const page = pages.view(found, (t) => `${t.table} ${t.status} ${t.request_id}`);
    keyedRows(progress.tbody, page, (t) => `${t.request_id}/${t.table}`,
      (t) => h("tr", {},
        h("td", { class: "mono" }),
        h("td"),
        h("td", { class: "nowrap" }, h("progress", { max: 100, "aria-label": `progress of ${t.table}` }), " ", h("span")),
        h("td", { class: "num" }), h("td", { class: "num" }), h("td"),
        h("td", { class: "mono" }), h("td", { class: "mono" }), h("td", { class: "mono" }),
        h("td", {}, h("button", {
          type: "button", class: "secondary", disabled: !ctx.canWrite,
          "aria-label": `Stop the snapshot of ${t.table}`,
          onclick: () => act("stop", `Stop ${t.table}`, [t.table]),
        }, "Stop"))),
      (row, t) => {
        const c = row.children;
        c[0].textContent = t.table;
        changed(c[1], [t.status, t.waiting, t.error], () => [
          badge(t.status),
          t.waiting ? h("div", { class: "hint" }, t.waiting) : null,
          t.error ? h("div", { class: "error" }, t.error) : null,
        ]);
        // no estimate yet: an empty bar (an indeterminate one animates, 500 of them busy the page)
        c[2].firstChild.value = t.percent === null ? 0 : t.percent;
        c[2].lastChild.textContent = t.percent === null ? "–" : `${t.percent.toFixed(1)} %`;
        c[3].textContent = t.estimated_rows ? `${number(t.rows)} of ~${number(t.estimated_rows)}` : number(t.rows);
        c[4].textContent = number(t.chunks);
        c[5].textContent = duration(t.seconds_left);
        c[6].textContent = t.request_id;
        const reading = t.ranges.filter((r) => r.chunk && r.rows === null);
        c[7].textContent = reading.length ? reading.map((r) => `${keyText(r.after)} – ${keyText(r.upto)}`).join("; ") : "–";
        c[8].textContent = keyText(t.last_key);
        c[9].firstChild.disabled = !ctx.canWrite || !["queued", "running"].includes(t.status);
      });
  }

  const refresh = every(2000, async () => {
    try {
      const query = requestFilter.value ? `&request=${encodeURIComponent(requestFilter.value)}` : "";
      const [state, found] = await Promise.all([
        api.get("/snapshots"),
        api.get(`/notifications?limit=200${query}`),
      ]);
      fill(paused, state.paused ? badge("paused", "PAUSED") : badge("running", "RUNNING"));
      showTables(state.tables);
      const requests = new Set([...requestFilter.options].map((o) => o.value));
      for (const t of state.tables) {
        if (!requests.has(t.request_id)) {
          requestFilter.append(h("option", { value: t.request_id }, t.request_id));
          requests.add(t.request_id);
        }
      }
      keyedRows(notes.tbody, found.notifications, (n) => n.id,
        () => h("tr", {}, h("td"), h("td"), h("td", { class: "mono" }), h("td", { class: "mono" }), h("td", { class: "mono" })),
        (row, n) => {
          const c = row.children;
          const data = { ...n.additional_data };
          c[0].textContent = when(n.timestamp);
          c[1].textContent = n.type;
          c[2].textContent = data.request_id || "–";
          c[3].textContent = data.data_collection || data.data_collections || "–";
          delete data.request_id;
          delete data.connector_name;
          c[4].textContent = JSON.stringify(data);
        });
      report(problem);
    } catch (exc) {
      report(problem, exc);
    }
  });
  return refresh;
}
