"""The operators' console in a real browser (headless Chromium), against a real processor.

One processor and one browser serve every test of this module, in order: they log in,
start and follow a snapshot, are refused an offsets edit while the pipeline runs, stop
it, edit, undo, reset and resume, find a poison message, read the sink's statuses, use
the keyboard, log in as the viewer, and hold the editor's schema check to the API's.
Each test of a page saves screenshots (:data:`tests.integration.browser.ARTIFACTS`) and
runs axe-core on the pages it shows.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

from processor.pipeline.offsets_schema import OFFSETS_SCHEMA
from spark_sink.status import StatusBoard
from tests.integration.browser import Browser, chromium
from tests.integration.processes import Processor
from tests.integration.test_api import TOKEN, VIEWER, answered
from tests.integration.test_snapshots import snapshot_config, uncaptured_table
from tidemark.core.config import TOKEN_ENV, VIEWER_TOKEN_ENV, Config
from tidemark.core.kafka import producer_config
from tidemark.devstack.stack import DevStack

TABLE = "public.iso_console_a"
ROWS = 6000


@dataclass
class Console:
    config: Config
    processor: Processor
    browser: Browser
    origin: str

    @property
    def url(self) -> str:
        return f"{self.origin}/console/"

    def page(self, name: str) -> None:
        self.browser.open(f"{self.url}#/{name}")
        self.browser.until(f"the {name} page", lambda: self.browser.find("main h1").text)

    def accessible(self) -> None:
        violations = self.browser.accessibility_violations()
        assert violations == [], json.dumps(violations, indent=1)
        assert self.browser.policy_violations() == []


@pytest.fixture(scope="module")
def console(stack: DevStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    chunks = {"chunk_size": 300, "min_chunk_size": 300, "max_chunk_size": 300}
    config = snapshot_config(stack, "console", max_rows_per_second=400, **chunks)
    uncaptured_table(config, "iso_console_a", ROWS)
    processor = Processor(stack, config, "console-processor").start(
        env={TOKEN_ENV: TOKEN, VIEWER_TOKEN_ENV: VIEWER}
    )
    try:
        with chromium(tmp_path_factory.mktemp("chromium"), "console") as browser:
            yield Console(
                config, processor, browser, f"http://127.0.0.1:{config.processor.web_port}"
            )
    finally:
        processor.stop()


def log_in(console: Console, token: str) -> None:
    b = console.browser
    b.open(console.url)
    b.until("the login page", lambda: b.find("#token").is_displayed())
    b.find("#token").send_keys(token)
    b.click("#login-submit")


def test_login_refuses_a_wrong_token_and_holds_the_right_one_in_an_http_only_cookie(
    console: Console,
) -> None:
    b = console.browser
    log_in(console, "wrong-" + TOKEN)
    b.until("the refusal", lambda: "wrong token" in b.text("#login-error"))
    b.shot("login-refused")
    assert b.driver.get_cookies() == []
    console.accessible()

    log_in(console, TOKEN)
    b.until("the overview", lambda: b.text("#lifecycle") == "RUNNING")
    [cookie] = b.driver.get_cookies()
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    # never where a script, a URL or a log could read it
    assert b.driver.execute_script("return document.cookie") == ""
    assert b.driver.execute_script("return localStorage.length + sessionStorage.length") == 0
    assert TOKEN not in b.driver.current_url and TOKEN not in cookie["value"]
    b.until(
        "the instance",
        lambda: b.all("table caption")[1].text == "Instances" and b.all("main tbody tr"),
    )
    b.until("its partition", lambda: "iso_console_a" in b.find("main").text)
    b.shot("overview")
    console.accessible()

    # Writes need the session's CSRF token, from this origin.
    pause = "/api/v1/pipelines/console/pause"
    assert b.fetch("POST", pause) == 403
    assert b.fetch("POST", pause, {"X-CSRF-Token": "forged"}) == 403
    session = {"Cookie": f"tidemark_session={cookie['value']}"}
    status, headers, me = answered(
        "GET", f"{console.origin}/console/session", token=None, headers=session
    )
    assert status == 200 and me["role"] == "operator"
    assert headers["Cache-Control"] == "no-store"  # it holds the CSRF token
    csrf = {**session, "X-CSRF-Token": me["csrf"]}
    evil = {**csrf, "Origin": "http://evil.example"}
    assert answered("POST", console.origin + pause, {}, token=None, headers=evil)[0] == 403
    # the page's own files: open, with a policy that allows no inline script
    status, headers, _ = answered("GET", console.url, token=None)
    policy = headers["Content-Security-Policy"]
    assert status == 200 and "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert headers["X-Frame-Options"] == "DENY"


def test_a_snapshot_started_from_the_form_pauses_resumes_and_reaches_100_percent(
    console: Console,
) -> None:
    b = console.browser
    console.page("snapshots")
    b.find("#snapshot-tables").send_keys("not a table!")
    b.click("#snapshot-start")
    b.until("the API's refusal", lambda: "/data-collections" in b.text("#snapshot-error"))
    b.find("#snapshot-tables").clear()
    b.find("#snapshot-tables").send_keys(TABLE)
    b.click("#snapshot-start")
    request = b.until(
        "the request", lambda: b.text("#snapshot-notice").removeprefix("Snapshot requested: ")
    )
    assert request and "refused" not in request

    def bar() -> float:
        value = b.find(f"tr[data-key='{request}/{TABLE}'] progress").get_attribute("value")
        return float(value or 0)

    b.until("rows read", lambda: 0 < bar() < 60)
    b.click("#snapshots-pause")
    b.until("the pause", lambda: b.text("#snapshots-paused") == "paused")
    b.until("the PAUSED notification", lambda: "PAUSED" in b.find("#notes-title + p + div").text)
    held = bar()
    time.sleep(2)
    assert bar() == held < 100
    b.shot("snapshot-paused")
    b.click("#snapshots-resume")
    b.until("100 %", lambda: bar() == 100, timeout=120)
    # read whole, it is delivering until the data plane has read its rows
    b.until("completed", lambda: "completed" in b.find(f"tr[data-key='{request}/{TABLE}']").text)
    row = b.find(f"tr[data-key='{request}/{TABLE}']").text
    assert f"{ROWS + 1:,}" in row
    b.until(
        "the COMPLETED notification", lambda: "COMPLETED" in b.find("#notes-title + p + div").text
    )
    b.shot("snapshots")
    console.accessible()


def busiest(document: str) -> int:
    """The index of the input partition with the most records read."""
    parts = json.loads(document)["partitions"]
    inputs = [i for i, p in enumerate(parts) if p["kind"] == "input"]
    return max(inputs, key=lambda i: parts[i]["offset"] or 0)


def edited(document: str, index: int, offset: int) -> str:
    """The offsets document with partition ``index``'s offset set to ``offset``."""
    found = json.loads(document)
    found["partitions"][index]["offset"] = offset
    return json.dumps(found, indent=2)


