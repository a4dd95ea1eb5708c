"""The dashboard in a real browser: plotly draws every chart from the page's JSON (no inline
script, CSP on), and clicking a bar opens the jobs list filtered to exactly the jobs it counts."""

import json
import os
from urllib.parse import parse_qs, urlsplit

import pytest

from tests import factories
from tests.browser.conftest import log_in, screenshot
from tests.factories import recent_event as item

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
pytestmark = pytest.mark.django_db(transaction=True)

ANTHROPIC = {"provider": "anthropic", "model": "claude-x"}


def act_failed(job_id: str, ago: float, duration_ms: int) -> dict:
    """The ``act`` step failing for good on a tool the planner named but nobody has."""
    return item(
        "node_finished",
        job_id,
        ago,
        node_id="act",
        attempt=1,
        result_type="permanent_failure",
        failure_code="tool_not_found",
        error_type="logic",
        duration_ms=duration_ms,
    )


@pytest.fixture
def dashboard_data(transactional_db):
    """In the last 24 hours: 8 jobs, 3 of them with a failed step, 2 degraded planners."""
    items = []
    for i in range(8):
        job_id, ago = f"dash-{i}", 600 - i * 70
        items.append(item("job_started", job_id, ago, workflow="pdca", **ANTHROPIC))
        items.append(item("node_started", job_id, ago - 0.5, node_id="plan", attempt=1))
        items.append(
            item(
                "node_finished",
                job_id,
                ago - 1,
                node_id="plan",
                attempt=1,
                result_type="success",
                duration_ms=120 + 40 * i,
            )
        )
        if i % 3 == 0:
            items.append(act_failed(job_id, ago - 2, duration_ms=900))
        elif i % 3 == 1:
            items.append(
                item(
                    "node_finished",
                    job_id,
                    ago - 2,
                    node_id="act",
                    attempt=1,
                    result_type="retryable_failure",
                    failure_code="adapter_timeout",
                    error_type="network",
                    duration_ms=3000,
                )
            )
        if i in (2, 5):
            items.append(
                item("graph.next_step.parse_invalid", job_id, ago - 3, attempt=1, **ANTHROPIC)
            )
            items.append(item("graph.next_step.degraded", job_id, ago - 4, attempts=2, **ANTHROPIC))
    factories.store(items)
    factories.user("olga", "operator")


def test_dashboard_draws_charts_and_a_bar_click_opens_the_filtered_jobs_list(
    page, live_server, dashboard_data
):
    log_in(page, live_server, "olga", "/dashboard/")
    assert urlsplit(page.url).path == "/dashboard/"
    page.wait_for_selector('[data-chart="step-results"][data-ready="true"] svg.main-svg')
    for chart_id in ("failures-by-code", "failures-by-error-type", "planner-rate", "durations"):
        page.wait_for_selector(f'[data-chart="{chart_id}"][data-ready="true"] svg.main-svg')
    # No screenshot before the click: a full-page one resizes the window, and plotly redraws
    # every chart a moment later, which can swallow a click that lands mid-redraw.

    figure = json.loads(page.locator("#step-results").text_content())
    failed_index = [t["name"] for t in figure["data"]].index("failed")
    url, jobs, *_ = figure["data"][failed_index]["customdata"][0]
    bar = page.locator(
        f'[data-chart="step-results"] .barlayer .trace:nth-child({failed_index + 1}) .point path'
    ).first
    box = bar.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    page.wait_for_url(lambda current: urlsplit(current).path == "/")

    assert parse_qs(urlsplit(page.url).query) == parse_qs(urlsplit(url).query)
    assert parse_qs(urlsplit(page.url).query)["segment"] == ["failed"]
    rows = page.locator("tr[data-job-id]")
    assert rows.count() == jobs
    assert set(rows.evaluate_all("rows => rows.map(r => r.dataset.jobId)")) <= {
        f"dash-{i}" for i in range(0, 8, 3)
    }
    screenshot(page, "dashboard-click-jobs-list")


DRAW_ORDER = """
window.drawOrder = [];
window.drawnWhenReady = [];
new MutationObserver(changes => changes.forEach(change => {
  if (change.target.dataset.ready !== "true") return;
  window.drawOrder.push(change.target.dataset.chart);
  // How many charts plotly has drawn into by the time this one is ready.
  window.drawnWhenReady.push(
    [...document.querySelectorAll("[data-chart]")].filter(e => e.querySelector("svg")).length);
})).observe(document, {attributes: true, subtree: true, attributeFilter: ["data-ready"]});
"""


