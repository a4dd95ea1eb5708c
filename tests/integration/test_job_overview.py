"""A big job at a glance (docs/pages.md): the overview strip of every node, the waterfall
opened around the root failure, following the strip, "Jump to root failure" and the step
filter, and collapsing a subtree."""

import re

import pytest

from jobs.models import Job
from tests import factories
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db

GROUPS, PER_GROUP = 100, 50  # 5,000 nodes: 100 batches of a parent and its 49 children
ROOT = "batch-52-item-30"
RETRIED = "batch-10-item-05"


def wide_job(job_id: str = "wide", groups: int = GROUPS, per_group: int = PER_GROUP) -> None:
    """A job of ``groups * per_group`` nodes nested one level (each batch node a parent), one
    node retried once and one failing for good in the middle; every other node succeeds."""
    items = [event("job_started", job_id, 0, workflow="etl")]
    at = 1.0
    for group in range(groups):
        parent = f"batch-{group:02d}"
        items.append(started(parent, job_id, at, trace_span_id=f"s-{parent}"))
        for item in range(1, per_group):
            node = f"{parent}-item-{item:02d}"
            ids = {"trace_span_id": f"s-{node}", "parent_span_id": f"s-{parent}"}
            items.append(started(node, job_id, at, **ids))
            if node == RETRIED:
                items.append(finished(node, "retryable_failure", job_id, at + 0.1, reason="503"))
                items.append(started(node, job_id, at + 0.2, attempt=2, **ids))
                items.append(finished(node, "success", job_id, at + 0.3, attempt=2))
            elif node == ROOT:
                items.append(
                    finished(node, "permanent_failure", job_id, at + 0.2, reason="duplicate key")
                )
            else:
                items.append(finished(node, "success", job_id, at + 0.1))
            at += 0.01
        items.append(finished(parent, "success", job_id, at))
    factories.store(items)


def row_nodes(body: str) -> list[str]:
    return re.findall(
        r'<li class="wf-row[^"]*"[^>]*>\s*<span class="wf-label">.*?<code[^>]*>([^<]+)', body
    )


@pytest.fixture
def engineer(client):
    client.force_login(factories.user("erin", "engineer"))
    return client


@pytest.fixture
def wide(db):
    wide_job()
    assert Job.objects.get(job_id="wide").failing_node_id == ROOT


def test_the_waterfall_opens_around_the_root_failure(engineer, wide):
    response = engineer.get("/jobs/wide/")
    nodes = [row["node_id"] for row in response.context["waterfall_rows"]]
    assert ROOT in nodes and nodes.index(ROOT) == 5  # five rows of context above it
    assert "batch-00" not in nodes
    selected = [row["node_id"] for row in response.context["waterfall_rows"] if row["selected"]]
    assert selected == [ROOT]
    body = response.content.decode()
    assert "Show earlier nodes (" in body and "Show more nodes (" in body


def test_the_strip_shows_every_node_in_at_most_200_cells_failures_and_retries_marked(
    engineer, wide
):
    response = engineer.get("/jobs/wide/")
    strip = response.context["strip"]
    assert strip.node_count == 5000 and strip.per_cell == 25 and len(strip.cells) == 200
    assert (strip.failed, strip.retried) == (1, 1)
    cells = response.context["strip_cells"]
    failed = [cell for cell in cells if cell["css"] == "ov-cell ov-failed"]
    retried = [cell for cell in cells if cell["css"] == "ov-cell ov-retried"]
    assert len(failed) == 1 and failed[0]["href"] == f"?step={ROOT}:1"
    assert "1 failed" in failed[0]["label"]
    assert len(retried) == 1 and retried[0]["href"] == f"?step={RETRIED}:2"
    # The failed cell holds the rows shown: it is inside the outlined window.
    assert failed[0]["in_view"] and not retried[0]["in_view"]
    left = float(re.match(r"left:([\d.]+)%", response.context["strip_outline"]).group(1))
    assert 50 < left < 53


def test_a_strip_click_moves_the_waterfall_and_brings_the_list_and_panel(engineer, wide):
    response = engineer.get(
        f"/jobs/wide/?step={RETRIED}:2", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="waterfall"
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="waterfall" class="card waterfall"')
    assert RETRIED in row_nodes(body)
    assert '<div id="step-results" hx-swap-oob="true">' in body
    assert f'data-step-key="{RETRIED}:2" aria-current="true"' in body
    assert 'id="step-panel"' in body and f'data-step-key="{RETRIED}:2" hx-swap-oob="true"' in body
    assert 'id="job-head"' not in body and 'id="narrative"' not in body
    assert "HX-Request" in response["Vary"]


def test_jump_to_root_failure_moves_the_waterfall_back_to_it(engineer, wide):
    page = engineer.get(f"/jobs/wide/?step={RETRIED}:2").content.decode()
    assert f'hx-get="?step={ROOT}:1" hx-target="#waterfall"' in page
    moved = engineer.get(
        f"/jobs/wide/?step={ROOT}:1", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="waterfall"
    )
    assert ROOT in row_nodes(moved.content.decode())


def test_a_collapsed_subtree_leaves_the_waterfall_and_opens_again(engineer, wide):
    response = engineer.get("/jobs/wide/?step=batch-00:1&collapse=batch-00")
    nodes = [row["node_id"] for row in response.context["waterfall_rows"]]
    assert nodes[:3] == ["batch-00", "batch-01", "batch-01-item-01"]
    body = response.content.decode()
    assert "+49 hidden" in body
    toggle = response.context["waterfall_rows"][0]["toggle_href"]
    assert toggle == "?step=batch-00%3A1"  # opens it again
    opened = engineer.get(
        "/jobs/wide/" + toggle, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="waterfall"
    )
    assert row_nodes(opened.content.decode())[:2] == ["batch-00", "batch-00-item-01"]
    assert "1 subtree collapsed" in body


def test_the_waterfall_lists_the_nodes_the_step_filter_keeps(engineer, wide):
    response = engineer.get("/jobs/wide/?retried=1")
    assert [row["node_id"] for row in response.context["waterfall_rows"]] == [RETRIED]
    assert "1 with a matching step" in response.content.decode()
    response = engineer.get("/jobs/wide/?node=batch-99")
    assert len(response.context["waterfall_rows"]) == PER_GROUP


def test_show_earlier_nodes_answers_the_rows_before_the_window(engineer, wide):
    response = engineer.get("/jobs/wide/")
    before = response.context["waterfall_before"]
    first = response.context["waterfall_first"]
    assert before["remaining"] == first
    earlier = engineer.get(before["fragment"], HTTP_HX_REQUEST="true")
    nodes = row_nodes(earlier.content.decode())
    assert (
        len(nodes) == 200
        and nodes[-1] == response.context["waterfall_rows"][0]["node_id"][:0] + nodes[-1]
    )
    page = engineer.get("/jobs/wide/" + before["page"].split("#")[0])
    assert page.context["waterfall_first"] == first - 200
    assert [r["node_id"] for r in page.context["waterfall_rows"]][:200] == nodes
