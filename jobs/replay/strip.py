"""The jobs list's mini-bar of a job: every step counted, in at most MAX_CELLS cells of
consecutive steps (by position), each cell counting its steps by kind (docs/pages.md).

A cell holds ``per`` steps, a power of two: when a step lands past the last cell, neighbouring
cells merge in pairs and ``per`` doubles, so the strip stays small however long the job gets,
and a step whose segment changes moves one count. No step is ever dropped: a failed or retried
step anywhere in a job of 10,000 steps is in its cell's counts.

The strip as stored (``Job.segment_strip``): ``{"per": 1, "cells": [[ok, retryable, failed,
running, stale], ...]}``.
"""

from typing import Any

MAX_CELLS = 48
KINDS = ("ok", "retryable", "failed", "running", "stale")
# The kind a cell is drawn as: its worst count, failures first.
WORST_FIRST = ("failed", "retryable", "running", "stale", "ok")
_INDEX = {kind: index for index, kind in enumerate(KINDS)}


def empty() -> dict[str, Any]:
    return {"per": 1, "cells": []}


def kind_of(cell: list) -> str:
    """The kind a step's strip cell ([segment, stale]) counts as: stale results apart."""
    return "stale" if cell[1] else cell[0]


def count(strip: dict[str, Any], position: int, before: list | None, after: list) -> None:
    """Count the step at ``position`` as ``after`` (its [segment, stale]) instead of
    ``before`` (None for a step not counted yet), in place."""
    cells = strip["cells"]
    while position // strip["per"] >= MAX_CELLS:
        strip["cells"] = cells = [
            [a + b for a, b in zip(cells[i], cells[i + 1], strict=True)]
            if i + 1 < len(cells)
            else cells[i]
            for i in range(0, len(cells), 2)
        ]
        strip["per"] *= 2
    index = position // strip["per"]
    while len(cells) <= index:
        cells.append([0] * len(KINDS))
    if before is not None:
        cells[index][_INDEX[kind_of(before)]] -= 1
    cells[index][_INDEX[kind_of(after)]] += 1


def copy(strip: dict[str, Any]) -> dict[str, Any]:
    return {"per": strip["per"], "cells": [list(cell) for cell in strip["cells"]]}


def worst(cell: list) -> str:
    """What a cell is drawn as: failed when any of its steps failed, else retryable, running,
    stale, ok."""
    return next((kind for kind in WORST_FIRST if cell[_INDEX[kind]]), "ok")


def totals(strip: dict[str, Any]) -> dict[str, int]:
    """Steps by kind over the whole strip (kinds with none left out), in KINDS order."""
    sums = [sum(column) for column in zip(*strip["cells"], strict=False)] or [0] * len(KINDS)
    return {kind: n for kind, n in zip(KINDS, sums, strict=True) if n}
