// Audit: the operator actions of the pipeline (its audit topic), newest first: when, through
// what, who (a token or session by its fingerprint), the action and its result.
import { api } from "./api.js";
import { badge, fill, h, keyedRows, number, scrolling, table, when } from "./dom.js";
import { every, report } from "./refresh.js";

export function auditPage(ctx) {
  const problem = h("p", { class: "error", role: "alert" });
  const summary = h("p", { id: "audit-summary", role: "status" });
  const entries = table("Operator actions", ["When", "Via", "Role", "Who", "From", "Action", "Result"]);
  fill(ctx.main.appendChild(h("div")),
    h("h1", {}, "Audit"),
    problem,
    summary,
    scrolling(entries));

  return every(5000, async () => {
    try {
      const found = await api.get(`${ctx.base}/audit?limit=200`);
      fill(summary, `${number(found.entries.length)} actions, newest first`
        + (found.unreadable ? `; ${number(found.unreadable)} records that are not audit records were left out.` : "."));
      keyedRows(entries.tbody, found.entries, (e) => `${e.at_ms} ${e.action} ${e.who.credential}`,
        () => h("tr", {}, h("td"), h("td"), h("td"), h("td", { class: "mono" }), h("td", { class: "mono" }), h("td", { class: "mono" }), h("td")),
        (row, e) => {
          const c = row.children;
          c[0].textContent = when(e.at_ms);
          c[1].textContent = e.via;
          c[2].textContent = e.who.role || "–";
          c[3].textContent = e.who.credential || "–";
          c[4].textContent = e.who.address || "–";
          c[5].textContent = e.action;
          const ok = e.via === "cli" ? e.result.status === 0 : e.result.status < 400; // an exit code
          fill(c[6], badge(String(e.result.status), ok ? "ok" : "bad"),
            e.result.error ? h("div", { class: "error" }, e.result.error) : "");
        });
      report(problem);
    } catch (exc) {
      report(problem, exc);
    }
  });
}
