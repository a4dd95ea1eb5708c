"""traceviz: trace viewer and operations dashboard for step-based jobs.

Kept import-light on purpose: producers import ``traceviz.client`` without Django or Celery.
"""
