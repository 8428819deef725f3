"""The operators' console with 500 tables and 96 partitions: first paint, time to data, and
whether its pages stay responsive while they refresh, measured by headless Chromium itself.

Starts the development stack (Tansu, a private PostgreSQL, Debezium) in a temporary
folder, creates ``--tables`` small tables ``public.iso_consolebench_tNNN`` (``--rows``
rows each, made in a schema Debezium does not capture and moved into ``public``), and
changes one row in the first ``--streamed`` of them, so that Debezium creates their change
topics (3 partitions each, ``kafka.topic_partitions``: 32 topics, 96 partitions). A
processor of pipeline ``consolebench`` (input: those topics only, an API token of its own)
holds the 96 partitions; ``--poison`` records that are no change event, produced to its
topics (keyed, put where the configured partitioner puts them), give the Dead letters page
rows; a status for each of the tables, published to the pipeline's sink-status topic as
the sink publishes it (a few stopped or retrying), gives the Sink page as many. Then, through
the API, the snapshots are paused and an incremental snapshot of every table is asked for:
the Snapshots page lists them all (queued behind the pause, so no backfill topic is created
and the processor keeps its 96 partitions during the measurement).

Each page (overview, snapshots, offsets, dead-letters, sink) is then loaded ``--repeats``
times, in turn, after one login: each load is a new document (from ``about:blank``, HTTP
cache emptied first, so the console's files are fetched again) and a script installed at
document start (DevTools' ``Page.addScriptToEvaluateOnNewDocument``, so nothing of the page
runs unobserved) records, in the page's own clock (milliseconds since the navigation began):

- ``first_paint_ms``, ``first_contentful_paint_ms`` (the browser's ``paint`` entries; the
  index's "Loading…" is the first content) and ``largest_contentful_paint_ms``;
- ``page_shown_ms``: the frame after the page's ``main h1`` is in the document;
- ``data_in_dom_ms`` and ``data_rendered_ms``: when the page holds what the API holds (a
  MutationObserver's check), and the frame after that (``requestAnimationFrame``, then a
  task): the overview's partitions table has a row per partition held and the lifecycle
  shown, the snapshots table a row per table, the offsets document is shown, the dead
  letters table a row per dead letter the page asks for (its default: the newest 100), the
  sink table a row per table; the tables that page (:data:`PAGED`) their first page's
  rows; ``rows``: that table's rows at the end;
- ``load_longest_task_ms``: the longest task until the data was rendered (``longtask``
  entries: tasks of 50 ms or more);
- then, staying ``--window-s`` seconds on the page (several refreshes: the snapshots page
  every 2 s, the overview, offsets and sink every 5 s, the dead letters every 10 s) and
  clicking its heading once a second: ``long_tasks``, ``longest_task_ms`` (0: none) and
  ``long_task_ms`` (their sum) during that time; ``busy_ms_per_s`` and
  ``layout_style_ms_per_s``: the page's main thread's time in tasks, and in layout and
  style, per second of it (DevTools' ``Performance.getMetrics``); ``refresh_every_ms``: the
  median time between two calls of the page's slowest API path (its refresh period plus
  the API's answer time: a page asks again only once it has its answer);
  ``longest_input_ms``: the longest of those clicks from the input to the next paint (Event
  Timing entries; 0: every one under 16 ms, the smallest the browser reports);
- ``js_heap_mb`` (``performance.memory``, precise with ``--enable-precise-memory-info``) and
  ``dom_nodes`` at the end; ``slowest_api_ms`` and ``slowest_api``: the longest API call
  (resource timing) until the data was rendered.

Every figure is given as the median, min and max of the loads. The API's own answer times
(5 calls each, with the bearer token, from Python) and sizes are in ``api``. Nothing is
asserted against a target: the figures are reported. Prints a table and writes
``bench/results/console.json``.

    python bench/console.py [--tables 500] [--streamed 32] [--repeats 3] [--window-s 15]
        [--rows 5] [--poison 150] [--no-write]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from results_file import write_results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from psycopg import sql  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

from spark_sink.status import StatusBoard  # noqa: E402
from tests.integration.browser import CHROMEDRIVER, CHROMIUM  # noqa: E402
from tests.integration.browser import FLAGS as BROWSER_FLAGS  # noqa: E402
from tidemark.cli.verify import source_lsn, wait_debezium  # noqa: E402
from tidemark.core.config import TOKEN_ENV, Config, dump_config  # noqa: E402
from tidemark.core.kafka import client_config, producer_config  # noqa: E402
from tidemark.core.partitioners import LIBRDKAFKA  # noqa: E402
from tidemark.core.ports import free_port  # noqa: E402
from tidemark.devstack.procs import pid_alive  # noqa: E402
from tidemark.devstack.stack import DevStack  # noqa: E402

PIPELINE = "consolebench"
TABLE = "iso_consolebench_t{:03d}"
#: The flags of the console's browser tests, and precise heap figures.
FLAGS = (*BROWSER_FLAGS, "--enable-precise-memory-info")

#: Pages whose table shows a page of this many rows at a time (the console's ``paged``).
PAGED = {"overview": 50, "snapshots": 50, "sink": 50}
#: Each page: the caption its data's table starts with (or None), and an element whose
#: text must be shown ("…" and "" are not shown).
PAGES: dict[str, tuple[str | None, str | None]] = {
    "overview": ("Partitions", "#lifecycle"),
    "snapshots": ("Tables", None),
    "offsets": (None, "#offsets-current"),
    "dead-letters": ("Dead letters", "#dead-letters-summary"),
    "sink": ("Iceberg tables", "#sink-summary"),
}

#: Installed at document start. READY: a function saying whether the page shows its data.
OBSERVER = """
(() => {
  if (!location.pathname.startsWith('/console')) return;
  const b = window.__bench = {longTasks: [], events: [], lcp: null, h1: null,
    h1Painted: null, dom: null, painted: null};
  const rows = (caption) => {
    for (const t of document.querySelectorAll('main table')) {
      if (t.caption && t.caption.textContent.startsWith(caption)) return t.tBodies[0].rows.length;
    }
    return 0;
  };
  const shown = (css) => {
    const el = document.querySelector(css);
    const text = el ? el.textContent.trim() : '';
    return text !== '' && text !== '\\u2026';
  };
  b.rows = rows;
  const ready = READY;
  const observe = (type, each, more) => {
    try {
      new PerformanceObserver((list) => list.getEntries().forEach(each))
        .observe({type, buffered: true, ...more});
    } catch (e) { b[type + 'Error'] = String(e); }
  };
  observe('longtask', (e) => b.longTasks.push([e.startTime, e.duration]));
  observe('largest-contentful-paint', (e) => { b.lcp = e.startTime; });
  observe('event', (e) => b.events.push([e.name, e.startTime, e.duration]),
    {durationThreshold: 16});
  const painted = (key) => requestAnimationFrame(() => setTimeout(() => {
    b[key] = performance.now();
  }, 0));
  const seen = new MutationObserver(() => {
    if (b.h1 === null && document.querySelector('main h1')) {
      b.h1 = performance.now();
      painted('h1Painted');
    }
    if (b.dom === null && ready()) {
      b.dom = performance.now();
      painted('painted');
      seen.disconnect();
    }
  });
  seen.observe(document, {childList: true, subtree: true, characterData: true});
})();
"""

#: What the page measured, once it stayed: read in one call.
COLLECT = """
const b = window.__bench;
const nav = performance.getEntriesByType('navigation')[0];
const paint = {};
for (const e of performance.getEntriesByType('paint')) paint[e.name] = e.startTime;
const api = performance.getEntriesByType('resource')
  .filter((e) => e.initiatorType === 'fetch')
  .map((e) => [new URL(e.name).pathname, e.startTime, e.duration, e.decodedBodySize]);
