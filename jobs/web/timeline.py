"""Pure layout helpers for the job page: the waterfall, the resume preview and the arguments
diff. Steps in, plain data out; no ORM, so they are tested without a database.

A "step" here is anything with Step's attributes (a model row or ``replay.StepState``).
"""

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from html import escape
from typing import Any

from django.utils.safestring import mark_safe

from jobs.replay.failures import ResultType
from jobs.web.narrative import format_duration_ms
from jobs.web.rendering import step_query

MIN_BAR_PERCENT = 0.4


@dataclass(slots=True)
class Bar:
    step: Any
    left: float
    width: float
    label: str


@dataclass(slots=True)
class Gap:
    """Time between one attempt's end and the next attempt's start (backoff)."""

    left: float
    width: float
    label: str


@dataclass(slots=True)
class WaterfallRow:
    node_id: str
    depth: int
    bars: list[Bar] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    parent_node_id: str = ""
    # The row's place in the whole tree order (``NodeTree.order``), and how many nodes its
    # subtree holds below it (0: a leaf, no collapse toggle).
    index: int = 0
    descendants: int = 0
    collapsed: bool = False

    @property
    def indent_rem(self) -> float:
        return min(self.depth, 8) * 0.9


@dataclass(slots=True)
class Waterfall:
    rows: list[WaterfallRow]
    start: datetime | None
    end: datetime | None
    node_count: int = 0

    @property
    def total_label(self) -> str:
        if self.start is None or self.end is None:
            return ""
        return format_duration_ms((self.end - self.start).total_seconds() * 1000)


def _extent(step, now: datetime | None) -> tuple[datetime | None, datetime | None]:
    start, end = step.started_at, step.finished_at
    if start is not None and end is not None:
        return start, end  # the common case, first: a 10,000-step page calls this per step
    duration = timedelta(milliseconds=step.duration_ms) if step.duration_ms is not None else None
    start = step.started_at
    if start is None and step.finished_at is not None:
        start = step.finished_at - duration if duration else step.finished_at
    end = step.finished_at
    if end is None and start is not None:
        end = start + duration if duration else (now or start)
    return start, end


@dataclass(slots=True)
class NodeTree:
    """A job's nodes as the waterfall nests them: each node's steps (in position order), its
    parent node, and the depth-first ``order`` of every node once, as (node_id, depth)."""

    by_node: dict[str, list]
    parents: dict[str, str]
    order: list[tuple[str, int]]
    index: dict[str, int]
    descendants: list[int]

    def rows(
        self, shown: set[str] | None = None, collapsed: frozenset[str] = frozenset()
    ) -> list[int]:
        """The places in ``order`` the waterfall lists: the nodes in ``shown`` (every node when
        None) outside the subtrees of ``collapsed`` nodes (a collapsed node itself stays)."""
        listed = []
        skip_to = 0
        for place, (node_id, _depth) in enumerate(self.order):
            if place < skip_to:
                continue
            if shown is None or node_id in shown:
                listed.append(place)
            if node_id in collapsed:
                skip_to = place + 1 + self.descendants[place]
        return listed


def node_tree(steps: list) -> NodeTree:
    """``steps`` (any order) as a NodeTree: one pass, the whole order (a 10,000-node job's
    takes a few milliseconds)."""
    by_node: dict[str, list] = {}
    for step in steps:
        by_node.setdefault(step.node_id, []).append(step)
    for node_steps in by_node.values():
        if len(node_steps) > 1:
            node_steps.sort(key=lambda s: s.position)
    parents = _parents(by_node)
    order = _tree_order(list(by_node), parents)
    # A node's subtree is the run of deeper rows right after it in depth-first order.
    descendants = [0] * len(order)
    open_rows: list[int] = []
    for place, (_node, depth) in enumerate(order):
        while open_rows and order[open_rows[-1]][1] >= depth:
            closed = open_rows.pop()
            descendants[closed] = place - closed - 1
        open_rows.append(place)
    for closed in open_rows:
        descendants[closed] = len(order) - closed - 1
    index = {node_id: place for place, (node_id, _depth) in enumerate(order)}
    return NodeTree(by_node, parents, order, index, descendants)


