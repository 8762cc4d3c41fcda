"""The web page in a real browser: Debian's Chromium, driven by Playwright, against a real
uvicorn on a loopback port. Log in, search, move the as-of date, open a record, follow a
supersession link, upload a file; no console errors; keyboard reachable; 390 and 1440 px.

Chromium comes from the system packages (``apt-get install chromium``); Playwright never
downloads a browser. ``MEMPP_SHOTS=/some/folder`` saves a screenshot of each page.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api")

from web_support import running_server  # noqa: E402

CHROMIUM = os.environ.get("MEMPP_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WIDTHS = (390, 1440)

# CI installs Chromium (.ci/run), so there a missing browser fails instead of skipping.
pytestmark = pytest.mark.skipif(
    not os.environ.get("CI") and shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists(),
    reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)",
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    with running_server(tmp_path_factory.mktemp("browser")) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


class Watched:
    """A page whose console errors and failed requests are collected."""

    def __init__(self, browser, served, width: int) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.page = self.context.new_page()
        self.width = width
        self.served = served
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def go(self, path: str) -> None:
        response = self.page.goto(self.served.url + path)
        assert response is not None and response.ok, path

    def shot(self, name: str) -> None:
        folder = os.environ.get("MEMPP_SHOTS")
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=f"{folder}/{name}-{self.width}.png", full_page=True)

    def fits_width(self) -> None:
        overflow = self.page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"the page is {overflow}px wider than a {self.width}px window"

    def reaches_every_control(self) -> None:
        """Tab from the top reaches every visible link, button and field, in turn."""
        controls = self.page.evaluate(
            """() => Array.from(document.querySelectorAll(
                   'a[href], button, input:not([type=hidden]), select, textarea'))
                 .filter(e => e.checkVisibility({visibilityProperty: true}))
                 .map((e, i) => (e.dataset.tabProbe = String(i)))"""
        )
        self.page.evaluate("document.activeElement && document.activeElement.blur()")
        self.page.evaluate("window.scrollTo(0, 0)")
        reached: set[str] = set()
        for _ in range(3 * len(controls) + 10):  # a date field takes a stop per part
            self.page.keyboard.press("Tab")
            probe = self.page.evaluate("document.activeElement.dataset.tabProbe ?? null")
            if probe is not None:
                reached.add(probe)
        missing = self.page.evaluate(
            "(gone) => gone.map(i => document.querySelector(`[data-tab-probe='${i}']`).outerHTML"
            ".slice(0, 80))",
            sorted(set(controls) - reached),
        )
        assert not missing, f"not reachable with Tab: {missing}"

    def login(self, name: str) -> None:
        self.go("/search")  # sent to the login form
        assert "/login" in self.page.url
        self.shot("login")
        self.page.fill("#key", self.served.tokens[name])
        self.page.press("#key", "Enter")
        self.page.wait_for_url("**/search")

    def close(self) -> None:
        self.context.close()


@pytest.fixture(params=WIDTHS, ids=lambda w: f"{w}px")
def watched(request, browser, served):
    page = Watched(browser, served, request.param)
    yield page
    page.close()
    assert page.errors == [], page.errors


@pytest.fixture
def upload_page(request, browser, tmp_path):
    """A page on a server of its own, so the upload changes no other test's store."""
    (tmp_path / "server").mkdir()
    with running_server(tmp_path / "server") as server:
        page = Watched(browser, server, request.param)
        yield page
        page.close()
        assert page.errors == [], page.errors


def dates_shown(page) -> list[str]:
    return page.eval_on_selector_all("#hits .hit", "els => els.map(e => e.dataset.date)")


def test_search_then_move_the_as_of_date(watched: Watched) -> None:
    page = watched.page
    watched.login("read")
    page.fill("#q", "Team plan pricing")
    page.press("#q", "Enter")
    page.wait_for_selector("#hits .hit")
    reversal = watched.served.ids["reversal"]
    assert page.locator(f'#hits a.hit-link[href="/records/{reversal}"]').count() == 1
    assert max(dates_shown(page)) == "2024-09-30"
    watched.fits_width()
    watched.reaches_every_control()
    watched.shot("search")
    # Drag the slider's thumb from the last day to 55% of the way: the form searches again.
    page.locator("#as_of_slider").scroll_into_view_if_needed()
    box = page.locator("#as_of_slider").bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] - 4, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.55, y, steps=8)
    with page.expect_navigation():
        page.mouse.up()
    as_of = page.input_value("#as_of")
    assert "2024-05-01" < as_of < "2024-07-31", as_of
    assert f"as_of={as_of}" in page.url
    shown = dates_shown(page)
    assert shown and max(d for d in shown if d) <= as_of
    assert page.locator(f'#hits a[href="/records/{reversal}"]').count() == 0
    watched.shot("search-as-of")


def test_open_a_record_and_follow_supersession(watched: Watched) -> None:
    page = watched.page
    ids = watched.served.ids
    watched.login("read")
    page.fill("#q", "Team plan pricing")
    page.press("#q", "Enter")
    page.click(f'#hits a.hit-link[href="/records/{ids["raise"]}"]')
    page.wait_for_url(f"**/records/{ids['raise']}")
    assert page.locator("h1").inner_text().startswith(f"Record {ids['raise']}")
    watched.fits_width()
    watched.reaches_every_control()
    watched.shot("record")
    page.click("#superseded-by")
    page.wait_for_url(f"**/records/{ids['reversal']}")
    assert "It replaced" in page.content()
    page.click(f'.chain a[href="/records/{ids["raise"]}"]')  # and back down the chain
    page.wait_for_url(f"**/records/{ids['raise']}")


