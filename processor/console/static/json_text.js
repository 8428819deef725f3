// JSON as text: pretty-printed without parsing numbers (a browser's numbers hold
// integers exactly only up to 2^53, offsets and positions may be larger), a check that
// every integer of a text survives JSON.parse, and a line diff.

const TOKEN = /\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null|[{}[\],:])/y;

// text re-indented by two spaces, each token kept as written (text must be valid JSON).
export function pretty(text) {
  TOKEN.lastIndex = 0;
  const tokens = [];
  let match;
  while ((match = TOKEN.exec(text)) !== null) tokens.push(match[1]);
  let out = "";
  let depth = 0;
  const pad = () => "\n" + "  ".repeat(depth);
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    const next = tokens[i + 1];
    if (t === "{" || t === "[") {
      const close = t === "{" ? "}" : "]";
      if (next === close) {
        out += t + close;
        i++;
      } else {
        depth++;
        out += t + pad();
      }
    } else if (t === "}" || t === "]") {
      depth--;
      out += pad() + t;
    } else if (t === ",") out += "," + pad();
    else if (t === ":") out += ": ";
    else out += t;
  }
  return out;
}

// Whether every integer in text is one JSON.parse keeps exactly.
export function exactInBrowser(text) {
  TOKEN.lastIndex = 0;
  let match;
  while ((match = TOKEN.exec(text)) !== null) {
    const t = match[1];
    if (/^-?\d{16,}$/.test(t)) {
      const n = BigInt(t);
      if (n > BigInt(Number.MAX_SAFE_INTEGER) || n < -BigInt(Number.MAX_SAFE_INTEGER)) return false;
    }
  }
  return true;
}

// The lines of a and b as [kind, line], kind "same", "del" (only in a) or "add" (only in b).
export function lineDiff(a, b) {
  const x = a.split("\n");
  const y = b.split("\n");
  let start = 0;
  while (start < x.length && start < y.length && x[start] === y[start]) start++;
  let endX = x.length, endY = y.length;
  while (endX > start && endY > start && x[endX - 1] === y[endY - 1]) {
    endX--;
    endY--;
  }
  const mx = x.slice(start, endX), my = y.slice(start, endY);
  const middle = [];
  if (mx.length * my.length > 4_000_000) {
    for (const line of mx) middle.push(["del", line]);
    for (const line of my) middle.push(["add", line]);
  } else {
    // the longest common subsequence of the lines that differ
    const n = mx.length, m = my.length;
    const table = new Uint32Array((n + 1) * (m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        table[i * (m + 1) + j] = mx[i] === my[j]
          ? table[(i + 1) * (m + 1) + j + 1] + 1
          : Math.max(table[(i + 1) * (m + 1) + j], table[i * (m + 1) + j + 1]);
      }
    }
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (mx[i] === my[j]) {
        middle.push(["same", mx[i++]]);
        j++;
      } else if (table[(i + 1) * (m + 1) + j] >= table[i * (m + 1) + j + 1]) middle.push(["del", mx[i++]]);
      else middle.push(["add", my[j++]]);
    }
    while (i < n) middle.push(["del", mx[i++]]);
    while (j < m) middle.push(["add", my[j++]]);
  }
  return [
    ...x.slice(0, start).map((line) => ["same", line]),
    ...middle,
    ...x.slice(endX).map((line) => ["same", line]),
  ];
}
