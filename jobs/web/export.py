"""A job's stored events, for engineers: NDJSON (one event a line) or one JSON array, in event
order, as the event contract describes them."""

import json

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from jobs.models import Event
from jobs.web import access
from jobs.web.access import get_job_for_user


def _export(request, job_id: str, as_ndjson: bool) -> HttpResponse:
    job = get_job_for_user(request, job_id, need=access.can_see_raw_events)
    rows = Event.objects.filter(job_id=job.job_id).in_event_order()
    items = [row.as_contract_dict() for row in rows.iterator(chunk_size=5000)]
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in job.job_id)[:100]
    if as_ndjson:
        body = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items)
        response = HttpResponse(body, content_type="application/x-ndjson; charset=utf-8")
        extension = "ndjson"
    else:
        body = json.dumps(items, ensure_ascii=False, indent=2)
        response = HttpResponse(body, content_type="application/json; charset=utf-8")
        extension = "json"
    response["Content-Disposition"] = f'attachment; filename="{safe_name}.{extension}"'
    return response


@require_GET
@login_required
@access.follows_job_aliases("jobs:job-events-ndjson")
def job_events_ndjson(request, job_id: str):
    """The job's stored events in event order, one JSON object a line (engineers, staff)."""
    return _export(request, job_id, as_ndjson=True)


@require_GET
@login_required
@access.follows_job_aliases("jobs:job-events-json")
def job_events_json(request, job_id: str):
    """The job's stored events in event order as one JSON array (engineers, staff)."""
    return _export(request, job_id, as_ndjson=False)