def offset_of(document: str, index: int) -> int:
    return int(json.loads(document)["partitions"][index]["offset"])


def _line(shown: str) -> str:
    """A diff's line without its indentation."""
    return " ".join(shown.split())


def test_an_offsets_edit_is_checked_as_typed_and_refused_while_running(console: Console) -> None:
    b = console.browser
    console.page("offsets")
    document = b.until("the document", lambda: b.find("#offsets-editor").get_attribute("value"))
    assert "Valid against the offsets schema" in b.text("#offsets-check")
    index = busiest(document)
    b.set_value("#offsets-editor", edited(document, index, -1))
    b.until(
        "the schema's complaint",
        lambda: (
            f"/partitions/{index}/offset: -1 is less than the minimum of 0"
            in b.text("#offsets-check")
        ),
    )
    b.set_value("#offsets-editor", document.replace("{", "{,", 1))
    b.until("the parser's complaint", lambda: "Not JSON" in b.text("#offsets-check"))
    b.set_value("#offsets-editor", edited(document, index, 0))
    b.click("#offsets-review-button")
    b.until("the diff", lambda: b.all("#offsets-diff .add"))
    assert [_line(e.text) for e in b.all("#offsets-diff .add")] == ['+ "offset": 0,']
    b.click("#offsets-apply")
    b.confirm()
    b.until("the refusal", lambda: "stop it first" in b.text("#offsets-refused"))
    assert "has running or paused instances" in b.text("#offsets-refused")
    b.shot("offsets-refused")
    console.accessible()