return {
  paint, api, lcp: b.lcp, h1: b.h1Painted, dom: b.dom, painted: b.painted,
  longTasks: b.longTasks, events: b.events, now: performance.now(),
  load: nav ? nav.loadEventEnd : null,
  heap: performance.memory ? performance.memory.usedJSHeapSize : null,
  rows: arguments[0] ? b.rows(arguments[0]) : null,
  errors: Object.keys(b).filter((k) => k.endsWith('Error')).map((k) => b[k]),
};
"""


def until(what: str, check: Callable[[], Any], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.3)


class Api:
    """The processor's API with the bearer token."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.origin = f"http://127.0.0.1:{port}"

    def call(self, method: str, path: str, body: Any = None) -> tuple[Any, int]:
        """The answer's JSON and its size in bytes."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/v1{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310 - http, above
            raw = resp.read()
        return json.loads(raw), len(raw)

    def get(self, path: str) -> Any:
        return self.call("GET", path)[0]

    def post(self, path: str, body: Any) -> Any:
        return self.call("POST", path, body)[0]


def create_tables(config: Config, names: list[str], rows: int, streamed: int) -> None:
    """``names`` in ``public`` with ``rows`` rows never streamed; a change in the first
    ``streamed`` of them, so Debezium creates their topics."""
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS stage")
        for name in names:
            staged = sql.Identifier("stage", name)
            conn.execute(
                sql.SQL("CREATE TABLE {} (id integer PRIMARY KEY, name text, v integer)").format(
                    staged
                )
            )
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} SELECT g, 'row ' || g, 0 FROM generate_series(1, %s) g"
                ).format(staged),
                (rows,),
            )
            conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA public").format(staged))
        for name in names[:streamed]:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (0, 'row 0', 0)").format(
                    sql.Identifier("public", name)
                )
            )
    wait_debezium(config, source_lsn(config))


def input_topics(config: Config) -> dict[str, int]:
    """The pipeline's input topics in the broker, and their partition counts."""
    pattern = re.compile(config.input_pattern())
    meta = AdminClient(client_config(config.kafka)).list_topics(timeout=10).topics
    return {t: len(m.partitions) for t, m in meta.items() if pattern.fullmatch(t)}


