// Offsets: the document per partition, edited with a check against its schema as it is
// typed and a diff before it is applied, undone from the last write's "previous", and
// reset to the beginning, the end or a time. The API refuses writes unless the pipeline
// is STOPPED; its message is shown as it is.
import { api } from "./api.js";
import { badge, confirmed, fill, h } from "./dom.js";
import { exactInBrowser, lineDiff, pretty } from "./json_text.js";
import { every, report } from "./refresh.js";
import { schemaError } from "./schema.js";

let openapi = null; // the API's document: the offsets schema and what it refers to

const CONTEXT = 4; // unchanged lines shown around each change

function diffView(lines) {
  const near = lines.map(() => false);
  lines.forEach(([kind], i) => {
    if (kind === "same") return;
    for (let j = Math.max(0, i - CONTEXT); j <= Math.min(lines.length - 1, i + CONTEXT); j++) near[j] = true;
  });
  const shown = [];
  for (let i = 0; i < lines.length; i++) {
    if (near[i]) {
      const [kind, line] = lines[i];
      shown.push(h("span", { class: kind }, (kind === "add" ? "+ " : kind === "del" ? "- " : "  ") + line));
      continue;
    }
    let j = i;
    while (j < lines.length && !near[j]) j++;
    shown.push(h("span", { class: "skipped" }, `  … ${j - i} unchanged lines`));
    i = j - 1;
  }
  return h("pre", { class: "diff", id: "offsets-diff", tabindex: 0, role: "region", "aria-label": "Changes" }, shown);
}

