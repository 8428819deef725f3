// A page's periodic refresh: one call at a time, stopped when the page goes.

export function every(ms, work) {
  let timer = null;
  let stopped = false;
  let running = false;
  let again = false; // now() was called during a call: one more, right after it
  async function tick() {
    running = true;
    try {
      await work();
    } finally {
      running = false;
      if (!stopped) {
        timer = setTimeout(tick, again ? 0 : ms);
        again = false;
      }
    }
  }
  tick();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
    now() {
      if (running) {
        again = true;
        return;
      }
      clearTimeout(timer);
      tick();
    },
  };
}

// Show what failed in el, or clear it.
export function report(el, exc) {
  el.textContent = exc ? `Could not read: ${exc.message}` : "";
}
