// Sink: each Iceberg table as the sink last published it (its compacted status topic):
// the last commit and its offsets, lag, and stopped tables with their reasons.
import { api } from "./api.js";
import { ago, badge, changed, fill, h, keyedRows, number, paged, scrolling, table, when } from "./dom.js";
import { every, report } from "./refresh.js";

function offsets(map) {
  const parts = Object.entries(map || {}).sort((a, b) => Number(a[0]) - Number(b[0]));
  return parts.length ? parts.map(([p, o]) => `${p}: ${number(o)}`).join(", ") : "–";
}

export function sinkPage(ctx) {
  const problem = h("p", { class: "error", role: "alert" });
  const summary = h("p", { id: "sink-summary", role: "status" });
  const tables = table("Iceberg tables", ["Table", "State", "Last commit", "#Rows", "Committed offsets", "#Lag", "Topic", "Reported"], "sink-tables");
  const pages = paged("sink-tables", "tables");
  fill(ctx.main.appendChild(h("div")),
    h("h1", {}, "Sink"),
    problem,
    summary,
    pages.el,
    scrolling(tables));

  let latest = [];
  pages.onChange(() => show(latest));
  function show(found) {
    latest = found;
    const stateOf = (t) => (t.stopped ? `stopped ${t.reason || ""}` : t.retrying ? "retrying" : "running");
    keyedRows(tables.tbody, pages.view(found, (t) => `${t.table} ${t.topic || ""} ${stateOf(t)}`), (t) => t.table,
      () => h("tr", {}, h("td", { class: "mono" }), h("td"), h("td"), h("td", { class: "num" }), h("td", { class: "mono" }), h("td", { class: "num" }), h("td", { class: "mono" }), h("td")),
      (row, t) => {
        const c = row.children;
        c[0].textContent = t.table;
        changed(c[1], [t.stopped, t.reason, t.retrying], () => {
          if (t.stopped) return [badge("stopped"), h("div", { class: "error" }, t.reason || "")];
          if (t.retrying) return [badge("retrying", "waiting"), h("div", { class: "hint" }, t.retrying)];
          return [badge("running")];
        });
        c[2].textContent = when(t.last_commit_ms);
        c[3].textContent = number(t.last_commit_rows);
        c[4].textContent = offsets(t.committed);
        c[5].textContent = number(Object.values(t.lag || {}).reduce((a, b) => a + b, 0));
        c[6].textContent = t.topic || "–";
        c[7].textContent = ago(t.reported_ms);
      });
  }

  return every(5000, async () => {
    try {
      const found = await api.get(`${ctx.base}/sink`);
      const stopped = found.tables.filter((t) => t.stopped).length;
      fill(summary, found.tables.length
        ? `${number(found.tables.length)} tables, ${number(stopped)} stopped.`
        : "No sink has published its status yet.");
      show(found.tables);
      report(problem);
    } catch (exc) {
      report(problem, exc);
    }
  });
}
