"""traceviz: trace viewer and operations dashboard for step-based jobs.

Producers send events with the client, its own distribution (``traceviz-client`` in client/).
"""
