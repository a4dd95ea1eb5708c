"""/metrics series from producer-controlled labels are capped: the busiest provider/model pairs
keep their own series (TRACEVIZ_METRICS_MAX_SERIES) and the rest add up under "other"."""

import pytest

from jobs.ingest import counters
from tests.integration.test_metrics import scrape

pytestmark = pytest.mark.django_db
PARSE_INVALID = "pdca_next_step_parse_invalid_total"


def planner_series(client) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["provider"], dict(labels)["model"]): value
        for (name, labels), value in scrape(client, REMOTE_ADDR="127.0.0.1").items()
        if name == PARSE_INVALID
    }


def count(provider: str, model: str, times: int) -> None:
    counters.increment(
        {(PARSE_INVALID, counters.labels_key(provider=provider, model=model)): times}
    )


def test_many_provider_names_make_a_bounded_number_of_series(client, settings):
    settings.TRACEVIZ_METRICS_MAX_SERIES = 3
    count("openai", "gpt", 50)
    count("anthropic", "claude", 40)
    count("google", "gemini", 30)
    for n in range(500):
        count(f"<hostile-{n}>", "m", 1)
    series = planner_series(client)
    assert series == {
        ("openai", "gpt"): 50,
        ("anthropic", "claude"): 40,
        ("google", "gemini"): 30,
        ("other", "other"): 500,
    }


def test_under_the_cap_every_pair_has_its_own_series(client, settings):
    settings.TRACEVIZ_METRICS_MAX_SERIES = 3
    count("openai", "gpt", 2)
    count("anthropic", "claude", 1)
    assert planner_series(client) == {("openai", "gpt"): 2, ("anthropic", "claude"): 1}


def test_a_producer_named_other_shares_the_other_series(client, settings):
    settings.TRACEVIZ_METRICS_MAX_SERIES = 1
    count("other", "other", 10)
    count("a", "b", 1)
    count("c", "d", 1)
    assert planner_series(client) == {("other", "other"): 12}
