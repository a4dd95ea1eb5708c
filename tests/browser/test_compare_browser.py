"""Compare two runs in a real browser (docs/compare.md): from a failed ETL run's page, "Compare
with the last good run" opens on the first divergence with every difference listed, and a
difference's link opens its node's card."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.management.demo import etl_run
from tests import factories
from tests.browser.conftest import ARTIFACTS, axe_violations, log_in, screenshot

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def etl_runs(transactional_db):
    """Yesterday's nightly ETL completed with rules v12; today's, with v13, wrote 120,000 rows
    instead of 118,500 and failed on a duplicate key."""
    now = timezone.now()
    factories.store(etl_run("etl-nightly-41", now - timedelta(hours=22), "v12"))
    factories.store(etl_run("etl-nightly-42", now - timedelta(hours=1), "v13"))
    factories.user("erin", "engineer")


def test_compare_opens_on_the_first_divergence_and_lists_every_difference(
    page, live_server, etl_runs
):
    log_in(page, live_server, "erin", "/jobs/etl-nightly-42/")
    page.click("text=Compare with the last good run")
    page.wait_for_url(lambda url: "/compare/?a=etl-nightly-42" in url)
    assert "was picked for you: the latest earlier run of nightly-etl that completed" in (
        page.locator(".picked").inner_text()
    )

    first = page.locator("#first-divergence")
    assert first.locator("details").get_attribute("open") is not None
    assert first.locator(".node-name").inner_text() == "transform"
    # The page opened on it: the first divergence section is in view, at the top.
    top = page.locator("[data-first-divergence]").evaluate("e => e.getBoundingClientRect().top")
    assert 0 < top < 120
    arguments = first.locator("table.keys").first.inner_text()
    assert "rules" in arguments and '"v13"' in arguments and '"v12"' in arguments
    page.screenshot(path=str(ARTIFACTS / "compare-opened.png"))

    differences = {
        section: page.locator(f"#diff-{section} li").all_inner_texts()
        for section in ("new-failures", "only-in-b", "arguments", "results", "slower")
    }
    assert differences["new-failures"][0].startswith("load permanent_failure: duplicate key")
    assert differences["only-in-b"] == ["report success"]
    assert 'rules: "v12" → "v13"' in differences["arguments"][0]
    assert "rows_written: 118500 → 120000" in differences["results"][0]
    assert differences["slower"] == ["load 1.1 s → 4.2 s (3.8x)"]
    violations = axe_violations(page)
    assert violations == [], violations
    screenshot(page, "compare-whole")

    # A difference's link opens that node's card, with the SQL's change as a text diff.
    page.locator("#diff-new-failures a").first.click()
    load = page.locator("li.compare-node.change-new_failure")
    assert load.locator("details").get_attribute("open") is not None
    diff = load.locator("pre.text-diff").inner_text()
    assert "-WHERE day = :day" in diff and "+WHERE day >= :day - 1" in diff
    page.screenshot(path=str(ARTIFACTS / "compare-load-card.png"))
