"""Plotly figures as data: the one layout every dashboard chart starts from, and a figure with
its empty state. ``static/js/charts.js`` draws them (and escapes the producer text in them)."""


def layout(**extra) -> dict:
    """The shared layout (transparent, the page's font, legend above the plot, also for one
    trace: a lone red bar is named "failed"), with ``extra`` keys replacing its own."""
    base = {
        "showlegend": True,
        "margin": {"l": 56, "r": 16, "t": 36, "b": 72},
        "height": 340,
        "hovermode": "closest",
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": "system-ui, sans-serif", "size": 12},
    }
    return base | extra


def figure(data: list[dict], layout: dict, empty: str) -> dict:
    """A figure, or its empty state (``empty`` says what to send to see data)."""
    return {"data": data, "layout": layout, "empty": "" if data else empty}
