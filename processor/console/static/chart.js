// A line chart of one series in SVG: points [[at_ms, value]], the x axis the window.
import { number } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";
const W = 900, H = 220, LEFT = 70, RIGHT = 10, TOP = 10, BOTTOM = 24;

function el(tag, attrs, text) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

export function lineChart(label) {
  const svg = el("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label });
  const title = el("title", {}, label);
  svg.append(title);
  const line = el("polyline", { class: "line", points: "" });
  const yMax = el("text", { x: LEFT - 6, y: TOP + 10, "text-anchor": "end" }, "0");
  const yMin = el("text", { x: LEFT - 6, y: H - BOTTOM, "text-anchor": "end" }, "0");
  const xFrom = el("text", { x: LEFT, y: H - 6 }, "");
  const xTo = el("text", { x: W - RIGHT, y: H - 6, "text-anchor": "end" }, "now");
  svg.append(
    el("line", { class: "axis", x1: LEFT, y1: TOP, x2: LEFT, y2: H - BOTTOM }),
    el("line", { class: "axis", x1: LEFT, y1: H - BOTTOM, x2: W - RIGHT, y2: H - BOTTOM }),
    yMax, yMin, xFrom, xTo, line);

  return {
    el: svg,
    // points: [[at_ms, value]] oldest first; windowMs: the x axis' span, ending now.
    update(points, windowMs, describe) {
      const end = points.length ? points[points.length - 1][0] : Date.now();
      const start = end - windowMs;
      const top = Math.max(1, ...points.map((p) => p[1]));
      const x = (at) => LEFT + ((at - start) / windowMs) * (W - LEFT - RIGHT);
      const y = (v) => H - BOTTOM - (v / top) * (H - TOP - BOTTOM);
      line.setAttribute("points", points.map(([at, v]) => `${x(at).toFixed(1)},${y(v).toFixed(1)}`).join(" "));
      yMax.textContent = number(Math.round(top));
      xFrom.textContent = `-${Math.round(windowMs / 60000)} min`;
      const last = points.length ? points[points.length - 1][1] : null;
      const text = `${label}: ${describe(last, top, points.length)}`;
      title.textContent = text;
      svg.setAttribute("aria-label", text);
    },
  };
}
