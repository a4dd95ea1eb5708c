import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

from jobs.replay.calls import cost_usd
from traceviz.production import refuse_embedded_secret_key

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")
application = get_wsgi_application()
refuse_embedded_secret_key()

# Load now what the first request would load (every view through the URLconf, and the LLM
# price table: a third of a second), so no producer's request waits for it; gunicorn's
# preload_app then shares it between the workers.
get_resolver().url_patterns  # noqa: B018
cost_usd("openai", "gpt-4o", 0, 0)

# What is loaded now lives as long as the process: collected once, then frozen out of the
# garbage collector's reach, so a full collection during a request walks only what requests
# made (bench/README.md, "Measurements behind the code"), and gunicorn's forked workers do not
# write to these shared pages when they collect.
gc.collect()
gc.freeze()