def produce_poison(config: Config, topics: list[str], count: int) -> None:
    """``count`` records that are no change event, keyed, where the partitioner puts them."""
    producer = Producer(
        producer_config(config.kafka, partitioner=LIBRDKAFKA[config.source.partitioner])
    )
    for n in range(count):
        value = json.dumps({"not": "an envelope", "console_bench": n, "pad": "x" * 200})
        producer.produce(topics[n % len(topics)], value.encode(), json.dumps({"id": n}).encode())
    if producer.flush(60):
        raise RuntimeError("the poison records were not all acknowledged")


def publish_sink_status(config: Config, names: list[str]) -> None:
    """A status for each table, as the sink publishes it: most running, a few stopped or
    waiting to retry."""
    board = StatusBoard(config)
    prefix, catalog = config.source.topic_prefix, config.sink.catalog_name
    now = int(time.time() * 1000)
    for n, name in enumerate(names):
        table = f"{catalog}.public.{name}"
        status = board.of(table, f"{prefix}.reconciled.public.{name}")
        status.update(
            committed={p: 100 + n + p for p in range(3)},
            lag={p: (n * 7 + p) % 5 for p in range(3)},
            last_commit_ms=now - n * 1000,
            last_commit_rows=n % 97,
        )
        if n % 50 == 7:
            status.update(stopped=True, reason=f"schema change refused: column v{n} type changed")
        elif n % 50 == 13:
            status.update(retrying="the catalog did not answer; trying again in 30 s")
        board.publish(table)
    board.flush(60)


def api_times(api: Api, paths: list[str], calls: int = 5) -> dict[str, dict[str, float]]:
    """Each path's median answer time and its size."""
    found = {}
    for path in paths:
        times, size = [], 0
        for _ in range(calls):
            started = time.perf_counter()
            _, size = api.call("GET", path)
            times.append((time.perf_counter() - started) * 1000)
        found[path] = {"median_ms": round(statistics.median(times), 1), "bytes": size}
    return found