def test_open_a_timeline_and_move_its_as_of_line(watched: Watched) -> None:
    page = watched.page
    ids = watched.served.ids
    watched.login("read")
    watched.go(f"/records/{ids['raise']}")
    page.click("#timeline-link")
    page.wait_for_url(f"**/timeline?record={ids['raise']}")
    chart = page.locator("svg.timeline")
    drawn = chart.locator(".version").evaluate_all(
        "els => els.map(e => [Number(e.dataset.id), e.dataset.date])"
    )
    assert {i for i, _ in drawn} >= {ids["kickoff"], ids["raise"], ids["reversal"]}
    assert chart.locator(".arrow").count() == 2  # each superseded by the next
    assert chart.locator(".as-of-line").get_attribute("visibility") == "hidden"
    watched.fits_width()
    watched.reaches_every_control()
    watched.shot("timeline")
    slider = page.locator("#tl-as-of")
    slider.focus()
    page.keyboard.press("Home")  # the first day drawn: every version lies after it
    assert chart.locator(".as-of-line").get_attribute("visibility") is None
    assert chart.locator(".version.after").count() == len(drawn)
    for _ in range(60):  # two months on: the kickoff (2024-01-15) is in force, the raise not
        page.keyboard.press("ArrowRight")
    day = page.inner_text("#tl-as-of-day")
    assert "2024-01-15" <= day < "2024-03-08", day
    after = chart.locator(".version.after").evaluate_all("els => els.map(e => e.dataset.id)")
    assert sorted(map(int, after)) == sorted(i for i, d in drawn if d > day)
    assert ids["raise"] in map(int, after) and ids["kickoff"] not in map(int, after)
    assert f"as_of={day}" in page.get_attribute("#tl-search", "href")
    watched.shot("timeline-moved")
    page.click(f'svg.timeline a[data-id="{ids["reversal"]}"]')  # a point opens its record
    page.wait_for_url(f"**/records/{ids['reversal']}")


def test_changes_page(watched: Watched) -> None:
    page = watched.page
    watched.login("read")
    page.click("nav >> text=Changes")
    page.wait_for_url("**/changes")
    page.fill("#since", "2024-09-01")
    page.click("form.query button[type=submit]")
    page.wait_for_selector("#summary")
    assert "1 entered, 1 superseded" in page.inner_text("#summary")
    watched.fits_width()
    watched.reaches_every_control()
    watched.shot("changes")


def test_evidence_page(watched: Watched) -> None:
    page = watched.page
    watched.login("read")
    watched.go("/evidence?q=Team+plan&budget=800")
    assert "of 800 characters" in page.inner_text("#summary")
    assert page.locator("#evidence .entry").count() >= 1
    watched.fits_width()
    watched.reaches_every_control()
    watched.shot("evidence")


@pytest.mark.parametrize("upload_page", WIDTHS, ids=lambda w: f"{w}px", indirect=True)
def test_upload_a_file(upload_page: Watched, tmp_path: Path) -> None:
    watched = upload_page
    page = watched.page
    watched.login("uploads")
    watched.go("/upload")
    watched.reaches_every_control()
    note = tmp_path / f"browser-note-{watched.width}.md"
    note.write_text(
        f"---\nauthor: Browser\ndate: 2024-11-0{1 + WIDTHS.index(watched.width)}\n---\n"
        f"Uploaded from a {watched.width}px browser.\n"
    )
    page.set_input_files("#files", str(note))
    assert note.name in page.inner_text("#upload-status")
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("#report .summary")
    assert "added 1" in page.inner_text("#report .summary")
    assert page.inner_text("#upload-status") == "Done."
    watched.fits_width()
    watched.shot("upload")
    page.click("#report a")  # the new record's id links to its page
    page.wait_for_selector("h1")
    assert f"Uploaded from a {watched.width}px browser." in page.inner_text(".record-text")


def test_error_page_has_a_way_back(watched: Watched) -> None:
    page = watched.page
    watched.login("read")
    response = page.goto(watched.served.url + "/records/424242")
    assert response is not None and response.status == 404
    # The browser reports the 404 document itself as a console error: that one is expected.
    watched.errors[:] = [e for e in watched.errors if "404" not in e]
    assert "No such record" in page.inner_text("h1")
    watched.fits_width()
    watched.shot("error")
    page.click("text=Go back")
    page.wait_for_load_state()


def test_keyboard_reaches_every_control(watched: Watched) -> None:
    page = watched.page
    watched.login("read")
    watched.go("/search?q=Team+plan")  # with a query the box is not autofocused
    reached: list[str] = []
    for _ in range(40):
        page.keyboard.press("Tab")
        reached.append(
            page.evaluate(
                "(() => { const e = document.activeElement;"
                " return e.id || e.getAttribute('href') || e.textContent.trim(); })()"
            )
        )
    for wanted in ("#main", "/search", "/evidence", "q", "as_of", "as_of_slider", "k"):
        assert wanted in reached, (wanted, reached)
    assert any(r.startswith("/records/") for r in reached)
    # The skip link takes a keyboard user past the header.
    watched.go("/search?q=Team+plan")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    # Arrow keys move the as-of slider a day at a time and the date field follows.
    page.locator("#as_of_slider").focus()
    page.keyboard.press("ArrowLeft")
    assert page.input_value("#as_of") == "2024-09-29"
