"""traceviz settings: everything comes from the environment, with a working embedded default.

The embedded default is a SQLite file and eager Celery, so ``make run`` needs nothing installed.
``DATABASE_URL`` points at PostgreSQL and ``CELERY_BROKER_URL`` at Redis in production and CI.
"""

import ipaddress
import os
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from traceviz.production import EMBEDDED_SECRET_KEY

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    """The variable's value; unset or empty gives the default (as ``NAME= make run`` means)."""
    return os.environ.get(name) or default


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def env_int(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)
# Unset: the built-in development key, which commands and tests may use but a server with
# DEBUG off refuses (traceviz/production.py, called by wsgi.py and asgi.py).
SECRET_KEY = env_str("SECRET_KEY", "") or EMBEDDED_SECRET_KEY
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # runserver (make run) leaves /static/ to whitenoise, so it is compressed there too.
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "csp",
    "axes",
    "jobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Every answer after whitenoise's static files: private, no-store.
    "traceviz.cache_control.PrivateNoStoreMiddleware",
    # A cookie holding a NUL is dropped before the session and CSRF middleware read it.
    "traceviz.bad_requests.NulInCookiesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "traceviz.routers.ReplicaReadsMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
    # A lost database answers 503 with Retry-After (views; handler500 covers the rest).
    "traceviz.outage.DatabaseOutageMiddleware",
    "traceviz.bad_requests.NulInRequestMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the lockout response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "traceviz.urls"
WSGI_APPLICATION = "traceviz.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "jobs.web.context_processors.firing_alerts",
                "jobs.web.context_processors.saved_view_here",
            ],
        },
    },
]


def database(url: str) -> dj_database_url.DBConfig:
    """A DATABASES entry for ``url``, with the options traceviz runs each engine with."""
    config = dj_database_url.parse(
        url, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60), conn_health_checks=True
    )
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # IMMEDIATE takes the write lock when a transaction starts, so two ingest requests queue
        # instead of failing halfway; WAL lets pages read while a batch is written.
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        config["CONN_MAX_AGE"] = 0
    else:
        jit = "on" if env_bool("DATABASE_JIT", False) else "off"
        parallel_workers = env_int("DATABASE_PARALLEL_WORKERS", 0)
        config.setdefault("OPTIONS", {}).update(
            connect_timeout=env_int("DATABASE_CONNECT_TIMEOUT", 5, minimum=1),
            # Ingest writes wide multi-row statements; binding on the server skips quoting every
            # value in Python, which dominated ingest time with client-side binding.
            server_side_binding=env_bool("DATABASE_SERVER_SIDE_BINDING", True),
            # No JIT compilation: traceviz's queries are short walks of indexes, and compiling
            # one the planner costs high (a capped count over 10M events) took many times
            # longer than running it (bench/README.md, "Measurements behind the code").
            # DATABASE_JIT=on restores it. No parallel workers by default either: the
            # dashboard's statements hold parts a one-time filter skips (a compiled day), and
            # PostgreSQL started two workers for each of them anyway, slower than serial.
            # DATABASE_PARALLEL_WORKERS sets max_parallel_workers_per_gather.
            options=f"-c jit={jit} -c max_parallel_workers_per_gather={parallel_workers}",
        )
    return config