def waterfall(
    steps: list,
    *,
    now: datetime | None = None,
    start: int = 0,
    stop: int | None = None,
    tree: NodeTree | None = None,
    listed: list[int] | None = None,
    collapsed: frozenset[str] = frozenset(),
) -> Waterfall:
    """One row per node, children under the node whose span is their parent_span_id, each
    attempt a bar positioned by time (percent of the job's span). ``listed``: the places of
    ``tree.order`` the waterfall lists (``NodeTree.rows``: filtered, collapsed subtrees left
    out), every node by default. Only listed rows ``start:stop`` get their bars computed (the
    page shows a window); the time scale and the tree use every step. ``node_count`` is the
    number of listed rows."""
    # The scale in one pass, keeping no per-step extent: a 10,000-step page shows 200 rows,
    # and 10,000 kept tuples only fed the garbage collector.
    t0 = t1 = None
    for step in steps:
        begin, end = _extent(step, now)
        if begin is not None and (t0 is None or begin < t0):
            t0 = begin
        if end is not None and (t1 is None or end > t1):
            t1 = end
    span_ms = max(((t1 - t0).total_seconds() * 1000) if t0 and t1 else 0, 1.0)

    def percent(moment: datetime) -> float:
        assert t0 is not None  # asked only of a step with a start, which set t0
        return round((moment - t0).total_seconds() * 1000 / span_ms * 100, 3)

    tree = tree if tree is not None else node_tree(steps)
    by_node, parents = tree.by_node, tree.parents
    places = listed if listed is not None else range(len(tree.order))
    rows: list[WaterfallRow] = []
    for place in places[start:stop]:
        node_id, depth = tree.order[place]
        row = WaterfallRow(
            node_id=node_id,
            depth=depth,
            parent_node_id=parents.get(node_id, ""),
            index=place,
            descendants=tree.descendants[place],
            collapsed=node_id in collapsed,
        )
        previous_end = None
        for step in sorted(by_node[node_id], key=lambda s: (s.attempt, s.position)):
            begin, end = _extent(step, now)
            if begin is None or end is None or t0 is None:  # a start gives an end
                continue
            left = min(percent(begin), 100 - MIN_BAR_PERCENT)
            width = min(max(percent(end) - left, MIN_BAR_PERCENT), 100 - left)
            row.bars.append(Bar(step, left, round(width, 3), _bar_label(step)))
            if previous_end is not None and begin > previous_end:
                gap_ms = (begin - previous_end).total_seconds() * 1000
                row.gaps.append(
                    Gap(
                        percent(previous_end),
                        percent(begin) - percent(previous_end),
                        f"waited {format_duration_ms(gap_ms)} before attempt {step.attempt}",
                    )
                )
            previous_end = end if previous_end is None else max(previous_end, end)
        rows.append(row)
    return Waterfall(rows=rows, start=t0, end=t1, node_count=len(places))


def step_duration_ms(step) -> float | None:
    """The attempt's duration: as the producer reported it, else from its start to its finish
    when both are known (a span's, or events that carry no ``duration_ms``); None otherwise."""
    if step.duration_ms is not None:
        return step.duration_ms
    if step.started_at and step.finished_at:
        return (step.finished_at - step.started_at).total_seconds() * 1000
    return None


def _bar_label(step) -> str:
    word = "ignored (stale) " + step.segment if step.ignored_stale else step.segment
    duration = format_duration_ms(step_duration_ms(step))
    return f"attempt {step.attempt}: {word}" + (f", {duration}" if duration else "")


def _parents(by_node: dict[str, list]) -> dict[str, str]:
    """node -> parent node, from parent_span_id -> the node owning that trace_span_id (the
    first node, in first-seen order, with a step of that span)."""
    owner: dict[str, str] = {}
    parent_spans: dict[str, str] = {}
    # Plain loops, no generator per node: a 10,000-node job walks these 10,000 times.
    for node_id, node_steps in by_node.items():
        for step in node_steps:
            span = step.trace_span_id
            if span and span not in owner:
                owner[span] = node_id
            if node_id not in parent_spans and step.parent_span_id:
                parent_spans[node_id] = step.parent_span_id
    parents = {}
    for node_id, parent_span in parent_spans.items():
        parent = owner.get(parent_span, "")
        if parent and parent != node_id:
            parents[node_id] = parent
    return parents


def _tree_order(nodes: list[str], parents: dict[str, str]) -> list[tuple[str, int]]:
    """Depth-first order of the node tree, siblings in first-seen order: every node once.
    Nodes caught in a parent cycle are shown as roots rather than dropped."""
    children: dict[str, list[str]] = {}
    for node, parent in parents.items():
        children.setdefault(parent, []).append(node)
    # ``parents`` is in first-seen order of its nodes, so each child list is too.
    order: list[tuple[str, int]] = []
    seen: set[str] = set()

    wanted = len(nodes)

    def visit(root: str) -> None:
        stack = [(root, 0)]
        while stack and len(order) < wanted:
            node, depth = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            order.append((node, depth))
            kids = children.get(node)
            if kids:
                below = depth + 1
                stack.extend([(child, below) for child in reversed(kids)])

    for node in nodes:
        if len(order) >= wanted:
            return order
        if node not in parents:
            visit(node)
    for node in nodes:
        if len(order) >= wanted:
            break
        if node not in seen:
            visit(node)
    return order


@dataclass(frozen=True, slots=True)
class ResumeNode:
    node_id: str
    last_result: str


@dataclass(frozen=True, slots=True)
class ResumePreview:
    """The step-result contract's replay rule made visible: a restart skips completed nodes,
    runs the rest."""

    skip: list[str]
    rerun: list[ResumeNode]


