"""Every row of every taxonomy table in jobs/failures.py (sources 000, 002, 003, 004)."""

import pytest

from jobs.replay import failures
from jobs.replay.failures import FailureCode, RetryOwner, RunStatus, Segment

SEGMENTS = [
    ("success", "ok"),
    ("retryable_failure", "retryable"),
    ("permanent_failure", "failed"),
    ("compensatable_failure", "failed"),
]
RUN_STATUSES = [
    ("auth", "paused:approval"),
    ("permission", "paused:approval"),
    ("network", "paused:transient"),
    ("TransientError", "paused:transient"),
    ("logic", "failed:logic"),
    ("ValidationError", "failed:logic"),
    ("internal", "failed:internal"),
    ("PermanentError", "failed"),
    ("BoundaryViolation", "failed"),
]
FAILURE_CODES = [
    ("adapter_timeout", True, "adapter"),
    ("adapter_error", True, "adapter"),
    ("provider_retryable", True, "adapter"),
    ("tool_invalid_args", True, "plan"),
    ("tool_not_found", False, "plan"),
    ("policy_denied", False, "reducer"),
    ("capability_denied", False, "reducer"),
    ("validation_error", False, "reducer"),
    ("provider_terminal", False, "reducer"),
    ("invariant_violation", False, "reducer"),
    ("unknown_failure", False, "reducer"),
]


@pytest.mark.parametrize(("result_type", "segment"), SEGMENTS)
def test_result_type_maps_to_its_segment(result_type, segment):
    assert failures.segment_for(result_type) == segment


def test_segment_table_has_exactly_the_four_result_types():
    assert {str(k): str(v) for k, v in failures.SEGMENT_BY_RESULT_TYPE.items()} == dict(SEGMENTS)


def test_unfinished_attempt_is_running_segment():
    assert failures.segment_for(None) == Segment.RUNNING


@pytest.mark.parametrize(("error_type", "status"), RUN_STATUSES)
def test_error_type_maps_to_its_run_status(error_type, status):
    assert failures.run_status_for_error_type(error_type) == status
    assert failures.is_classified_error_type(error_type)


def test_error_type_table_has_exactly_the_documented_rows():
    assert {k: str(v) for k, v in failures.RUN_STATUS_BY_ERROR_TYPE.items()} == dict(RUN_STATUSES)


@pytest.mark.parametrize("error_type", ["Timeout", "AUTH", "", "ValueError"])
def test_unclassified_error_type_is_failed_internal(error_type):
    assert failures.run_status_for_error_type(error_type) == RunStatus.FAILED_INTERNAL
    assert not failures.is_classified_error_type(error_type)


@pytest.mark.parametrize(("code", "retryable", "owner"), FAILURE_CODES)
def test_failure_code_has_its_retryability_and_single_owner(code, retryable, owner):
    assert failures.is_retryable_code(code) is retryable
    assert failures.retry_owner(code) == owner
    assert failures.canonical_failure_code(code) == code


def test_failure_code_table_has_exactly_the_eleven_codes():
    table = {
        str(code): (retryable, str(owner))
        for code, (retryable, owner) in failures.FAILURE_CODES.items()
    }
    assert table == {code: (retryable, owner) for code, retryable, owner in FAILURE_CODES}
    assert len(FailureCode) == 11


@pytest.mark.parametrize("code", ["rate_limited", "ADAPTER_TIMEOUT", ""])
def test_unknown_failure_code_counts_as_unknown_failure(code):
    assert failures.canonical_failure_code(code) == FailureCode.UNKNOWN_FAILURE
    assert failures.retry_owner(code) == RetryOwner.REDUCER
    assert failures.is_retryable_code(code) is False


def test_terminal_result_types_are_permanent_and_compensatable():
    assert {"permanent_failure", "compensatable_failure"} == failures.TERMINAL_RESULT_TYPES


def test_attention_statuses_are_failed_and_paused():
    assert {str(s) for s in failures.ATTENTION_STATUSES} == {
        "failed",
        "failed:logic",
        "failed:internal",
        "paused:transient",
        "paused:approval",
        "paused:reconciliation",
    }


@pytest.mark.parametrize(("code", "retryable", "owner"), FAILURE_CODES)
def test_every_failure_code_says_who_retries_it_or_that_nobody_does(code, retryable, owner):
    meaning = failures.retry_meaning(code)
    assert meaning.startswith("retryable: " if retryable else "not retried: ")
    assert str(owner) in meaning


def test_retry_meaning_table_covers_exactly_the_pairs_the_codes_use():
    used = {(retryable, owner) for retryable, owner in failures.FAILURE_CODES.values()}
    assert set(failures.RETRY_MEANING) == used
