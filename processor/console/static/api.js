// The API, called with the session's cookie; writes carry the session's CSRF token.

let csrf = "";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// body: a value sent as JSON, or a string sent as it is. raw: answer {data, text}.
async function call(method, path, body, raw = false) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const answer = await fetch(path, {
    method,
    headers,
    body: body === undefined || typeof body === "string" ? body : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
  });
  const text = await answer.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!answer.ok) {
    const message = data && typeof data.error === "string" ? data.error : `${answer.status} ${answer.statusText}`;
    if (answer.status === 401) window.dispatchEvent(new CustomEvent("tidemark:logged-out"));
    throw new ApiError(answer.status, message);
  }
  return raw ? { data, text } : data;
}

export const api = {
  get: (path) => call("GET", `/api/v1${path}`),
  post: (path, body = {}) => call("POST", `/api/v1${path}`, body),
  // the answer's text too: JSON.parse rounds integers beyond 2^53
  getText: (path) => call("GET", `/api/v1${path}`, undefined, true),
  postText: (path, body) => call("POST", `/api/v1${path}`, body, true),
  putText: (path, text) => call("PUT", `/api/v1${path}`, text, true),
};

// The session: who is logged in ({role, csrf, pipeline}), or null.
export async function session() {
  const answer = await fetch("/console/session", { credentials: "same-origin", cache: "no-store" });
  if (!answer.ok) return null;
  const found = await answer.json();
  csrf = found.csrf;
  return found;
}

export async function login(token) {
  const answer = await fetch("/console/session", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token }),
    credentials: "same-origin",
  });
  const found = await answer.json().catch(() => ({}));
  if (!answer.ok) throw new ApiError(answer.status, found.error || `${answer.status}`);
  csrf = found.csrf;
  return found;
}

export async function logout() {
  await fetch("/console/session", {
    method: "DELETE",
    headers: { "X-CSRF-Token": csrf },
    credentials: "same-origin",
  });
  csrf = "";
}
