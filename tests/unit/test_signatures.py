"""Failure signatures (docs/architecture.md): the variable parts of a reason become placeholders,
so the same failure in different runs has the same fingerprint."""

import pytest

from jobs.replay.signatures import MAX_REASON_CHARS, normalise_reason, signature
from jobs.replay.state import StepState


@pytest.mark.parametrize(
    ("reason", "normalised"),
    [
        ("timeout after 30s", "timeout after <n>s"),
        ("timeout after 1500 ms", "timeout after <n> ms"),
        ("job 4f1c2a9e-8d7b-4c3a-9e1f-0a2b3c4d5e6f failed", "job <uuid> failed"),
        ("commit 9fceb02d0ae598e95dc970b74767f19372d61af8 missing", "commit <hash> missing"),
        ("no such file /var/lib/app/cache/x.json", "no such file <path>"),
        ("GET https://api.example.com/v1/items?id=3 returned 503", "GET <url> returned <n>"),
        ("mail to ops+alerts@example.org bounced", "mail to <email> bounced"),
        ("unknown tool 'search_web'", "unknown tool <value>"),
        ('field "customer.name" is required', "field <value> is required"),
        ("request req_8f3a2b failed", "request <id> failed"),
        ("row job-1234 locked", "row <id> locked"),
        ("  spaces\n\tcollapse  ", "spaces collapse"),
        ("", ""),
    ],
)
def test_variable_parts_of_a_reason_become_placeholders(reason, normalised):
    assert normalise_reason(reason) == normalised


def test_long_reasons_are_cut_to_the_kept_length():
    assert len(normalise_reason("word " * 500)) == MAX_REASON_CHARS


def failed(node="n1", reason="timeout after 30s", **fields):
    return StepState(
        node_id=node,
        attempt=1,
        position=0,
        result_type=fields.pop("result_type", "permanent_failure"),
        reason=reason,
        failure_code=fields.pop("failure_code", "adapter_timeout"),
        **fields,
    )


def test_same_failure_in_two_runs_has_one_fingerprint():
    first = signature(failed(reason="timeout after 30s calling req_1a2b3c"), "billing")
    second = signature(failed(reason="timeout after 45s calling req_9z8y7x"), "billing")
    assert first.fingerprint == second.fingerprint


@pytest.mark.parametrize(
    ("other", "workflow"),
    [
        (failed(node="n2"), "billing"),
        (failed(failure_code="tool_not_found"), "billing"),
        (failed(error_type="network"), "billing"),
        (failed(exception_type="KeyError"), "billing"),
        (failed(reason="connection refused"), "billing"),
        (failed(), "search"),
    ],
)
def test_each_part_of_the_signature_tells_groups_apart(other, workflow):
    assert signature(failed(), "billing").fingerprint != signature(other, workflow).fingerprint


def test_error_type_wins_over_exception_type():
    step = failed(error_type="network", exception_type="ConnectionError")
    assert signature(step, "w").error_type == "network"
    assert signature(failed(exception_type="ConnectionError"), "w").error_type == "ConnectionError"


@pytest.mark.parametrize(
    "step",
    [
        failed(result_type="success"),
        failed(result_type=None),
        failed(ignored_stale=True),
    ],
)
def test_successes_running_and_stale_steps_have_no_signature(step):
    assert signature(step, "w") is None


def test_retryable_failures_are_grouped():
    assert signature(failed(result_type="retryable_failure"), "w") is not None