DATABASES = {"default": database(env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"))}
# An optional read replica of the PostgreSQL primary (streaming replication): pages and the read
# API read from it, ingest and actions never do (traceviz/routers.py).
if replica_url := env_str("DATABASE_REPLICA_URL", ""):
    DATABASES["replica"] = database(replica_url)
TRACEVIZ_READ_REPLICA = "replica" if "replica" in DATABASES else ""
# After a browser changes something, it reads the primary this long (the replica may lag).
TRACEVIZ_REPLICA_PIN_SECONDS = env_int("TRACEVIZ_REPLICA_PIN_SECONDS", 10)
DATABASE_ROUTERS = ["traceviz.routers.ReplicaRouter"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# django-axes' backend first: it refuses a locked-out address before a password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en"
USE_I18N = False
USE_TZ = True
TIME_ZONE = "UTC"
# The viewer's time zone for pages (offset always shown); an IANA name such as Europe/Berlin.
TRACEVIZ_DISPLAY_TIME_ZONE = env_str("TRACEVIZ_DISPLAY_TIME_ZONE", "UTC")

STATIC_URL = "/static/"
# plotly.js is the "basic" bundle (bar, scatter, pie: every chart traceviz draws) of the same
# version as the plotly wheel's full copy (static/vendor/plotly, checked by a unit test): a
# quarter of the full bundle's size.
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
# collectstatic (deploys, `make run`) writes content-hashed names (cached for good) and gzip
# copies whitenoise serves. With DEBUG on and no collectstatic the finders serve the source
# files; the test suite serves them unhashed (tests/conftest.py).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Ingest accepts bodies up to TRACEVIZ_MAX_BODY_BYTES; its views read the raw stream themselves
# (request.read, never request.body), so Django's form upload limit, DATA_UPLOAD_MAX_MEMORY_SIZE,
# keeps its default (2.5 MB) for every other view.
TRACEVIZ_MAX_BODY_BYTES = env_int("TRACEVIZ_MAX_BODY_BYTES", 10 * 1024 * 1024, minimum=1024)
TRACEVIZ_MAX_BATCH_EVENTS = env_int("TRACEVIZ_MAX_BATCH_EVENTS", 10_000, minimum=1)
TRACEVIZ_PREVIEW_CHARS = env_int("TRACEVIZ_PREVIEW_CHARS", 512, minimum=16)
TRACEVIZ_MAX_RETRIES = env_int("TRACEVIZ_MAX_RETRIES", 5, minimum=0)
TRACEVIZ_REPAIR_BUDGET = env_int("TRACEVIZ_REPAIR_BUDGET", 3, minimum=0)
TRACEVIZ_STALL_AFTER = timedelta(seconds=env_int("TRACEVIZ_STALL_AFTER", 30 * 60, minimum=1))
TRACEVIZ_RETENTION_DAYS = env_int("TRACEVIZ_RETENTION_DAYS", 0)  # 0 keeps everything
TRACEVIZ_JOBS_PAGE_SIZE = env_int("TRACEVIZ_JOBS_PAGE_SIZE", 50, minimum=1)
# The largest ``limit`` GET /api/v1/jobs takes (the API document states it).
TRACEVIZ_API_MAX_PAGE_SIZE = env_int("TRACEVIZ_API_MAX_PAGE_SIZE", 500, minimum=1)
# Requests per minute per ingest token (0: unlimited).
TRACEVIZ_INGEST_RATE_LIMIT = env_int("TRACEVIZ_INGEST_RATE_LIMIT", 6000)


def env_networks(name: str, default: list[str]) -> list:
    """A comma-separated list of IP addresses or CIDR networks."""
    try:
        return [ipaddress.ip_network(item) for item in env_list(name, default)]
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}: {error}") from None


# The reverse proxies (addresses or networks) whose X-Forwarded-For is believed: the client
# address of sign-in limits and the /metrics allow-list. Empty: the peer is the client.
TRACEVIZ_TRUSTED_PROXIES = env_list("TRACEVIZ_TRUSTED_PROXIES", [])
TRACEVIZ_TRUSTED_PROXY_NETWORKS = env_networks("TRACEVIZ_TRUSTED_PROXIES", [])

# Sign-in limits (site and admin login) by django-axes, per real client address: after
# TRACEVIZ_LOGIN_FAILURE_LIMIT failed sign-ins the address is locked out (429) for
# TRACEVIZ_LOGIN_LOCKOUT_SECONDS, counted from its latest failure.
AXES_FAILURE_LIMIT = env_int("TRACEVIZ_LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("TRACEVIZ_LOGIN_LOCKOUT_SECONDS", 300, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
AXES_CLIENT_IP_CALLABLE = "jobs.web.client_address.client_address"
AXES_LOCKOUT_CALLABLE = "jobs.web.auth.locked_out"
AXES_USERNAME_CALLABLE = "jobs.web.auth.attempted_username"
AXES_HTTP_RESPONSE_CODE = 429
AXES_VERBOSE = False
# Sign-in logs (django-axes' access log, shown in the admin) are kept this many days.
TRACEVIZ_LOGIN_LOG_DAYS = env_int("TRACEVIZ_LOGIN_LOG_DAYS", 90, minimum=1)


def env_http_url(name: str, default: str) -> str:
    """An http or https URL (or empty when the default is)."""
    raw = env_str(name, default).strip()
    if raw and urlsplit(raw).scheme.lower() not in ("http", "https"):
        raise ImproperlyConfigured(f"{name} must be an http or https URL, got {raw!r}")
    return raw


# Escalation webhook (http or https; redirects are never followed).
TRACEVIZ_ESCALATION_WEBHOOK_URL = env_http_url("TRACEVIZ_ESCALATION_WEBHOOK_URL", "")
# Where people reach this site: links in notifications (email, webhook) are built on it.
TRACEVIZ_SITE_URL = env_http_url("TRACEVIZ_SITE_URL", "http://127.0.0.1:8000")
TRACEVIZ_ESCALATION_EMAILS = env_list("TRACEVIZ_ESCALATION_EMAILS", [])
# /metrics: a bearer token, or client addresses (IPs or CIDR networks), or a staff session.
TRACEVIZ_METRICS_TOKEN = env_str("TRACEVIZ_METRICS_TOKEN", "")
TRACEVIZ_METRICS_ALLOW = env_list("TRACEVIZ_METRICS_ALLOW", ["127.0.0.1", "::1"])
TRACEVIZ_METRICS_ALLOW_NETWORKS = env_networks("TRACEVIZ_METRICS_ALLOW", ["127.0.0.1", "::1"])
# Series per metric whose labels producers choose (planner provider/model): the busiest ones,
# the rest summed under "other".
TRACEVIZ_METRICS_MAX_SERIES = env_int("TRACEVIZ_METRICS_MAX_SERIES", 50, minimum=1)
# Escalation queue: an unresolved escalation open longer than this is highlighted.
TRACEVIZ_ESCALATION_AGE_TARGET = timedelta(
    seconds=env_int("TRACEVIZ_ESCALATION_AGE_TARGET", 4 * 3600, minimum=1)
)
# Outbox delivery: attempts per notification (backoff 1 s doubling to 5 min, 0-30 % jitter),
# the webhook's timeout, and how long a "sending" claim lasts before another worker may retake
# it (longer than one delivery can take).
TRACEVIZ_NOTIFY_MAX_ATTEMPTS = env_int("TRACEVIZ_NOTIFY_MAX_ATTEMPTS", 8, minimum=1)
TRACEVIZ_WEBHOOK_TIMEOUT = env_int("TRACEVIZ_WEBHOOK_TIMEOUT", 10, minimum=1)
TRACEVIZ_NOTIFY_LEASE = timedelta(seconds=env_int("TRACEVIZ_NOTIFY_LEASE", 120, minimum=10))

# Celery: no broker configured means tasks run eagerly in-process (the embedded default).
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Redis redelivers a message not acked within the visibility timeout. With acks_late a task is
# acked when it ends, and a delivery retry waits up to 6.5 min (5 min cap + 30 % jitter) as a
# countdown held by the worker: one hour covers both with room to spare.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
# Periodic tasks (run `celery -A traceviz beat`): the outbox sweep re-sends what a broker outage
# or a dead worker left pending, the stall check opens `stalled` escalations, retention trims
# old data in bounded batches (a no-op while TRACEVIZ_RETENTION_DAYS is 0).
CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "sweep-outbox": {"task": "jobs.tasks.sweep_outbox", "schedule": 60.0},
    "check-stalls": {"task": "jobs.tasks.check_stalls", "schedule": 60.0},
    "apply-retention": {"task": "jobs.tasks.apply_retention", "schedule": 3600.0},
    # Alert rules (dashboard work): firing and resolving episodes, each minute.
    "evaluate-alerts": {"task": "jobs.tasks.evaluate_alerts", "schedule": 60.0},
    # Failure groups ignored for a time that has passed are unresolved again.
    "lapse-group-ignores": {"task": "jobs.tasks.lapse_group_ignores", "schedule": 60.0},
    # Dashboard rollup: recompute the hours ingest marked dirty, each minute.
    "refresh-dashboard-rollup": {"task": "jobs.tasks.refresh_dashboard_rollup", "schedule": 60.0},
    # Ended rate-limit windows, expired sign-in failures, old sign-in logs.
    "prune-rate-limits": {"task": "jobs.tasks.prune_rate_limits", "schedule": 3600.0},
}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "traceviz@localhost")


def env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """``HTTP_X_FORWARDED_PROTO=https`` -> the (META key, value) pair Django reads; unset: None.
    Only set it behind a proxy that always sets (or strips) that header."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    header, sep, value = raw.partition("=")
    if not sep or not header.startswith("HTTP_") or not value:
        raise ImproperlyConfigured(
            f"{name} must look like HTTP_X_FORWARDED_PROTO=https, got {raw!r}"
        )
    return header, value


# Production over HTTPS: with these set, manage.py check --deploy is clean (the environment
# is in tests/integration/test_deploy_settings.py). The defaults suit plain-HTTP local runs.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# No inline or eval script anywhere; plotly.js injects <style> elements, hence 'unsafe-inline'
# for styles only.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "WARNING")},
}
