"""The vendored plotly.js bundle: the "basic" build of the plotly wheel's own plotly.js version
(so figures follow the schema the wheel documents), and it draws every trace type we emit."""

import re
from pathlib import Path

import plotly

ROOT = Path(__file__).resolve().parents[2]
BASIC = ROOT / "static" / "vendor" / "plotly" / "plotly-basic.min.js"
WHEEL = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
# The traces plotly.js-basic registers (its README: scatter, bar and pie).
BASIC_TRACES = {"scatter", "bar", "pie"}
AXIS_TYPES = {"date", "log", "linear", "category", "multicategory"}


def header_version(path: Path) -> str:
    with path.open(encoding="utf-8") as file:
        head = file.read(300)
    return re.search(r"plotly\.js (?:\([^)]*\) )?v(\d+\.\d+\.\d+)", head).group(1)


def test_vendored_basic_bundle_is_the_wheels_plotly_js_version():
    assert header_version(BASIC) == header_version(WHEEL)


def test_every_trace_type_the_pages_draw_is_in_the_basic_bundle():
    sources = (ROOT / "jobs" / "dashboard").glob("*.py")
    used = {
        kind
        for source in sources
        for kind in re.findall(r'"type": "(\w+)"', source.read_text(encoding="utf-8"))
    }
    assert used - AXIS_TYPES
    assert used - AXIS_TYPES <= BASIC_TRACES