export function offsetsPage(ctx) {
  const problem = h("p", { class: "error", role: "alert" });
  const result = h("p", { id: "offsets-result", role: "status" });
  const lifecycle = h("span", { id: "offsets-lifecycle" }, "…");
  const current = h("pre", { id: "offsets-current", class: "diff", tabindex: 0, role: "region", "aria-label": "The current document" });
  const editor = h("textarea", { id: "offsets-editor", rows: 16, spellcheck: "false", "aria-describedby": "offsets-check" });
  const check = h("p", { id: "offsets-check", "aria-live": "polite" });
  const review = h("div", { id: "offsets-review" });
  const undo = h("button", { type: "button", id: "offsets-undo", class: "secondary", disabled: true }, "Undo the last write");
  let currentText = null; // the document as the API last answered it
  let previousText = null; // the last write's "previous", to undo it

  function readPage() {
    return api.getText(`${ctx.base}/offsets`);
  }

  async function load(intoEditor) {
    const { text } = await readPage();
    currentText = pretty(text);
    fill(current, currentText);
    if (intoEditor) {
      editor.value = currentText;
      validate();
    }
  }

  function validate() {
    let doc;
    try {
      doc = JSON.parse(editor.value);
    } catch (exc) {
      fill(check, h("span", { class: "error" }, `Not JSON: ${exc.message}`));
      return null;
    }
    const schemas = openapi.components.schemas;
    const wrong = schemaError(openapi, schemas.Offsets, doc);
    if (wrong) {
      fill(check, h("span", { class: "error" }, `Not a valid offsets document: ${wrong}`));
      return null;
    }
    if (!exactInBrowser(editor.value)) {
      fill(check, h("span", { class: "error" }, "Valid, but it holds integers beyond 2^53: the text is sent as typed"));
      return doc;
    }
    fill(check, h("span", { class: "notice" }, "Valid against the offsets schema."));
    return doc;
  }
  let typing = null;
  editor.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(validate, 150);
  });

  async function written(answer, what) {
    // the write's "previous" undoes it, if the browser held its integers exactly
    const previous = answer.data.previous;
    previousText = exactInBrowser(answer.text) ? JSON.stringify(previous) : null;
    undo.disabled = !ctx.canWrite || previousText === null;
    fill(result, h("span", { class: "notice" }, `${what}: done.`),
      previousText === null ? " It cannot be undone here: its integers are beyond what a browser holds exactly." : "");
    await load(true);
    fill(review);
  }

  async function apply(text, what) {
    try {
      await written(await api.putText(`${ctx.base}/offsets`, text), what);
    } catch (exc) {
      fill(result, h("span", { class: "error", id: "offsets-refused" }, `${what} refused: ${exc.message}`));
    }
  }

  const showDiff = h("button", { type: "button", id: "offsets-review-button", disabled: !ctx.canWrite }, "Review changes");
  showDiff.addEventListener("click", () => {
    fill(result);
    if (validate() === null) return;
    const edited = pretty(editor.value);
    const lines = lineDiff(currentText, edited);
    const changed = lines.filter(([kind]) => kind !== "same").length;
    if (!changed) {
      fill(review, h("p", {}, "No changes against the current document."));
      return;
    }
    const applyButton = h("button", { type: "button", id: "offsets-apply", class: "danger", disabled: !ctx.canWrite }, `Apply ${changed} changed lines`);
    applyButton.addEventListener("click", async () => {
      if (await confirmed("Write these offsets?", h("p", {}, "Every partition's position is replaced by the document's."))) {
        await apply(editor.value, "Write");
      }
    });
    fill(review, h("h3", {}, "Changes against the current document"), diffView(lines), h("div", { class: "actions" }, applyButton));
  });

  undo.addEventListener("click", async () => {
    if (previousText === null) return;
    const lines = lineDiff(currentText, pretty(previousText));
    if (await confirmed("Undo the last write?", h("p", {}, "This writes the document as it was before it:"), diffView(lines))) {
      await apply(previousText, "Undo");
    }
  });

  // resets
  const target = h("select", { id: "reset-to" },
    h("option", { value: "beginning" }, "the beginning"),
    h("option", { value: "end" }, "the end"),
    h("option", { value: "timestamp" }, "a time"));
  const at = h("input", { id: "reset-at", type: "datetime-local", step: 1 });
  const topics = h("input", { id: "reset-topics", size: 50, "aria-describedby": "reset-topics-hint" });
  const state = h("input", { id: "reset-state", type: "checkbox" });
  const resetButton = h("button", { type: "submit", id: "reset-submit", class: "danger", disabled: !ctx.canWrite }, "Reset offsets");
  const resetForm = h("form", { class: "grid", "aria-labelledby": "reset-title" },
    h("label", { for: "reset-to" }, "Reset to"), h("div", {}, target),
    h("label", { for: "reset-at" }, "Time (local)"), h("div", {}, at),
    h("label", { for: "reset-topics" }, "Topics"),
    h("div", {}, topics, h("div", { id: "reset-topics-hint", class: "hint" }, "optional, separated by commas: none means every input topic")),
    h("label", { for: "reset-state" }, "Reset state too"), h("div", {}, state),
    h("span"), h("div", {}, resetButton));
  resetForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { to: target.value, reset_state: state.checked };
    if (target.value === "timestamp") {
      const ms = Date.parse(at.value);
      if (Number.isNaN(ms)) {
        fill(result, h("span", { class: "error" }, "Give the time to reset to."));
        return;
      }
      body.timestamp = ms;
    }
    const names = topics.value.split(",").map((t) => t.trim()).filter(Boolean);
    if (names.length) body.topics = names;
    if (!(await confirmed(`Reset offsets to ${target.selectedOptions[0].textContent}?`, h("p", {}, "The data plane will read from there when the pipeline resumes.")))) return;
    try {
      await written(await api.postText(`${ctx.base}/offsets/reset`, JSON.stringify(body)), "Reset");
    } catch (exc) {
      fill(result, h("span", { class: "error", id: "offsets-refused" }, `Reset refused: ${exc.message}`));
    }
  });

  const reload = h("button", { type: "button", class: "secondary", id: "offsets-reload" }, "Load the current document into the editor");
  reload.addEventListener("click", () => load(true).catch((exc) => report(problem, exc)));

  fill(ctx.main.appendChild(h("div")),
    h("h1", {}, "Offsets"),
    problem,
    h("p", {}, "The pipeline is ", lifecycle, ". Offsets can be written only while it is STOPPED (stop it on the Overview)."),
    result,
    h("div", { class: "actions" }, undo),
    h("section", { "aria-labelledby": "edit-title" },
      h("h2", { id: "edit-title" }, "Edit"),
      h("label", { for: "offsets-editor" }, "Offsets document (JSON)"),
      editor, check,
      h("div", { class: "actions" }, reload, showDiff),
      review),
    h("section", { "aria-labelledby": "reset-title" }, h("h2", { id: "reset-title" }, "Reset"), resetForm),
    h("section", { "aria-labelledby": "current-title" }, h("h2", { id: "current-title" }, "Current document"), current));

  (async () => {
    try {
      openapi = openapi || (await api.get("/openapi.json"));
      await load(true);
    } catch (exc) {
      report(problem, exc);
    }
  })();

  return every(5000, async () => {
    try {
      const status = await api.get(`${ctx.base}/status`);
      fill(lifecycle, badge(status.lifecycle));
      if (openapi) await load(false);
      report(problem);
    } catch (exc) {
      report(problem, exc);
    }
  });
}
