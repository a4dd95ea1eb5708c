"""First dashboard load in a real browser: bytes transferred and time until every chart is drawn.

Collects static files (hashed, gzip copies), serves the app with gunicorn on 127.0.0.1:PORT
(DEBUG off: whitenoise serves the collected files compressed), logs in once, then opens
/dashboard/ in a fresh browser context (empty cache) with the session cookie. Transfer is the
sum of every response's encoded size (what crossed the wire, headers included) reported by
Chromium's DevTools protocol; "first view" is from navigation start until every chart in the
1280x900 viewport is drawn, "ready" until every [data-chart] is drawn (those below the fold are
drawn when the browser is idle; empty panels have no chart). Prints figures, asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_h14a \\
        .venv/bin/python bench/first_load.py --runs 5

Targets (issue 14): transfer < 1.5 MB, ready < 1 s on loopback.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
USERNAME, PASSWORD = "bench-first-load", "pw-traceviz-bench-1"
READY = """() => [...document.querySelectorAll('[data-chart]')].every(
    element => element.dataset.ready === 'true')"""
# The first view: every chart that intersects the viewport is drawn (charts.js draws those
# first and the ones below the fold when the browser is idle).
VIEW_READY = """() => [...document.querySelectorAll('[data-chart]')].every(element => {
    const box = element.getBoundingClientRect();
    return box.bottom <= 0 || box.top >= window.innerHeight || element.dataset.ready === 'true';
})"""


def serve(port: int) -> subprocess.Popen:
    env = {**os.environ, "DEBUG": "0"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "traceviz.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit("the server did not start")


def measure(browser, base: str, cookies: list[dict]) -> tuple[int, float, int, float, float]:
    """(bytes transferred, ms until ready, requests, ms the server took for the HTML, ms until
    the first view is drawn) for one cold-cache dashboard load."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies(cookies)
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
    sizes: dict[str, int] = {}
    cdp.on(
        "Network.loadingFinished",
        lambda event: sizes.__setitem__(event["requestId"], event["encodedDataLength"]),
    )
    started = time.perf_counter()
    page.goto(f"{base}/dashboard/")
    page.wait_for_function(VIEW_READY, timeout=30_000, polling=10)
    view_ms = (time.perf_counter() - started) * 1000
    page.wait_for_function(READY, timeout=30_000, polling=10)
    ready_ms = (time.perf_counter() - started) * 1000
    server_ms = page.evaluate(
        "() => { const n = performance.getEntriesByType('navigation')[0];"
        " return n.responseStart - n.requestStart; }"
    )
    page.wait_for_load_state("networkidle")
    context.close()
    return sum(sizes.values()), ready_ms, len(sizes), server_ms, view_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8214)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)
    user, _ = User.objects.get_or_create(username=USERNAME)
    user.set_password(PASSWORD)
    user.save()
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    from playwright.sync_api import sync_playwright

    server = serve(args.port)
    base = f"http://127.0.0.1:{args.port}"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True
            )
            login = browser.new_context()
            page = login.new_page()
            page.goto(f"{base}/accounts/login/?next=/")
            page.fill("#id_username", USERNAME)
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_load_state("networkidle")
            cookies = login.cookies()
            login.close()
            results = [measure(browser, base, cookies) for _ in range(args.runs)]
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    transferred = statistics.median(r[0] for r in results)
    ready = sorted(r[1] for r in results)
    print(f"first dashboard load, {args.runs} cold-cache runs ({results[0][2]} requests):")
    print(f"  transferred: {transferred / 1e6:.2f} MB (median)")
    view = sorted(r[4] for r in results)
    print(f"  first view drawn: median {statistics.median(view):.0f} ms, worst {view[-1]:.0f} ms")
    print(
        f"  ready (every chart drawn): median {statistics.median(ready):.0f} ms, "
        f"worst {ready[-1]:.0f} ms"
    )
    server = statistics.median(r[3] for r in results)
    print(f"  of which the server's HTML (request to first byte): median {server:.0f} ms")


if __name__ == "__main__":
    main()