def test_stop_edit_undo_and_resume_from_the_console(console: Console) -> None:
    b = console.browser
    console.page("overview")
    b.click("#pipeline-stop")
    b.shot("overview-stop-confirmation")
    b.confirm()
    b.until("STOPPED", lambda: b.text("#lifecycle") == "STOPPED", timeout=90)

    console.page("offsets")
    b.until("no members", lambda: '"members": false' in b.text("#offsets-current"), timeout=90)
    b.click("#offsets-reload")
    document = b.until(
        "the stopped document",
        lambda: (v := b.find("#offsets-editor").get_attribute("value")) and '"STOPPED"' in v and v,
    )
    index = busiest(document)
    before = offset_of(document, index)
    assert before > 0
    b.set_value("#offsets-editor", edited(document, index, 0))
    b.click("#offsets-review-button")
    b.until("the diff", lambda: b.all("#offsets-diff .del"))
    assert [_line(e.text) for e in b.all("#offsets-diff .del")] == [f'- "offset": {before},']
    b.driver.execute_script("document.getElementById('offsets-review').scrollIntoView()")
    b.shot("offsets-diff")
    b.click("#offsets-apply")
    b.confirm()
    b.until("the write", lambda: "Write: done" in b.text("#offsets-result"))
    b.until("offset 0", lambda: offset_of(b.text("#offsets-current"), index) == 0)
    b.shot("offsets-written")
    b.click("#offsets-undo")
    b.confirm()
    b.until("the undo", lambda: "Undo: done" in b.text("#offsets-result"))
    b.until("the offset back", lambda: offset_of(b.text("#offsets-current"), index) == before)
    # a reset to the beginning, with the same rules, undone the same way
    b.find("#reset-to").send_keys("the beginning")
    b.click("#reset-submit")
    b.confirm()
    b.until("the reset", lambda: "Reset: done" in b.text("#offsets-result"))
    b.until("offset 0 again", lambda: offset_of(b.text("#offsets-current"), index) == 0)
    b.click("#offsets-undo")
    b.confirm()
    b.until("the reset undone", lambda: offset_of(b.text("#offsets-current"), index) == before)
    console.accessible()

    console.page("overview")
    b.click("#pipeline-resume")
    b.confirm()
    b.until("RUNNING", lambda: b.text("#lifecycle") == "RUNNING", timeout=90)


def test_a_poison_message_is_found_and_downloaded_on_the_dead_letters_page(
    console: Console,
) -> None:
    b = console.browser
    poison = b'{"not": "an envelope", "console": 1}'
    producer = Producer(producer_config(console.config.kafka))
    producer.produce("tidemark.public.iso_console_a", poison, b'{"id": 1}', 0)
    assert producer.flush(30) == 0
    console.page("dead-letters")
    b.find("#dl-table").send_keys(TABLE)
    b.click("#dl-filter")
    row = b.until(
        "the dead letter", lambda: [r for r in b.all("main tbody tr") if '"console": 1' in r.text]
    )[0]
    assert "tidemark.public.iso_console_a [0]" in row.text
    b.shot("dead-letters")
    row.find_element("css selector", "input[type=checkbox]").click()
    b.click("#dl-download")
    saved = b.downloads / "console-dead-letters.json"
    b.until("the download", saved.exists)
    [letter] = json.loads(saved.read_text())
    assert base64.b64decode(letter["value_base64"]) == poison
    assert letter["source"]["topic"] == "tidemark.public.iso_console_a"
    console.accessible()


def test_the_sink_page_shows_what_the_sink_published(console: Console) -> None:
    b = console.browser
    console.page("sink")
    b.until("the summary", lambda: "No sink has published" in b.text("#sink-summary"))
    board = StatusBoard(console.config)  # the sink's own publisher
    running = board.of("lake.public.orders", "tidemark.reconciled.public.orders")
    running.update(committed={0: 120, 1: 80}, lag={0: 5, 1: 0}, last_commit_rows=200)
    running["last_commit_ms"] = int(time.time() * 1000)
    stopped = board.of("lake.public.items", "tidemark.reconciled.public.items")
    stopped.update(stopped=True, reason="column qty changed from text to integer")
    board.publish("lake.public.orders")
    board.publish("lake.public.items")
    board.flush()
    b.until("the tables", lambda: "2 tables, 1 stopped" in b.text("#sink-summary"), timeout=30)
    rows = {r.find_element("css selector", "td").text: r.text for r in b.all("main tbody tr")}
    assert "0: 120, 1: 80" in rows["lake.public.orders"] and "running" in rows["lake.public.orders"]
    assert "column qty changed from text to integer" in rows["lake.public.items"]
    b.shot("sink")
    console.accessible()