def chromium(root: Path) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={root / 'profile'}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def log_in(driver: webdriver.Chrome, origin: str, token: str) -> None:
    driver.get(f"{origin}/console/")
    until("the login form", lambda: driver.find_elements(By.CSS_SELECTOR, "#token"), 60)
    driver.find_element(By.CSS_SELECTOR, "#token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login-submit").click()

    def lifecycle() -> str:
        found = driver.find_elements(By.CSS_SELECTOR, "#lifecycle")
        return found[0].text if found else ""

    until("RUNNING on the overview", lambda: lifecycle() == "RUNNING", 60)


def ready_check(page: str, expected: int) -> str:
    """The page's READY function for :data:`OBSERVER`."""
    caption, text = PAGES[page]
    parts = []
    if caption is not None:
        rows = min(expected, PAGED[page]) if page in PAGED else expected
        parts.append(f"rows({json.dumps(caption)}) >= {rows}")
    if text is not None:
        parts.append(f"shown({json.dumps(text)})")
    return "() => " + " && ".join(parts)


def metrics(driver: webdriver.Chrome) -> dict[str, float]:
    found = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return {m["name"]: float(m["value"]) for m in found}


def load_page(
    driver: webdriver.Chrome, origin: str, page: str, expected: int, window_s: float
) -> dict[str, Any]:
    """One cold load of ``page`` and ``window_s`` seconds on it: the figures of the run."""
    driver.get("about:blank")
    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    source = OBSERVER.replace("READY", ready_check(page, expected))
    script = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": source})
    try:
        driver.get(f"{origin}/console/#/{page}")
        driver.set_script_timeout(90)
        driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "const check = () => window.__bench && window.__bench.painted !== null"
            " ? done(true) : setTimeout(check, 50);"
            "check();"
        )
    finally:
        driver.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]}
        )
    driver.execute_cdp_cmd("Performance.enable", {})
    heading = driver.find_element(By.CSS_SELECTOR, "main h1")
    before = metrics(driver)
    start = float(driver.execute_script("return performance.now()"))
    began = time.monotonic()
    for second in range(int(window_s)):
        time.sleep(max(0.0, began + second + 0.5 - time.monotonic()))
        ActionChains(driver).move_to_element(heading).click().perform()
    time.sleep(max(0.0, began + window_s - time.monotonic()))
    after = metrics(driver)
    seen = driver.execute_script(COLLECT, PAGES[page][0])
    seconds = seen["now"] - start

    def per_second(*names: str) -> float:
        spent = sum(after.get(n, 0.0) - before.get(n, 0.0) for n in names)
        return round(spent * 1000 / (seconds / 1000), 1)

    loading = [d for s, d in seen["longTasks"] if s < seen["painted"]]
    staying = [d for s, d in seen["longTasks"] if s >= start]
    inputs = [d for _name, s, d in seen["events"] if s >= start]
    calls = [c for c in seen["api"] if c[1] < seen["painted"]]
    slowest = max(calls, key=lambda c: c[2], default=None)
    starts = [c[1] for c in seen["api"] if slowest is not None and c[0] == slowest[0]]
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:], strict=False)]
    if seen["errors"]:
        print(f"  {page}: observers not available: {seen['errors']}", flush=True)
    return {
        "first_paint_ms": seen["paint"].get("first-paint"),
        "first_contentful_paint_ms": seen["paint"].get("first-contentful-paint"),
        "largest_contentful_paint_ms": seen["lcp"],
        "load_event_ms": seen["load"],
        "page_shown_ms": seen["h1"],
        "data_in_dom_ms": seen["dom"],
        "data_rendered_ms": seen["painted"],
        "load_longest_task_ms": max(loading, default=0),
        "long_tasks": len(staying),
        "longest_task_ms": max(staying, default=0),
        "long_task_ms": sum(staying),
        "busy_ms_per_s": per_second("TaskDuration"),
        "layout_style_ms_per_s": per_second("LayoutDuration", "RecalcStyleDuration"),
        "longest_input_ms": max(inputs, default=0),
        "js_heap_mb": None if seen["heap"] is None else seen["heap"] / 2**20,
        "dom_nodes": after.get("Nodes"),
        "slowest_api_ms": None if slowest is None else slowest[2],
        "slowest_api": None if slowest is None else slowest[0],
        "refresh_every_ms": statistics.median(gaps) if gaps else None,
        "rows": seen["rows"],
        "window_s": seconds / 1000,
    }


