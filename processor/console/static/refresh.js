// A page's periodic refresh: one call at a time, stopped when the page goes.

export function every(ms, work) {
  let timer = null;
  let stopped = false;
  async function tick() {
    try {
      await work();
    } finally {
      if (!stopped) timer = setTimeout(tick, ms);
    }
  }
  tick();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
    now() {
      clearTimeout(timer);
      tick();
    },
  };
}

// Show what failed in el, or clear it.
export function report(el, exc) {
  el.textContent = exc ? `Could not read: ${exc.message}` : "";
}
