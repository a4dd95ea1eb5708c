"""Failure signatures (docs/architecture.md): which failed steps are "the same failure".

A signature is the workflow, the node, the failure code, the error or exception type and the
reason with everything that varies from run to run (numbers, ids, uuids, hashes, paths, quoted
values, emails, urls) replaced by placeholders. Its fingerprint names the failure group.

Regular expressions on messages are what the taxonomy never does (it classifies by tables);
here they only blank out the variable parts of a reason so equal failures compare equal, and
nothing is classified by them.

Grouping is versioned: ``GROUPING_VERSION`` names the normaliser that makes fingerprints now,
and ``NORMALISERS`` keeps the earlier ones, so a fingerprint of the current version that no
group has yet can be looked up under the versions before it (``Signature.earlier``): a change
of normaliser finds the groups the old one made instead of starting new ones.

A producer may set a step's fingerprint (``fingerprint`` in ``node_finished``, the span
attribute ``traceviz.fingerprint``): a list of strings, where ``{{ default }}`` stands for the
computed fingerprint. It is then the failure's whole identity: failures of other nodes or
workflows with the same list share the group.
"""

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from jobs.contract.events import MAX_FINGERPRINT_ELEMENTS, MAX_ID_CHARS
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


# The grouping version fingerprints are made with now, and each version's reason normaliser.
# A change of normaliser is a new version beside the old ones, never an edit of one.
GROUPING_VERSION = 1
NORMALISERS: dict[int, Callable[[str], str]] = {1: normalise_reason}
# The element of a producer's fingerprint that stands for the computed one.
DEFAULT_ELEMENT = "{{ default }}"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:FINGERPRINT_CHARS]


@dataclass(frozen=True, slots=True)
class Signature:
    """What makes failures the same: ``reason`` is normalised by ``version``'s normaliser.
    ``custom``: the producer's fingerprint, when it set one. ``earlier``: the fingerprints of
    the same failure under the grouping versions before ``version``, newest first."""

    workflow: str
    node_id: str
    failure_code: str
    error_type: str
    reason: str
    custom: tuple[str, ...] = ()
    version: int = GROUPING_VERSION
    earlier: tuple[tuple[int, str], ...] = ()

    @property
    def computed(self) -> str:
        """The fingerprint traceviz computes: a short stable hex digest of the signature."""
        return _digest(self.workflow, self.node_id, self.failure_code, self.error_type, self.reason)

    @property
    def fingerprint(self) -> str:
        """The fingerprint that names the failure's group under ``version``: the producer's,
        with ``{{ default }}`` as the computed one, else the computed one."""
        if not self.custom:
            return self.computed
        parts = [self.computed if part == DEFAULT_ELEMENT else part for part in self.custom]
        return _digest("custom", *parts)


def make(
    workflow: str,
    node_id: str,
    failure_code: str,
    error_type: str,
    reason: str,
    custom: tuple[str, ...] = (),
) -> Signature:
    """The signature of a failure under the current grouping version, with its fingerprints
    under the earlier versions (``reason`` as the failure gave it)."""
    version = GROUPING_VERSION
    earlier = tuple(
        (
            older,
            Signature(
                workflow, node_id, failure_code, error_type, NORMALISERS[older](reason), custom
            ).fingerprint,
        )
        for older in sorted((v for v in NORMALISERS if v < version), reverse=True)
    )
    return Signature(
        workflow,
        node_id,
        failure_code,
        error_type,
        NORMALISERS[version](reason),
        custom,
        version,
        earlier,
    )


def producer_fingerprint(value) -> tuple[str, ...]:
    """A producer's fingerprint as replay keeps it: the list of strings, or () for anything
    else (the contract refuses other shapes; a step stored before it did keeps its group)."""
    if (
        isinstance(value, list | tuple)
        and 0 < len(value) <= MAX_FINGERPRINT_ELEMENTS
        and all(isinstance(part, str) and 0 < len(part) <= MAX_ID_CHARS for part in value)
    ):
        return tuple(value)
    return ()


def is_grouped(step: StepState) -> bool:
    """Whether the step counts in a failure group: a failed attempt (retryable, permanent or
    compensatable) that replay did not ignore as stale."""
    return step.is_failure and not step.ignored_stale


def signature(step: StepState, workflow: str) -> Signature | None:
    """The step's failure signature within its job's workflow; None for a step that is not a
    grouped failure (a success, a running attempt, a stale result)."""
    if not is_grouped(step):
        return None
    return make(
        workflow or "",
        step.node_id,
        step.failure_code or "",
        step.error_type or step.exception_type or "",
        step.reason or "",
        producer_fingerprint(step.extra.get("fingerprint")),
    )