def test_long_lists_show_a_page_at_a_time_and_filter(console: Console) -> None:
    """An estate's lists (tables, topics, partitions) come a page of 50 rows at a time,
    with a filter by words of any column."""
    b = console.browser
    board = StatusBoard(console.config)
    for i in range(60):
        board.of(f"lake.public.estate_{i:02d}", f"tidemark.reconciled.public.estate_{i:02d}")
        board.publish(f"lake.public.estate_{i:02d}")
    board.flush()
    console.page("sink")
    b.until("every table", lambda: b.all("main tbody tr") and "tables" in b.text("#sink-summary"))
    # the tables earlier tests published are there too: these 60 are told by a word of theirs
    b.find("#sink-tables-filter").send_keys("estate_")
    b.until("the first page", lambda: b.text("#sink-tables-shown").startswith("1–50 of 60 ("))
    assert len(b.all("main tbody tr")) == 50
    assert not b.find("#sink-tables-prev").is_enabled()
    b.click("#sink-tables-next")
    b.until("the second page", lambda: b.text("#sink-tables-shown").startswith("51–60 of 60 ("))
    assert len(b.all("main tbody tr")) == 10
    assert not b.find("#sink-tables-next").is_enabled()
    b.find("#sink-tables-filter").send_keys("07")
    b.until("the filtered rows", lambda: b.text("#sink-tables-shown").startswith("1–1 of 1 ("))
    assert [r.find_element("css selector", "td").text for r in b.all("main tbody tr")] == [
        "lake.public.estate_07"
    ]
    b.shot("sink-filtered")
    console.accessible()
    # the overview's topics and partitions, and the snapshots' tables, filter the same way
    console.page("overview")
    b.until("the partitions", lambda: b.all("#partitions tbody tr"))
    b.find("#partitions-filter").send_keys("no such topic")
    b.until("no partition", lambda: b.text("#partitions-shown").startswith("none of "))
    assert b.all("#partitions tbody tr") == []
    b.find("#topics-filter").send_keys("no such topic")
    b.until("no topic", lambda: b.text("#topics-shown").startswith("none"))
    console.page("snapshots")
    b.find("#snapshot-progress-filter").send_keys("no such table")
    b.until("no table", lambda: b.text("#snapshot-progress-shown").startswith("none of "))
    assert b.all("#snapshot-progress tbody tr") == []
    console.accessible()


def test_the_audit_page_shows_who_did_what(console: Console) -> None:
    """The earlier tests' actions (a login, a backfill started, offsets written) are on the
    Audit page, newest first, each with its session and its result."""
    b = console.browser
    console.page("audit")
    b.until("the actions", lambda: "actions, newest first" in b.text("#audit-summary"), timeout=30)
    rows = [r.text for r in b.all("main tbody tr")]
    started = [r for r in rows if "POST /api/v1/snapshots" in r]
    assert started and all("console" in r and "session:" in r for r in started), rows
    assert any("POST /console/session" in r and "token:" in r for r in rows), rows
    assert any("409" in r for r in rows), rows  # the offsets write refused while running
    b.shot("audit")
    console.accessible()


