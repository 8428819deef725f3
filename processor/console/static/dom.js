// Small DOM helpers: every page builds its elements with h(), never with HTML strings,
// so nothing the API answers is ever parsed as markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

// Replace el's children with children.
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// Rows of tbody kept by key: a row is built once and updated in place, so a table of
// hundreds of rows refreshes without rebuilding, and focus stays where it was.
export function keyedRows(tbody, items, key, build, update) {
  const old = new Map();
  for (const row of tbody.children) old.set(row.dataset.key, row);
  let before = tbody.firstElementChild;
  for (const item of items) {
    const k = String(key(item));
    let row = old.get(k);
    if (row) old.delete(k);
    else {
      row = build(item);
      row.dataset.key = k;
    }
    update(row, item);
    if (row !== before) tbody.insertBefore(row, before);
    else before = before.nextElementSibling;
  }
  for (const row of old.values()) row.remove();
}

// Fill el with build()'s children only when what they show (shown) changed: a refresh of
// hundreds of rows then touches only the cells that change.
export function changed(el, shown, build) {
  const key = JSON.stringify(shown);
  if (el.dataset.shown === key) return;
  el.dataset.shown = key;
  fill(el, ...build());
}

// A table with a caption, column headings and a body to fill (id: the table's).
export function table(caption, headings, id = null) {
  const tbody = h("tbody");
  const el = h("table", { id },
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headings.map((t) =>
      h("th", { scope: "col", class: t.startsWith("#") ? "num" : null }, t.replace(/^#/, ""))))),
    tbody);
  return { el, tbody, caption };
}

// A scrolling box around a long table(): focusable, so the keyboard scrolls it too.
export function scrolling(shown) {
  return h("div", { class: "scroll", tabindex: 0, role: "region", "aria-label": shown.caption }, shown.el);
}

// A filter and pages for a long list (an estate's hundreds of tables): view(items, text)
// gives the items of the page shown, among those whose text(item) holds every word typed
// in the filter, and says which of how many; onChange(f): f runs when the filter or the
// page changes, to show the list again at once. Ids: `${id}-filter`, -prev, -next, -shown.
export function paged(id, what, size = 50) {
  let page = 0;
  let onChange = () => {};
  const filter = h("input", { type: "search", id: `${id}-filter`, "aria-label": `Filter ${what}`, placeholder: `Filter ${what}` });
  const go = (step) => () => { page += step; onChange(); };
  const button = (step, label) => h("button", {
    type: "button", class: "secondary", id: `${id}-${step < 0 ? "prev" : "next"}`,
    "aria-label": `${label} page of ${what}`, onclick: go(step),
  }, label);
  const prev = button(-1, "Previous");
  const next = button(1, "Next");
  const shown = h("span", { id: `${id}-shown`, role: "status", tabindex: -1 });
  filter.addEventListener("input", () => { page = 0; onChange(); });
  return {
    el: h("div", { class: "actions pager" }, filter, prev, next, shown),
    onChange(f) { onChange = f; },
    view(items, text) {
      const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      const found = words.length
        ? items.filter((item) => { const t = text(item).toLowerCase(); return words.every((w) => t.includes(w)); })
        : items;
      const pages = Math.max(1, Math.ceil(found.length / size));
      page = Math.min(Math.max(0, page), pages - 1);
      for (const [button, disabled] of [[prev, page === 0], [next, page === pages - 1]]) {
        // a button disabled under the keyboard's focus would drop it to the page's start
        if (disabled && document.activeElement === button) shown.focus();
        button.disabled = disabled;
      }
      const start = page * size;
      const all = found.length < items.length ? ` (${number(items.length)} in all)` : "";
      const said = found.length
        ? `${number(start + 1)}–${number(Math.min(start + size, found.length))} of ${number(found.length)}${all}`
        : `none of ${number(items.length)}`;
      if (shown.textContent !== said) shown.textContent = said; // a status said again is read again
      return found.slice(start, start + size);
    },
  };
}

// Ask before doing something that cannot be taken back; resolves true if confirmed.
export function confirmed(title, ...body) {
  const dialog = document.getElementById("confirm");
  fill(document.getElementById("confirm-title"), title);
  fill(document.getElementById("confirm-body"), ...body);
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
    document.getElementById("confirm-ok").focus();
  });
}

export function number(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

export function rate(n) {
  if (n === null || n === undefined) return "–";
  return n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1);
}

export function when(ms) {
  if (!ms) return "–";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

export function ago(ms) {
  if (!ms) return "–";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  return s < 120 ? `${s} s ago` : `${Math.round(s / 60)} min ago`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export function badge(text, kind = text) {
  return h("span", { class: `badge ${kind}` }, text);
}