def test_charts_in_view_are_drawn_first_and_the_others_without_scrolling(
    page, live_server, dashboard_data
):
    page.set_viewport_size({"width": 1280, "height": 700})
    log_in(page, live_server, "olga", "/")
    page.add_init_script(DRAW_ORDER)
    page.goto(live_server.url + "/dashboard/")
    charts = page.locator("[data-chart]")
    page.wait_for_function(
        "n => window.drawOrder.length === n && document.querySelectorAll("
        "'[data-chart][data-ready=true]').length === n",
        arg=charts.count(),
    )
    assert page.evaluate("window.scrollY") == 0
    in_view = charts.evaluate_all(
        "elements => elements.filter(e => e.getBoundingClientRect().top < window.innerHeight)"
        ".map(e => e.dataset.chart)"
    )
    order = page.evaluate("window.drawOrder")
    assert 0 < len(in_view) < len(order)  # some charts start below the fold
    assert set(order[: len(in_view)]) == set(in_view)
    # The charts in view were ready before plotly started on any chart below the fold.
    assert page.evaluate("window.drawnWhenReady")[: len(in_view)] == [len(in_view)] * len(in_view)
    screenshot(page, "dashboard")


def test_changing_the_range_swaps_the_panels_and_redraws(page, live_server, dashboard_data):
    log_in(page, live_server, "olga", "/dashboard/")
    page.wait_for_selector('[data-chart="step-results"][data-ready="true"] svg.main-svg')
    page.check('input[name="range"][value="1h"]')
    page.wait_for_url(lambda current: "range=1h" in current)
    page.wait_for_selector('[data-empty="step-results"]')
    assert page.locator(".site-header").count() == 1
    page.check('input[name="range"][value="7d"]')
    page.wait_for_url(lambda current: "range=7d" in current)
    page.wait_for_selector('[data-chart="step-results"][data-ready="true"] svg.main-svg')
    assert page.locator('script#step-results[type="application/json"]').count() == 1
    # The data's one day is a bar most of a day wide (about 30 px here), not a 1 px hairline.
    bar = page.locator('[data-chart="step-results"] .bars .point path').first.bounding_box()
    assert bar["width"] > 10
    page.wait_for_function(  # every chart drawn, below the fold too, before the picture
        "() => [...document.querySelectorAll('[data-chart]')]"
        ".every(e => e.dataset.ready === 'true')"
    )
    screenshot(page, "dashboard-7d")  # day bars from UTC midnight, the first one whole
    # Back twice: the 1 h panels (empty), then the first page's charts, drawn again.
    page.go_back()
    page.wait_for_selector('[data-empty="step-results"]')
    page.go_back()
    page.wait_for_url(lambda current: "range=" not in current)
    page.wait_for_selector('[data-chart="step-results"][data-ready="true"] svg.main-svg')
    screenshot(page, "dashboard-after-back")


def test_a_provider_filter_shows_the_jobs_that_used_it(page, live_server, dashboard_data):
    """A job started on openai whose planner degraded on anthropic and whose step failed is
    under both filters: the caption says whose jobs the page shows."""
    openai = {"provider": "openai", "model": "gpt-4.1"}
    factories.store(
        [
            item("job_started", "dash-openai", 300, workflow="pdca", **openai),
            item("graph.next_step.parse_invalid", "dash-openai", 299, attempt=1, **ANTHROPIC),
            act_failed("dash-openai", 298, duration_ms=500),
        ]
    )
    failed_steps = {}
    log_in(page, live_server, "olga", "/dashboard/")
    for provider in ("anthropic", "openai"):
        page.goto(f"{live_server.url}/dashboard/?provider={provider}")
        page.wait_for_function(
            "() => [...document.querySelectorAll('[data-chart]')]"
            ".every(e => e.dataset.ready === 'true')"
        )
        caption = page.locator(".range-caption").text_content()
        assert f"jobs that used {provider} / any model" in caption
        figure = json.loads(page.locator("#step-results").text_content())
        failed = next(bar for bar in figure["data"] if bar["name"] == "failed")
        failed_steps[provider] = sum(failed["y"])
        # Named in the legend even when it is the chart's only trace (openai's).
        legend = page.locator('[data-chart="step-results"] .legend').text_content()
        assert "failed" in legend
        screenshot(page, f"dashboard-provider-{provider}")
    # dash-0, 3 and 6 (anthropic's own) and dash-openai; on openai, dash-openai alone.
    assert failed_steps == {"anthropic": 4, "openai": 1}
