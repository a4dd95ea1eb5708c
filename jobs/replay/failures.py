"""The failure taxonomy: every classification is a table lookup, never a match on messages.

Sources: 000 (result types and segments), 002 (failure codes and their single retry owner),
003 (error types to run statuses; unclassified means our bug), 004 (structured error types).
"""

from enum import StrEnum


class ResultType(StrEnum):
    SUCCESS = "success"
    RETRYABLE_FAILURE = "retryable_failure"
    PERMANENT_FAILURE = "permanent_failure"
    COMPENSATABLE_FAILURE = "compensatable_failure"


class Segment(StrEnum):
    OK = "ok"
    RETRYABLE = "retryable"
    FAILED = "failed"
    RUNNING = "running"


class RunStatus(StrEnum):
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PAUSED_TRANSIENT = "paused:transient"
    PAUSED_APPROVAL = "paused:approval"
    PAUSED_RECONCILIATION = "paused:reconciliation"
    FAILED_LOGIC = "failed:logic"
    FAILED_INTERNAL = "failed:internal"


class RetryOwner(StrEnum):
    ADAPTER = "adapter"
    PLAN = "plan"
    REDUCER = "reducer"


SEGMENT_BY_RESULT_TYPE: dict[ResultType, Segment] = {
    ResultType.SUCCESS: Segment.OK,
    ResultType.RETRYABLE_FAILURE: Segment.RETRYABLE,
    ResultType.PERMANENT_FAILURE: Segment.FAILED,
    ResultType.COMPENSATABLE_FAILURE: Segment.FAILED,
}

# The run-status contract's closed table, extended with the failure-report contract's structured
# error types.
RUN_STATUS_BY_ERROR_TYPE: dict[str, RunStatus] = {
    "auth": RunStatus.PAUSED_APPROVAL,
    "permission": RunStatus.PAUSED_APPROVAL,
    "network": RunStatus.PAUSED_TRANSIENT,
    "TransientError": RunStatus.PAUSED_TRANSIENT,
    "logic": RunStatus.FAILED_LOGIC,
    "ValidationError": RunStatus.FAILED_LOGIC,
    "internal": RunStatus.FAILED_INTERNAL,
    "PermanentError": RunStatus.FAILED,
    "BoundaryViolation": RunStatus.FAILED,
}
# The run-status contract: an error nobody classified is a bug in our own code, never the user's.
UNCLASSIFIED_RUN_STATUS = RunStatus.FAILED_INTERNAL


class FailureCode(StrEnum):
    ADAPTER_TIMEOUT = "adapter_timeout"
    ADAPTER_ERROR = "adapter_error"
    PROVIDER_RETRYABLE = "provider_retryable"
    TOOL_INVALID_ARGS = "tool_invalid_args"
    TOOL_NOT_FOUND = "tool_not_found"
    POLICY_DENIED = "policy_denied"
    CAPABILITY_DENIED = "capability_denied"
    VALIDATION_ERROR = "validation_error"
    PROVIDER_TERMINAL = "provider_terminal"
    INVARIANT_VIOLATION = "invariant_violation"
    UNKNOWN_FAILURE = "unknown_failure"


# (retryable, retry owner) per canonical code: one owner each (the failure-code contract's
# single-owner rule).
FAILURE_CODES: dict[FailureCode, tuple[bool, RetryOwner]] = {
    FailureCode.ADAPTER_TIMEOUT: (True, RetryOwner.ADAPTER),
    FailureCode.ADAPTER_ERROR: (True, RetryOwner.ADAPTER),
    FailureCode.PROVIDER_RETRYABLE: (True, RetryOwner.ADAPTER),
    FailureCode.TOOL_INVALID_ARGS: (True, RetryOwner.PLAN),
    FailureCode.TOOL_NOT_FOUND: (False, RetryOwner.PLAN),
    FailureCode.POLICY_DENIED: (False, RetryOwner.REDUCER),
    FailureCode.CAPABILITY_DENIED: (False, RetryOwner.REDUCER),
    FailureCode.VALIDATION_ERROR: (False, RetryOwner.REDUCER),
    FailureCode.PROVIDER_TERMINAL: (False, RetryOwner.REDUCER),
    FailureCode.INVARIANT_VIOLATION: (False, RetryOwner.REDUCER),
    FailureCode.UNKNOWN_FAILURE: (False, RetryOwner.REDUCER),
}

# Failures that end a node for good; a retryable one may still be followed by a success.
TERMINAL_RESULT_TYPES = frozenset({ResultType.PERMANENT_FAILURE, ResultType.COMPENSATABLE_FAILURE})


def segment_for(result_type: str | None) -> Segment:
    """Segment of a finished attempt; ``None`` means the attempt has not finished yet."""
    if result_type is None:
        return Segment.RUNNING
    return SEGMENT_BY_RESULT_TYPE[ResultType(result_type)]


def run_status_for_error_type(error_type: str) -> RunStatus:
    """Run status an error type leads to; unknown values are unclassified (failed:internal)."""
    return RUN_STATUS_BY_ERROR_TYPE.get(error_type, UNCLASSIFIED_RUN_STATUS)


def is_classified_error_type(error_type: str) -> bool:
    return error_type in RUN_STATUS_BY_ERROR_TYPE


def canonical_failure_code(code: str) -> FailureCode:
    """The canonical code a producer's value counts as: unknown values count as unknown_failure."""
    try:
        return FailureCode(code)
    except ValueError:
        return FailureCode.UNKNOWN_FAILURE


def retry_owner(code: str) -> RetryOwner:
    return FAILURE_CODES[canonical_failure_code(code)][1]


# What (retryable, owner) means for the failed step, as the step panel says it (the
# failure-code contract's single-owner rule). "Retried by reducer" read as if something would
# retry: the reducer owns the codes nobody retries.
RETRY_MEANING: dict[tuple[bool, RetryOwner], str] = {
    (True, RetryOwner.ADAPTER): "retryable: the adapter retries the call (transport failure)",
    (True, RetryOwner.PLAN): "retryable: the plan re-dispatches the step with repaired arguments",
    (False, RetryOwner.PLAN): "not retried: the plan must choose another step",
    (False, RetryOwner.REDUCER): "not retried: terminal, the reducer settles the job's state",
}


def retry_meaning(code: str) -> str:
    """What happens after a failure with ``code``: who retries it, or that nobody does."""
    canonical = canonical_failure_code(code)
    retryable, owner = FAILURE_CODES[canonical]
    return RETRY_MEANING[(retryable, owner)]


def is_retryable_code(code: str) -> bool:
    return FAILURE_CODES[canonical_failure_code(code)][0]


# Statuses that need someone's attention: the jobs list shows these by default.
ATTENTION_STATUSES = frozenset(
    {
        RunStatus.FAILED,
        RunStatus.FAILED_LOGIC,
        RunStatus.FAILED_INTERNAL,
        RunStatus.PAUSED_TRANSIENT,
        RunStatus.PAUSED_APPROVAL,
        RunStatus.PAUSED_RECONCILIATION,
    }
)
# The failed family: "failed" in the jobs list's and the API's status filter means all of them.
FAILED_FAMILY = (RunStatus.FAILED, RunStatus.FAILED_LOGIC, RunStatus.FAILED_INTERNAL)
# Statuses in which a job still expects events: silence beyond TRACEVIZ_STALL_AFTER is a stall.
STALLABLE_STATUSES = frozenset(
    {RunStatus.RUNNING, RunStatus.CANCELLING, RunStatus.PAUSED_TRANSIENT}
)
