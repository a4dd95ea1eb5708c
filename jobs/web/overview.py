"""The job page's overview strip: every node of the job in the waterfall's order, in at most
``MAX_CELLS`` cells (a cell holds consecutive nodes once the job has more), each marked by the
worst of its nodes (failed, retried, running, ok), with the waterfall's window outlined.

Pure: a ``timeline.NodeTree`` in, plain data out (docs/pages.md, "A big job at a glance").
"""

from dataclasses import dataclass
from math import ceil
from typing import Any

from jobs.replay.failures import Segment
from jobs.web.rendering import step_query

MAX_CELLS = 200


class Mark:
    """What a node (and a cell, the worst of its nodes) is marked as, worst first."""

    FAILED = "failed"
    RETRIED = "retried"
    RUNNING = "running"
    OK = "ok"


RANK = {Mark.FAILED: 0, Mark.RETRIED: 1, Mark.RUNNING: 2, Mark.OK: 3}


def node_mark(steps: list) -> tuple[str, Any]:
    """A node's mark and the attempt a click on it opens: failed when an attempt failed (that
    attempt, the latest such), retried when it has more than one attempt or a retryable one,
    running when an attempt has not finished, else ok (its latest attempt). Stale results
    (ignored by replay) mark nothing."""
    counted = [step for step in steps if not step.ignored_stale] or steps
    failed = [step for step in counted if step.segment == Segment.FAILED]
    if failed:
        return Mark.FAILED, failed[-1]
    latest = counted[-1]
    if len(counted) > 1 or any(step.segment == Segment.RETRYABLE for step in counted):
        return Mark.RETRIED, latest
    if any(step.segment == Segment.RUNNING for step in counted):
        return Mark.RUNNING, latest
    return Mark.OK, latest


@dataclass(slots=True)
class Cell:
    first: int  # places in the tree order, inclusive
    last: int
    mark: str
    target: Any  # the step a click opens (a Step row or a row of its values)
    failed: int = 0
    retried: int = 0
    running: int = 0

    @property
    def nodes(self) -> int:
        return self.last - self.first + 1


@dataclass(slots=True)
class Overview:
    cells: list[Cell]
    node_count: int
    per_cell: int
    failed: int
    retried: int


def overview(tree, root_key: str = "", max_cells: int = MAX_CELLS) -> Overview:
    """The strip of ``tree`` (a ``timeline.NodeTree``): one cell per node, or per run of
    ``per_cell`` nodes when there are more than ``max_cells``. A cell's click opens the root
    failure when the cell holds it, else its first failed node's failure, else its first
    retried or running node's latest attempt, else its first node's."""
    count = len(tree.order)
    per_cell = max(ceil(count / max_cells), 1) if count else 1
    cells: list[Cell] = []
    failed = retried = 0
    for first in range(0, count, per_cell):
        last = min(first + per_cell, count) - 1
        cell = None
        for place in range(first, last + 1):
            node_id = tree.order[place][0]
            mark, step = node_mark(tree.by_node[node_id])
            if cell is None:
                cell = Cell(first, last, mark, step)
            elif RANK[mark] < RANK[cell.mark]:
                cell.mark, cell.target = mark, step
            if mark == Mark.FAILED:
                cell.failed += 1
            elif mark == Mark.RETRIED:
                cell.retried += 1
            elif mark == Mark.RUNNING:
                cell.running += 1
            if root_key and step.step_key == root_key:
                cell.target = step
        assert cell is not None  # a run holds at least one node
        failed += cell.failed
        retried += cell.retried
        cells.append(cell)
    return Overview(cells, count, per_cell, failed, retried)


def cell_items(strip: Overview, tree, shown_first: int, shown_last: int, keep: str) -> list[dict]:
    """The strip's cells as the template shows them: a link to the step each opens (``keep``:
    the query parameters every link carries, "" or "&..."), a label saying what it holds, and
    whether it overlaps the waterfall's rows ``shown_first`` to ``shown_last`` (places in the
    tree order; -1 when none are shown)."""
    items = []
    for cell in strip.cells:
        first_node, last_node = tree.order[cell.first][0], tree.order[cell.last][0]
        where = (
            f"node {cell.first + 1:,} ({first_node})"
            if cell.nodes == 1
            else f"nodes {cell.first + 1:,} to {cell.last + 1:,} ({first_node} … {last_node})"
        )
        counts = [
            f"{n} {word}"
            for n, word in (
                (cell.failed, "failed"),
                (cell.retried, "retried"),
                (cell.running, "running"),
            )
            if n
        ]
        label = f"{where}: " + (", ".join(counts) if counts else "all ok")
        href = "?" + step_query(cell.target.node_id, cell.target.attempt) + keep
        items.append(
            {
                "href": href,
                "css": f"ov-cell ov-{cell.mark}",
                "label": label,
                "in_view": shown_first >= 0
                and cell.first <= shown_last
                and cell.last >= shown_first,
            }
        )
    return items


def outline(strip: Overview, shown_first: int, shown_last: int) -> str:
    """The CSS position (left and width, percent of the strip) of the cells holding the rows
    shown (places ``shown_first`` to ``shown_last`` of the tree order; -1: none shown)."""
    if not strip.cells or shown_first < 0:
        return "display:none"
    first, last = shown_first // strip.per_cell, shown_last // strip.per_cell
    cells = len(strip.cells)
    return f"left:{first / cells * 100:.3f}%;width:{(last - first + 1) / cells * 100:.3f}%"
