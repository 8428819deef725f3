// Overview: the lifecycle and its buttons, the instances and their partitions, each
// topic's rates, lag (with the last 15 minutes charted) and dead letters, refused sources.
import { api } from "./api.js";
import { lineChart } from "./chart.js";
import { ago, badge, confirmed, fill, h, keyedRows, number, paged, rate, scrolling, table } from "./dom.js";
import { every, report } from "./refresh.js";

const ACTIONS = [
  ["stop", "Stop", "Every instance stops reading and commits what it has. Snapshots stop too; offsets may then be edited."],
  ["pause", "Pause", "Every instance stops reading, keeping its partitions."],
  ["resume", "Resume", "Every instance reads again."],
];

export function overviewPage(ctx) {
  const error = h("p", { class: "error", role: "alert" });
  const problem = h("p", { class: "error", role: "alert" });
  const notice = h("p", { class: "notice", role: "status" });
  const lifecycle = h("span", { id: "lifecycle" }, "…");
  const buttons = ACTIONS.map(([action, label, explained]) => h("button", {
    type: "button",
    id: `pipeline-${action}`,
    class: action === "resume" ? null : "danger",
    disabled: !ctx.canWrite,
    onclick: async () => {
      if (!(await confirmed(`${label} pipeline ${ctx.pipeline}?`, h("p", {}, explained)))) return;
      try {
        await api.post(`${ctx.base}/${action}`);
        fill(notice, `Asked every instance to ${action}.`);
        fill(error);
        refresh.now();
      } catch (exc) {
        fill(error, `${label} refused: ${exc.message}`);
      }
    },
  }, label));

  const instances = table("Instances", ["Instance", "Data plane", "Lifecycle", "Snapshots", "#Partitions", "Reported", "Error"]);
  const topics = table("Topics on this instance (the latest 5-second sample)", ["Topic", "#Events in/s", "#Events out/s", "#Lag", "#Dead letters/s"], "topics");
  const partitions = table("Partitions and the instance that holds each", ["Topic", "#Partition", "Instance"], "partitions");
  const topicPages = paged("topics", "topics");
  const partitionPages = paged("partitions", "partitions");
  const refused = table("Refused sources", ["Topic", "Why"]);
  const chart = lineChart("Consumer lag over the last 15 minutes");
  const chosen = h("select", { id: "lag-topic" }, h("option", { value: "" }, "all topics"));
  chosen.addEventListener("change", () => drawn && draw(drawn));
  let drawn = null;

  fill(ctx.main.appendChild(h("div")),
    h("h1", {}, "Overview"),
    problem,
    h("section", { "aria-labelledby": "state-title" },
      h("h2", { id: "state-title" }, "Lifecycle"),
      h("p", {}, "The pipeline is ", lifecycle, "."),
      h("div", { class: "actions" }, buttons), notice, error),
    h("section", { "aria-labelledby": "lag-title" },
      h("h2", { id: "lag-title" }, "Lag"),
      h("p", {}, h("label", { for: "lag-topic" }, "Chart "), " ", chosen),
      chart.el),
    h("section", {}, topicPages.el, scrolling(topics)),
    h("section", {}, instances.el),
    h("section", {}, refused.el),
    h("section", {}, partitionPages.el, scrolling(partitions)));

  // what the last refresh found, shown again at once when a filter or a page changes
  const shown = { partitions: [], figures: {} };
  function showPartitions() {
    const page = partitionPages.view(shown.partitions, (p) => `${p.topic} ${p.partition} ${p.instance}`);
    keyedRows(partitions.tbody, page, (p) => `${p.topic}/${p.partition}`,
      () => h("tr", {}, h("td", { class: "mono" }), h("td", { class: "num" }), h("td", { class: "mono" })),
      (row, p) => {
        row.children[0].textContent = p.topic;
        row.children[1].textContent = p.partition;
        row.children[2].textContent = p.instance;
      });
  }
  function showTopics() {
    const figures = shown.figures;
    const page = topicPages.view(Object.keys(figures).sort(), (t) => t);
    keyedRows(topics.tbody, page, (t) => t,
      () => h("tr", {}, h("td", { class: "mono" }), h("td", { class: "num" }), h("td", { class: "num" }), h("td", { class: "num" }), h("td", { class: "num" })),
      (row, t) => {
        const f = figures[t];
        row.children[0].textContent = t;
        row.children[1].textContent = rate(f.in_per_s);
        row.children[2].textContent = rate(f.out_per_s);
        row.children[3].textContent = number(f.lag);
        row.children[4].textContent = rate(f.dead_letters_per_s);
      });
  }
  partitionPages.onChange(showPartitions);
  topicPages.onChange(showTopics);

  function draw(history) {
    drawn = history;
    const topic = chosen.value;
    const points = history.samples.map((s) => {
      let lag = 0;
      for (const [name, figures] of Object.entries(s.topics)) {
        if (!topic || name === topic) lag += figures.lag || 0;
      }
      return [s.at_ms, lag];
    });
    chart.update(points, history.window_s * 1000,
      (last, top, n) => n ? `now ${number(last)}, at most ${number(top)} over ${n} samples` : "no samples yet");
  }

  // the samples so far: each refresh asks only for the newer ones
  const history = { samples: [], window_s: 900 };
  async function newSamples() {
    const last = history.samples.length ? history.samples[history.samples.length - 1].at_ms : 0;
    const found = await api.get(`${ctx.base}/history?since=${last}`);
    history.window_s = found.window_s;
    const horizon = Date.now() - found.window_s * 1000;
    history.samples = [...history.samples, ...found.samples].filter((s) => s.at_ms > horizon);
    return history;
  }

  const refresh = every(5000, async () => {
    try {
      const [status, found] = await Promise.all([
        api.get(`${ctx.base}/status`),
        api.get(`${ctx.base}/instances`),
        newSamples(),
      ]);
      fill(lifecycle, badge(status.lifecycle));
      keyedRows(instances.tbody, found.instances, (i) => i.instance,
        () => h("tr", {}, h("td", { class: "mono" }), h("td"), h("td"), h("td"), h("td", { class: "num" }), h("td"), h("td", { class: "error" })),
        (row, i) => {
          const c = row.children;
          c[0].textContent = i.instance;
          fill(c[1], badge(i.dataplane));
          fill(c[2], badge(i.lifecycle));
          c[3].textContent = i.snapshots;
          c[4].textContent = number(i.assigned_partitions.length);
          c[5].textContent = ago(i.reported_ms);
          c[6].textContent = i.error || "";
        });
      shown.partitions = found.partitions;
      showPartitions();
      const why = new Map();
      for (const i of [status, ...found.instances]) {
        for (const [topic, reason] of Object.entries(i.refused_topics || {})) why.set(topic, reason);
      }
      keyedRows(refused.tbody, [...why.entries()].sort(), ([t]) => t,
        () => h("tr", {}, h("td", { class: "mono" }), h("td", { class: "error" })),
        (row, [t, reason]) => {
          row.children[0].textContent = t;
          row.children[1].textContent = reason;
        });
      const latest = history.samples.length ? history.samples[history.samples.length - 1].topics : {};
      const names = Object.keys(latest).sort();
      shown.figures = latest;
      showTopics();
      const known = new Set([...chosen.options].map((o) => o.value));
      for (const t of names) if (!known.has(t)) chosen.append(h("option", { value: t }, t));
      draw(history);
      report(problem);
    } catch (exc) {
      report(problem, exc);
    }
  });
  return refresh;
}