def test_the_console_works_from_the_keyboard(console: Console) -> None:
    b = console.browser
    console.page("overview")
    b.find("#lifecycle")
    # from the top of a page just loaded, Tab reaches the skip link, then the pages' links
    b.driver.refresh()
    b.until("the page again", lambda: b.text("#lifecycle"))
    seen = []
    for _ in range(12):
        ActionChains(b.driver).send_keys(Keys.TAB).perform()
        focused = b.driver.switch_to.active_element
        seen.append(focused.text)
        if focused.text == "Snapshots":
            break
    assert seen[0] == "Skip to the page" and seen[-1] == "Snapshots", seen
    ActionChains(b.driver).send_keys(Keys.ENTER).perform()
    b.until("the Snapshots page", lambda: b.text("main h1") == "Snapshots")
    # a confirmation closes with Escape, and nothing is done
    b.find("#snapshots-stop").send_keys(Keys.ENTER)
    b.until("the dialog", lambda: b.find("#confirm").get_attribute("open") is not None)
    b.shot("keyboard-confirmation")
    ActionChains(b.driver).send_keys(Keys.ESCAPE).perform()
    b.until("the dialog closed", lambda: b.find("#confirm").get_attribute("open") is None)
    assert "signal sent" not in b.text("#snapshot-notice")


def test_the_viewer_sees_every_page_and_can_change_nothing(console: Console) -> None:
    b = console.browser
    b.click("#logout")
    b.until("the login page", lambda: b.find("#token").is_displayed())
    assert b.driver.get_cookies() == []
    log_in(console, VIEWER)
    b.until("the overview", lambda: b.text("#lifecycle") == "RUNNING")
    assert "read-only" in b.text("#who")
    for page, buttons in (
        ("overview", ["#pipeline-stop", "#pipeline-pause", "#pipeline-resume"]),
        ("snapshots", ["#snapshot-start", "#snapshots-pause", "#snapshots-stop"]),
        ("offsets", ["#offsets-review-button", "#reset-submit", "#offsets-undo"]),
        ("audit", []),
        ("dead-letters", ["#dl-download"]),
    ):
        console.page(page)
        for css in buttons:
            assert not b.find(css).is_enabled(), css
        b.shot(f"viewer-{page}")
        console.accessible()
    # who did what, but not from where (an address is personal data)
    console.page("audit")
    b.until("the actions", lambda: b.all("main tbody tr"))
    addresses = [r.find_elements("css selector", "td")[4].text for r in b.all("main tbody tr")]
    assert addresses and set(addresses) == {"–"}, addresses
    # the API refuses the viewer's writes, with the session's own CSRF token
    csrf = b.driver.execute_async_script(
        "const done = arguments[0];"
        "fetch('/console/session').then(r => r.json()).then(s => done(s.csrf));"
    )
    headers = {"X-CSRF-Token": csrf, "Content-Type": "application/json"}
    assert b.fetch("POST", "/api/v1/pipelines/console/stop", headers) == 403
    assert b.fetch("GET", "/api/v1/pipelines/console/status") == 200


#: Offsets documents, valid and not, for the browser's validator.
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**40) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_the_pages_validator_agrees_with_the_apis(console: Console, data: st.DataObject) -> None:
    """The editor's check (schema.js) accepts exactly what the API's (jsonschema) accepts,
    on documents made by changing one field of a real one."""
    from jsonschema import Draft202012Validator

    document = {
        "version": 1,
        "partitions": [
            {
                "topic": "t",
                "partition": 0,
                "offset": 5,
                "source_position": {
                    "at_offset": 4,
                    "postgresql": {"lsn": 7, "txId": 3, "snapshot": False},
                },
            },
            {"topic": "u", "partition": 1, "offset": None},
        ],
    }
    path = data.draw(
        st.sampled_from(
            [
                ("version",),
                ("partitions",),
                ("partitions", 0, "offset"),
                ("partitions", 0, "topic"),
                ("partitions", 0, "source_position"),
                ("partitions", 0, "source_position", "postgresql"),
                ("partitions", 0, "source_position", "postgresql", "lsn"),
                ("partitions", 1, "partition"),
                ("partitions", 1, "kind"),
                ("extra",),
            ]
        )
    )
    target: Any = document
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = data.draw(_VALUES)
    expected = Draft202012Validator(OFFSETS_SCHEMA).is_valid(document)
    b = console.browser
    found = b.driver.execute_async_script(
        "const [doc, done] = arguments;"
        "Promise.all([import('/console/static/schema.js'), fetch('/api/v1/openapi.json')"
        ".then(r => r.json())]).then(([m, api]) =>"
        " done(m.schemaError(api, api.components.schemas.Offsets, doc)));",
        document,
    )
    assert (found is None) == expected, (found, document)