def resume_preview(completed_node_ids: list[str], steps: list) -> ResumePreview:
    completed = set(completed_node_ids)
    latest: dict[str, Any] = {}
    for step in steps:
        if step.node_id in completed:
            continue
        current = latest.get(step.node_id)
        if current is None or (step.ignored_stale is False or current.ignored_stale):
            latest[step.node_id] = step
    rerun = [ResumeNode(node, _resume_label(step)) for node, step in latest.items()]
    return ResumePreview(skip=list(completed_node_ids), rerun=rerun)


def _resume_label(step) -> str:
    if step.ignored_stale:
        return f"only a stale result (attempt {step.attempt}, ignored)"
    if not step.result_type:
        return f"attempt {step.attempt} still running"
    if step.result_type == ResultType.PERMANENT_FAILURE:
        return f"{step.result_type} at attempt {step.attempt}: must be fixed before it runs again"
    return f"{step.result_type} at attempt {step.attempt}"


@dataclass(frozen=True, slots=True)
class ArgumentRow:
    name: str
    expected: str
    actual: str
    status: str  # same, changed, missing (expected only), extra (actual only)

    @property
    def differs(self) -> bool:
        return self.status != "same"


_ABSENT = object()


def _show(value) -> str:
    if value is _ABSENT:
        return ""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def argument_diff(expected, actual) -> list[ArgumentRow]:
    """Expected vs actual arguments, key by key (top level), differences flagged. Values that
    are not objects compare as a whole under the name "(value)"."""
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        if expected is None and actual is None:
            return []
        status = "same" if expected == actual else "changed"
        missing = _ABSENT if expected is None else expected
        present = _ABSENT if actual is None else actual
        return [ArgumentRow("(value)", _show(missing), _show(present), status)]
    rows = []
    for name in list(expected) + [k for k in actual if k not in expected]:
        want = expected.get(name, _ABSENT)
        got = actual.get(name, _ABSENT)
        if want is _ABSENT:
            status = "extra"
        elif got is _ABSENT:
            status = "missing"
        else:
            status = "same" if want == got else "changed"
        rows.append(ArgumentRow(str(name), _show(want), _show(got), status))
    return rows


# A waterfall row's bars and gaps are joined into markup here: as two template loops per row
# they were most of a 10,000-step page's rendering (a loop costs more than the few tags it
# writes). Every value goes through html.escape (what Django's escape calls), so the joined
# markup is safe as a whole.


def _bar_html(bar: dict) -> str:
    css, href, label = escape(bar["css"]), escape(bar["href"]), escape(bar["label"])
    return (
        f'<a class="wf-bar {css}" style="{escape(bar["style"])}" href="{href}" hx-get="{href}" '
        f'tabindex="-1" title="{label}"><span class="visually-hidden">{label}</span></a>'
    )


def _word_html(bar: dict) -> str:
    segment = escape(bar["segment"])
    word = f"<s>{segment}</s>" if bar["stale"] else segment
    return f'<span class="seg-word {escape(bar["css"])}">{word}</span>'


def waterfall_item(row: WaterfallRow, toggle_href: str = "", selected_node: str = "") -> dict:
    """A waterfall row as the template shows it: its bars and gaps, and their markup;
    ``toggle_href`` collapses (or opens again) its subtree, ``selected_node`` marks the row of
    the step whose panel is open."""
    bars = [
        {
            "href": "?" + step_query(bar.step.node_id, bar.step.attempt),
            "style": f"left:{bar.left:.3f}%;width:{bar.width:.3f}%",
            "css": f"seg-{bar.step.segment}{' stale' if bar.step.ignored_stale else ''}",
            "label": f"{row.node_id} {bar.label}",
            "segment": bar.step.segment,
            "stale": bar.step.ignored_stale,
        }
        for bar in row.bars
    ]
    gaps = [
        {"style": f"left:{gap.left:.3f}%;width:{gap.width:.3f}%", "label": gap.label}
        for gap in row.gaps
    ]
    track = "".join(
        f'<span class="wf-gap" style="{escape(gap["style"])}" title="{escape(gap["label"])}">'
        "</span>"
        for gap in gaps
    ) + "".join(_bar_html(bar) for bar in bars)
    words = "".join(_word_html(bar) for bar in bars) + "".join(
        f'<span class="visually-hidden">, {escape(gap["label"])}</span>' for gap in gaps
    )
    return {
        "node_id": row.node_id,
        "depth": row.depth,
        "index": row.index,
        "descendants": row.descendants,
        "collapsed": row.collapsed,
        "toggle_href": toggle_href if row.descendants else "",
        "selected": row.node_id == selected_node,
        "title": row.node_id + (f" (child of {row.parent_node_id})" if row.parent_node_id else ""),
        "bars": bars,
        "gaps": gaps,
        "track": mark_safe(track),
        "words": mark_safe(words),
    }
