"""Failure groups and plotly escaping in a real browser: the groups page lists what ingest
grouped, a group's page draws its trend, and producer text in any plotly figure (legend, hover,
axis ticks) is drawn as text, never as plotly's HTML subset (a provider named like a link must
not become one)."""

import os
from urllib.parse import urlsplit

import pytest

from tests import factories
from tests.browser.conftest import log_in, screenshot
from tests.factories import recent_event as item

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE_PROVIDER = "<a href=https://evil.example>Re-login</a>"
HOSTILE_NODE = '<span style="font-size:40px">BIG</span>'


@pytest.fixture
def grouped_failures(transactional_db):
    """Six jobs failing the same way (two with a hostile provider), two another way."""
    items = []
    for index in range(8):
        job_id, ago = f"fg-{index}", 400 - index * 45
        provider = HOSTILE_PROVIDER if index in (1, 4) else "openai"
        node = "fetch" if index < 6 else HOSTILE_NODE
        items.append(
            item("job_started", job_id, ago, workflow="billing", provider=provider, model="m1")
        )
        items.append(item("node_started", job_id, ago - 0.5, node_id=node, attempt=1))
        items.append(
            item(
                "node_finished",
                job_id,
                ago - 1,
                node_id=node,
                attempt=1,
                result_type="permanent_failure",
                failure_code="adapter_timeout",
                error_type="PermanentError",
                reason=f"upstream timed out after {30 + index}s (request req_{index}a9)",
                duration_ms=1500,
            )
        )
        items.append(
            item("graph.next_step.parse_invalid", job_id, ago - 2, provider=provider, model="m1")
        )
        items.append(
            item("graph.next_step.degraded", job_id, ago - 3, provider=provider, model="m1")
        )
    factories.store(items)
    factories.user("olga", "operator")


def assert_no_injected_markup(page, chart: str) -> None:
    links = page.locator(f'[data-chart="{chart}"] a')
    hrefs = links.evaluate_all(
        "links => links.map(a => a.getAttribute('href') || a.getAttribute('xlink:href'))"
    )
    assert not any("evil.example" in (href or "") for href in hrefs), hrefs
    big = page.locator(f'[data-chart="{chart}"] [style*="font-size:40px"]')
    assert big.count() == 0


def test_groups_page_lists_groups_and_a_group_page_draws_its_trend(
    page, live_server, grouped_failures
):
    log_in(page, live_server, "olga", "/failures/")
    rows = page.locator("tr[data-fingerprint]")
    # Every job's planner degraded too: that failure is a group of its own (8 jobs), first.
    assert rows.count() == 3
    assert "8 jobs" in rows.first.inner_text()
    fetch = rows.filter(has_text="6 jobs")
    assert fetch.count() == 1
    assert fetch.locator("svg.sparkline path").count() == 1
    # The hostile node id is shown as text in the table.
    assert HOSTILE_NODE in rows.nth(2).inner_text()
    screenshot(page, "failures-list")

    fetch.locator("a.job-link").click()
    page.wait_for_url(lambda url: urlsplit(url).path.startswith("/failures/"))
    page.wait_for_selector('[data-chart="failure-trend"][data-ready="true"] svg.main-svg')
    legend = page.locator('[data-chart="failure-trend"] .legend').text_content()
    assert f"{HOSTILE_PROVIDER}/m1" in legend
    assert_no_injected_markup(page, "failure-trend")
    screenshot(page, "failure-group")

    page.locator("a[data-group-jobs]").click()
    page.wait_for_url(lambda url: "group=" in url)
    assert page.locator("tr[data-job-id]").count() == 6


def test_producer_text_in_dashboard_charts_is_drawn_as_text(page, live_server, grouped_failures):
    log_in(page, live_server, "olga", "/dashboard/")
    for chart in ("planner-rate", "durations"):
        page.wait_for_selector(f'[data-chart="{chart}"][data-ready="true"] svg.main-svg')
    legend = page.locator('[data-chart="planner-rate"] .legend').text_content()
    assert HOSTILE_PROVIDER in legend
    assert_no_injected_markup(page, "planner-rate")
    # Node ids are the duration chart's axis ticks.
    ticks = page.locator('[data-chart="durations"] .yaxislayer-above').text_content()
    assert HOSTILE_NODE in ticks
    assert_no_injected_markup(page, "durations")
    # Hover a planner point: the tooltip names the provider as text.
    page.evaluate(
        """() => {
            const chart = document.querySelector('[data-chart="planner-rate"]');
            const trace = chart.data.findIndex(t => t.name.includes("Re-login"));
            Plotly.Fx.hover(chart, [{curveNumber: trace, pointNumber: 0}]);
        }"""
    )
    page.wait_for_selector('[data-chart="planner-rate"] .hoverlayer .hovertext')
    hover = page.locator('[data-chart="planner-rate"] .hoverlayer')
    assert "Re-login" in hover.text_content()
    assert hover.locator("a").count() == 0
    screenshot(page, "dashboard-hostile-provider")
