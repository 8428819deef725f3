// Dead letters: the newest first, filtered by table and reason, each with where it came
// from, why, and a preview of its bytes; a selection downloads whole, as JSON.
import { api } from "./api.js";
import { fill, h, keyedRows, number, scrolling, table, when } from "./dom.js";
import { every, report } from "./refresh.js";

function query(filters, whole) {
  const params = new URLSearchParams({ limit: filters.limit.value });
  if (filters.table.value.trim()) params.set("table", filters.table.value.trim());
  if (filters.kind.value.trim()) params.set("kind", filters.kind.value.trim());
  if (whole) params.set("whole", "true");
  return params.toString();
}

export function deadLettersPage(ctx) {
  const problem = h("p", { class: "error", role: "alert" });
  const summary = h("p", { id: "dead-letters-summary", role: "status" });
  const filters = {
    table: h("input", { id: "dl-table", size: 30, placeholder: "schema.table" }),
    kind: h("input", { id: "dl-kind", size: 20, list: "dl-kinds", placeholder: "malformed" }),
    limit: h("select", { id: "dl-limit" }, [50, 100, 500, 1000].map((n) => h("option", { value: n, selected: n === 100 }, n))),
  };
  const kinds = h("datalist", { id: "dl-kinds" });
  const selected = new Set();
  const download = h("button", { type: "button", id: "dl-download", disabled: true }, "Download selected");
  const all = h("input", { type: "checkbox", id: "dl-all", "aria-label": "Select every dead letter shown" });
  const letters = table("Dead letters, newest first", ["", "Time", "Table", "Reason", "Source", "Error", "Value preview"]);
  letters.el.querySelector("thead th").append(all);
  let shown = [];

  function chosen() {
    download.disabled = !ctx.canWrite || selected.size === 0; // a download is the operator's
    fill(download, selected.size ? `Download ${selected.size} selected` : "Download selected");
  }
  all.addEventListener("change", () => {
    for (const d of shown) {
      if (all.checked) selected.add(`${d.partition}:${d.offset}`);
      else selected.delete(`${d.partition}:${d.offset}`);
    }
    for (const box of letters.tbody.querySelectorAll("input[type=checkbox]")) box.checked = all.checked;
    chosen();
  });

  download.addEventListener("click", async () => {
    try {
      const found = await api.get(`${ctx.base}/dead-letters?${query(filters, true)}`);
      const picked = found.dead_letters.filter((d) => selected.has(`${d.partition}:${d.offset}`));
      const blob = new Blob([JSON.stringify(picked, null, 2)], { type: "application/json" });
      const link = h("a", { href: URL.createObjectURL(blob), download: `${ctx.pipeline}-dead-letters.json` });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
    } catch (exc) {
      report(problem, exc);
    }
  });

  const form = h("form", { class: "actions", "aria-label": "Filter" },
    h("label", { for: "dl-table" }, "Table"), filters.table,
    h("label", { for: "dl-kind" }, "Reason"), filters.kind, kinds,
    h("label", { for: "dl-limit" }, "Newest"), filters.limit,
    h("button", { type: "submit", id: "dl-filter", class: "secondary" }, "Filter"),
    download);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    selected.clear();
    chosen();
    refresh.now();
  });

  fill(ctx.main.appendChild(h("div")),
    h("h1", {}, "Dead letters"),
    problem,
    form,
    summary,
    scrolling(letters));

  const refresh = every(10_000, async () => {
    try {
      const found = await api.get(`${ctx.base}/dead-letters?${query(filters, false)}`);
      shown = found.dead_letters;
      fill(summary, `${number(shown.length)} shown of ${number(found.scanned)} records looked at`,
        found.complete ? "." : " (the oldest were left out: narrow the filter to see them).");
      const known = new Set([...kinds.options].map((o) => o.value));
      for (const d of shown) {
        if (d.kind && !known.has(d.kind)) {
          kinds.append(h("option", { value: d.kind }));
          known.add(d.kind);
        }
      }
      keyedRows(letters.tbody, shown, (d) => `${d.partition}:${d.offset}`,
        (d) => {
          const key = `${d.partition}:${d.offset}`;
          const box = h("input", { type: "checkbox", "aria-label": `Select the dead letter at partition ${d.partition}, offset ${d.offset}` });
          box.checked = selected.has(key);
          box.addEventListener("change", () => {
            if (box.checked) selected.add(key);
            else selected.delete(key);
            chosen();
          });
          return h("tr", {}, h("td", {}, box), h("td"), h("td", { class: "mono" }), h("td"), h("td", { class: "mono" }), h("td", { class: "error" }), h("td", { class: "mono" }));
        },
        (row, d) => {
          const c = row.children;
          c[1].textContent = when(d.timestamp_ms);
          c[2].textContent = d.table || "–";
          c[3].textContent = d.kind || "–";
          const s = d.source || {};
          c[4].textContent = s.topic ? `${s.topic} [${s.partition}] @${s.offset}` : "–";
          c[5].textContent = d.error || "–";
          c[6].textContent = d.value_preview === null || d.value_preview === undefined ? "–" : `${d.value_preview} (${number(d.value_bytes)} bytes)`;
        });
      report(problem);
    } catch (exc) {
      report(problem, exc);
    }
  });
  return refresh;
}
