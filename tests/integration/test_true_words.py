"""The words on the job page say what is true: a job that failed without job_finished, a step
whose duration only its start and finish give, the planner's banner and validation errors, the
restart preview of a job whose planner degraded."""

import pytest

from tests import factories
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db


@pytest.fixture
def engineer(client):
    client.force_login(factories.user("erin", "engineer"))


def degraded_planner(job_id: str = "p1", **degraded) -> None:
    factories.store(
        [
            event("job_started", job_id, 0, provider="openai", model="gpt-x"),
            event(
                "graph.next_step.parse_invalid",
                job_id,
                1,
                attempt=1,
                provider="anthropic",
                model="claude-x",
                validation_errors=[
                    {"loc": ["next_step", "args"], "msg": "field required", "type": "missing"},
                    "plain words",
                    ["odd", 1],
                ],
            ),
            event(
                "graph.next_step.degraded",
                job_id,
                2,
                attempts=2,
                provider="anthropic",
                model="claude-x",
                **degraded,
            ),
        ]
    )


def test_a_job_that_failed_without_job_finished_says_no_finish_was_received(engineer, client):
    factories.store(
        [
            started("n1", "j1", 0),
            finished("n1", "permanent_failure", "j1", 5.8, reason="boom"),
        ]
    )
    response = client.get("/jobs/j1/")
    body = response.content.decode()
    assert response.context["job"].status == "failed"
    finished_text = body.split("<dt>Finished</dt>")[1].split("</dd>")[0]
    assert "not finished" not in finished_text
    assert "no job_finished received" in finished_text
    duration = body.split("<dt>Duration</dt>")[1].split("</dd>")[0]
    assert "5.8 s to its last event" in duration
    assert "so far" not in duration


def test_a_running_job_is_not_finished_and_its_duration_is_so_far(engineer, client):
    factories.store([started("n1", "j1", 0), finished("n1", "success", "j1", 2), started("n2")])
    body = client.get("/jobs/j1/").content.decode()
    assert "not finished" in body.split("<dt>Finished</dt>")[1].split("</dd>")[0]
    assert "2.0 s so far" in body.split("<dt>Duration</dt>")[1].split("</dd>")[0]


def test_a_finished_job_shows_its_finish_and_plain_duration(engineer, client):
    factories.store(
        [
            started("n1", "j1", 0),
            finished("n1", "success", "j1", 3),
            event("job_finished", "j1", 3, status="completed"),
        ]
    )
    body = client.get("/jobs/j1/").content.decode()
    duration = body.split("<dt>Duration</dt>")[1].split("</dd>")[0]
    assert "3.0 s" in duration and "so far" not in duration and "last event" not in duration


def test_a_step_with_both_ends_known_has_a_duration(engineer, client):
    factories.store([started("n1", "j1", 0), finished("n1", "success", "j1", 1.5)])
    response = client.get("/jobs/j1/?step=n1:1")
    assert response.context["duration"] == "1.5 s"


def test_planner_banner_says_the_attempts_once_beside_the_reason(engineer, client):
    degraded_planner(reason="next step invalid after 2 attempts")
    body = client.get("/jobs/p1/").content.decode()
    banner = body.split("<strong>Planner degraded</strong>")[1].split("</div>")[0]
    assert banner.count("after 2 attempts") == 1
    assert "attempts: 2" in banner
    assert "anthropic/claude-x" in banner


def test_validation_errors_are_words_not_python_reprs(engineer, client):
    degraded_planner()
    response = client.get("/jobs/p1/")
    (attempt,) = response.context["planner_attempts"]
    assert attempt["validation_errors"] == [
        "next_step.args: field required",
        "plain words",
        '["odd", 1]',
    ]
    assert "{&#x27;loc&#x27;" not in response.content.decode()


def test_restart_preview_of_a_degraded_planner_names_the_planner(engineer, client):
    degraded_planner()
    body = client.get("/jobs/p1/").content.decode()
    again = body.split("<h3>Would run again</h3>")[1].split("</div>")[0]
    assert "the planner's next step" in again
    assert ">nothing<" not in again
