"""Browser tests: headless Chromium through Playwright's sync API against pytest-django's
live_server. Outside CI they skip when /usr/bin/chromium is missing; with CI=true they fail."""

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

# Playwright's sync API runs its own event loop in this thread; Django's ORM calls made from the
# test body are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
AXE_SCRIPT = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
PASSWORD = "pw-traceviz-1"


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser" in str(item.path):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {CHROMIUM} is missing")
        pytest.skip(f"{CHROMIUM} not found: browser tests need Chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield browser
        browser.close()


class PageWatch:
    """What a page did that a test must never see: console errors, uncaught exceptions,
    dialogs (a fired alert() means injected script ran), requests to any other host."""

    def __init__(self, page, allowed_netloc: str):
        self.console_errors: list[str] = []
        self.dialogs: list[str] = []
        self.foreign_requests: list[str] = []
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.console_errors.append(f"pageerror: {error}"))
        page.on("dialog", self._on_dialog)
        page.on("request", lambda request: self._on_request(request.url, allowed_netloc))

    def _on_console(self, message):
        if message.type == "error":
            self.console_errors.append(message.text)

    def _on_dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _on_request(self, url: str, allowed_netloc: str):
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about"):
            return
        if parts.netloc != allowed_netloc:
            self.foreign_requests.append(url)


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.watch = PageWatch(page, urlsplit(live_server.url).netloc)
    yield page
    watch = page.watch
    context.close()
    assert watch.console_errors == [], watch.console_errors
    assert watch.dialogs == [], watch.dialogs
    assert watch.foreign_requests == [], watch.foreign_requests


def log_in(page, live_server, username: str, next_path: str = "/"):
    page.goto(f"{live_server.url}{next_path}")
    assert "/accounts/login/" in page.url
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")


def axe_violations(page, context_selector: str | None = None) -> list[dict]:
    """Serious and critical axe-core violations on the page (or inside one element)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        # Evaluated through the DevTools protocol: a <script> tag would be (rightly) refused by
        # the page's CSP and reported as a console error.
        page.evaluate(AXE_SCRIPT.read_text(encoding="utf-8") + "\n;undefined")
    results = page.evaluate(
        "async (selector) => await axe.run(selector ? document.querySelector(selector) : document)",
        context_selector,
    )
    return [
        {
            "id": v["id"],
            "impact": v["impact"],
            "help": v["help"],
            "nodes": [n["target"] for n in v["nodes"]][:5],
        }
        for v in results["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