def summarize(page: str, expected: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of each figure over the runs."""
    result: dict[str, Any] = {"page": page, "loads": len(runs), "expected_rows": expected}
    for key in runs[0]:
        values = [r[key] for r in runs if r[key] is not None]
        if key == "slowest_api":
            result[key] = sorted({str(v) for v in values})
        elif not values:
            result[key] = None
        else:
            result[key] = {
                "median": round(statistics.median(values), 1),
                "min": round(min(values), 1),
                "max": round(max(values), 1),
            }
    return result


PROCESSOR = f"{PIPELINE}-processor"


def start_processor(stack: DevStack, config: Config, token: str) -> Api:
    """``tidemark process`` of ``config``, started through the stack (its pid recorded), once
    healthy; its API."""
    path = stack.run_dir / f"{PROCESSOR}.yaml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(dump_config(config))
    command = [sys.executable, "-m", "tidemark.cli", "process", "--config", str(path)]
    pid = stack.start_process(PROCESSOR, command, {TOKEN_ENV: token})
    port = config.processor.web_port

    def healthy() -> bool:
        if not pid_alive(pid):
            log = (stack.run_dir / f"{PROCESSOR}.log").read_text()[-3000:]
            raise RuntimeError(f"the processor ended:\n{log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("status") == "ok")
        except OSError:
            return False

    until("the processor", healthy)
    return Api(port, token)


def prepare(stack: DevStack, args: argparse.Namespace, token: str) -> Api:
    """The tables, the processor, its dead letters, the sink's statuses and the snapshot."""
    prefix = stack.config.source.topic_prefix
    config = dataclasses.replace(
        stack.config,
        processor=dataclasses.replace(
            stack.config.processor,
            pipeline=PIPELINE,
            input_pattern=rf"^{re.escape(prefix)}\.public\.iso_{PIPELINE}_[a-z0-9_]+$",
            state_dir=str(stack.run_dir / f"{PIPELINE}-state"),
            web_port=free_port(),
        ),
    )
    names = [TABLE.format(n) for n in range(args.tables)]
    started = time.perf_counter()
    create_tables(config, names, args.rows, args.streamed)
    topics = until(
        "the change topics",
        lambda: (found := input_topics(config)) and len(found) >= args.streamed and found,
    )
    print(
        f"{args.tables} tables, {len(topics)} change topics of "
        f"{sum(topics.values())} partitions in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    produce_poison(config, sorted(topics), args.poison)
    publish_sink_status(config, names)
    api = start_processor(stack, config, token)
    base = f"/pipelines/{PIPELINE}"
    until(
        "every partition held",
        lambda: len(api.get(f"{base}/instances")["partitions"]) >= sum(topics.values()),
    )
    until(
        "the dead letters",
        lambda: (
            len(api.get(f"{base}/dead-letters?limit=100")["dead_letters"]) >= min(args.poison, 100)
        ),
    )
    api.post("/snapshots/pause", {"type": "incremental"})
    api.post("/snapshots", {"data-collections": [f"public.{n}" for n in names]})
    until(
        "the queued snapshot",
        lambda: (s := api.get("/snapshots"))["paused"] and len(s["tables"]) >= args.tables,
    )
    return api


def expected_rows(api: Api) -> dict[str, int]:
    """What each page should show: the rows the API holds."""
    base = f"/pipelines/{PIPELINE}"
    return {
        "overview": len(api.get(f"{base}/instances")["partitions"]),
        "snapshots": len(api.get("/snapshots")["tables"]),
        "offsets": 1,
        "dead-letters": len(api.get(f"{base}/dead-letters?limit=100")["dead_letters"]),
        "sink": len(api.get(f"{base}/sink")["tables"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=500)
    parser.add_argument(
        "--streamed", type=int, default=32, help="tables with a change topic (3 partitions each)"
    )
    parser.add_argument("--rows", type=int, default=5, help="rows per table")
    parser.add_argument("--poison", type=int, default=150, help="dead letters")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=15.0)
    parser.add_argument("--no-write", action="store_true", help="print the figures only")
    args = parser.parse_args()

    began = time.perf_counter()
    load_before = os.getloadavg()
    token = secrets.token_urlsafe(32)
    run_dir = Path(tempfile.mkdtemp(prefix="tidemark-bench-console-"))
    results: list[dict[str, Any]] = []
    fields: dict[str, Any] = {}
    try:
        stack = DevStack(run_dir, Config())
        stack.up()
        try:
            api = prepare(stack, args, token)
            try:
                base = f"/pipelines/{PIPELINE}"
                expected = expected_rows(api)
                status = api.get(f"{base}/status")
                fields["partitions"] = expected["overview"]
                fields["assigned_partitions"] = len(status["assigned_partitions"])
                fields["snapshot_tables"] = expected["snapshots"]
                fields["dead_letters_shown"] = expected["dead-letters"]
                fields["sink_tables"] = expected["sink"]
                setup_s = time.perf_counter() - began
                print(f"ready in {setup_s:.0f} s: {expected}", flush=True)
                measured = time.perf_counter()
                runs: dict[str, list[dict[str, Any]]] = {page: [] for page in PAGES}
                driver = chromium(run_dir / "chromium")
                try:
                    fields["chromium"] = driver.capabilities.get("browserVersion")
                    origin = api.origin
                    log_in(driver, origin, token)
                    for repeat in range(args.repeats):
                        for page in PAGES:
                            run = load_page(driver, origin, page, expected[page], args.window_s)
                            runs[page].append(run)
                            print(
                                f"  {repeat + 1}/{args.repeats} {page:<13} FCP "
                                f"{run['first_contentful_paint_ms']:.0f} ms, data "
                                f"{run['data_rendered_ms']:.0f} ms, longest task "
                                f"{run['longest_task_ms']:.0f} ms",
                                flush=True,
                            )
                finally:
                    driver.quit()
                results = [summarize(page, expected[page], runs[page]) for page in PAGES]
                fields["api"] = api_times(
                    api,
                    [
                        f"{base}/status",
                        f"{base}/instances",
                        f"{base}/history",
                        "/snapshots",
                        "/notifications?limit=200",
                        f"{base}/offsets",
                        f"{base}/dead-letters?limit=100",
                        f"{base}/sink",
                        "/openapi.json",
                    ],
                )
                fields["setup_s"] = round(setup_s)
                fields["measure_s"] = round(time.perf_counter() - measured)
            finally:
                stack.stop_process(PROCESSOR)
        finally:
            stack.down()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    fields["load_average"] = {
        "before": [round(x, 2) for x in load_before],
        "after": [round(x, 2) for x in os.getloadavg()],
    }
    print(
        f"{'page':<14}{'rows':>6}{'FCP ms':>8}{'shown ms':>10}{'data ms':>9}{'load task':>11}"
        f"{'long tasks':>12}{'longest':>9}{'busy ms/s':>11}{'input ms':>10}{'heap MB':>9}"
    )
    for r in results:

        def med(key: str, r: dict[str, Any] = r) -> str:
            return "-" if r[key] is None else f"{r[key]['median']:.0f}"

        print(
            f"{r['page']:<14}{med('rows'):>6}{med('first_contentful_paint_ms'):>8}"
            f"{med('page_shown_ms'):>10}{med('data_rendered_ms'):>9}"
            f"{med('load_longest_task_ms'):>11}{med('long_tasks'):>12}"
            f"{med('longest_task_ms'):>9}{med('busy_ms_per_s'):>11}"
            f"{med('longest_input_ms'):>10}{med('js_heap_mb'):>9}"
        )
    print(f"(medians of {args.repeats} loads; {time.perf_counter() - began:.0f} s in all)")
    if not args.no_write:
        write_results(
            "console",
            results,
            tables=args.tables,
            window_s=args.window_s,
            repeats=args.repeats,
            **fields,
        )


if __name__ == "__main__":
    main()
