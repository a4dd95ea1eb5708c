"""GET /dashboard/: the operations dashboard (docs/architecture.md). Operators and up.

One view serves the page and, on an HTMX request that is not a history restore, the
``dashboard-panels`` partial (headline numbers, firing alerts, charts), which the filter form
and a periodic refresh swap in place.
"""

from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from jobs.dashboard import charts, headlines, llm_usage, provider_health
from jobs.dashboard.window import iso, parse_window, zone_label
from jobs.escalations import alerts
from jobs.web import access
from jobs.web.rendering import in_display_time_zone, wants_fragment

REFRESH_SECONDS = 60
RANGE_CHOICES = (("1h", "1 hour"), ("24h", "24 hours"), ("7d", "7 days"), ("custom", "Custom"))


@require_GET
@access.role_required(access.can_view)
@vary_on_headers("HX-Request")
@in_display_time_zone
def dashboard(request):
    now = timezone.now()
    window, errors = parse_window(request.GET, now)
    plan = window.plan()
    figures = {
        **charts.panels(window, now, plan),
        **llm_usage.panels(window, plan),
        "provider_failure_rate": provider_health.panel(window, plan),
    }
    context = {
        "nav": "dashboard",
        "window": window,
        "errors": errors,
        "range_choices": RANGE_CHOICES,
        "since_value": iso(window.start) if window.key == "custom" else "",
        "until_value": iso(window.end) if window.key == "custom" else "",
        "headlines": headlines.headlines(window, now, plan),
        "firing": list(alerts.firing_episodes()),
        "figures": figures,
        "unlisted_failure_codes": figures["failures_by_code"]["unlisted"],
        "zone": zone_label(),
        "refresh_seconds": REFRESH_SECONDS,
        "panels_url": request.get_full_path(),
    }
    template = "dashboard/index.html"
    if wants_fragment(request):
        template += "#dashboard-panels"
    return render(request, template, context)
