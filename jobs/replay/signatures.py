"""Failure signatures (docs/architecture.md): which failed steps are "the same failure".

A signature is the workflow, the node, the failure code, the error or exception type and the
reason with everything that varies from run to run (numbers, ids, uuids, hashes, paths, quoted
values, emails, urls) replaced by placeholders. Its fingerprint names the failure group.

Regular expressions on messages are what the taxonomy never does (it classifies by tables);
here they only blank out the variable parts of a reason so equal failures compare equal, and
nothing is classified by them.
"""

import hashlib
import re
from dataclasses import dataclass

from jobs.replay.state import StepState

# Longest normalised reason kept: beyond it two reasons are the same failure for grouping.
MAX_REASON_CHARS = 300
FINGERPRINT_CHARS = 20

# Order matters: a url holds a path and numbers, a uuid holds hex runs, an email holds an id.
_PLACEHOLDERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+", re.IGNORECASE), "<url>"),
    (re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b"), "<email>"),
    (
        re.compile(
            r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b", re.IGNORECASE
        ),
        "<uuid>",
    ),
    (re.compile(r"\"[^\"\n]*\"|'[^'\n]*'|`[^`\n]*`"), "<value>"),
    (re.compile(r"(?:\b[A-Za-z]:\\|~?/)[\w.~-]+(?:[/\\][\w.~-]+)+/?"), "<path>"),
    # A hex run of 7 or more with a digit in it (commit, content hash, request id).
    (re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{7,}\b", re.IGNORECASE), "<hash>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.IGNORECASE), "<hash>"),
    # A token mixing letters and digits (job-1234, req_8f3a, n42x): an identifier.
    (re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)+\b"), "<id>"),
    (re.compile(r"\b(?=\w*\d)(?=\w*[A-Za-z])[A-Za-z0-9]{6,}\b"), "<id>"),
    (re.compile(r"[-+]?\d+(?:[.,:]\d+)*"), "<n>"),
)
_SPACES = re.compile(r"\s+")


def normalise_reason(reason: str) -> str:
    """The reason with its variable parts as placeholders, whitespace collapsed, at most
    ``MAX_REASON_CHARS`` characters; "" for a blank reason."""
    text = reason or ""
    for pattern, placeholder in _PLACEHOLDERS:
        text = pattern.sub(placeholder, text)
    return _SPACES.sub(" ", text).strip()[:MAX_REASON_CHARS]


@dataclass(frozen=True, slots=True)
class Signature:
    workflow: str
    node_id: str
    failure_code: str
    error_type: str
    reason: str

    @property
    def fingerprint(self) -> str:
        """A short stable hex digest of the signature (the group's URL name)."""
        text = "\x1f".join(
            (self.workflow, self.node_id, self.failure_code, self.error_type, self.reason)
        )
        return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_CHARS]


def is_grouped(step: StepState) -> bool:
    """Whether the step counts in a failure group: a failed attempt (retryable, permanent or
    compensatable) that replay did not ignore as stale."""
    return step.is_failure and not step.ignored_stale


def signature(step: StepState, workflow: str) -> Signature | None:
    """The step's failure signature within its job's workflow; None for a step that is not a
    grouped failure (a success, a running attempt, a stale result)."""
    if not is_grouped(step):
        return None
    return Signature(
        workflow=workflow or "",
        node_id=step.node_id,
        failure_code=step.failure_code or "",
        error_type=step.error_type or step.exception_type or "",
        reason=normalise_reason(step.reason),
    )
