"""Production settings (docs/architecture.md): ``manage.py check --deploy`` is clean with
the production environment, and the Content Security Policy allows no inline or eval script."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.factories import event, finished, started, store, user
from traceviz import settings as project_settings

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "DEBUG": "false",
    "SECRET_KEY": secrets.token_urlsafe(64),
    "ALLOWED_HOSTS": "traceviz.example.com",
    "SECURE_SSL_REDIRECT": "true",
    "SESSION_COOKIE_SECURE": "true",
    "CSRF_COOKIE_SECURE": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO=https",
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    # The browser tests' conftest sets this for Playwright; a deployment never would.
    inherited = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**inherited, "DJANGO_SETTINGS_MODULE": "traceviz.settings", **env},
    )


def test_check_deploy_is_clean_with_production_settings():
    done = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION_ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


EXAMPLE_ENV = ROOT / "deploy" / "traceviz.env.example"
SETTING_NAME = re.compile(r"^#? ?([A-Z][A-Z0-9_]*)=", re.MULTILINE)


def example_env() -> dict[str, str]:
    """The example file's uncommented NAME=value lines."""
    lines = EXAMPLE_ENV.read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if line and not line.startswith("#")]
    return {name: value for name, value in pairs}


def test_the_example_env_names_every_setting():
    read = set(
        re.findall(r'env_\w+\(\s*"([A-Z][A-Z0-9_]*)"', (ROOT / "traceviz/settings.py").read_text())
    )
    named = set(SETTING_NAME.findall(EXAMPLE_ENV.read_text()))
    assert len(read) > 40
    assert sorted(read - named) == [], "add these settings to deploy/traceviz.env.example"
    assert sorted(named - read) == [], "the example names settings traceviz does not read"


def test_check_deploy_is_clean_with_the_example_env_and_a_real_key():
    env = example_env() | {"SECRET_KEY": secrets.token_urlsafe(64)}
    done = manage("check", "--deploy", "--fail-level", "WARNING", **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_the_example_env_placeholder_key_does_not_pass():
    done = manage("check", "--deploy", "--fail-level", "WARNING", **example_env())
    assert done.returncode != 0
    assert "security.W009" in done.stderr


def test_check_deploy_warns_with_development_defaults():
    """The check is not vacuous: the plain-HTTP defaults do not pass it."""
    env = {name: "" for name in PRODUCTION_ENV} | {"DEBUG": "false"}
    done = manage("check", "--deploy", "--fail-level", "WARNING", **env)
    assert done.returncode != 0
    assert "security.W004" in done.stderr  # no HSTS
    assert "security.W012" in done.stderr  # session cookie not secure


def serve_once(code: str = "import traceviz.wsgi, traceviz.asgi", **env: str):
    """Load the WSGI application as gunicorn (and runserver) do, then exit."""
    inherited = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**inherited, "DJANGO_SETTINGS_MODULE": "traceviz.settings", **env},
    )


def test_production_refuses_to_serve_with_the_built_in_secret_key():
    done = serve_once(DEBUG="false", SECRET_KEY="")
    assert done.returncode != 0
    assert "SECRET_KEY" in done.stderr and "ImproperlyConfigured" in done.stderr


def test_development_and_a_real_key_serve():
    assert serve_once(DEBUG="true", SECRET_KEY="").returncode == 0
    done = serve_once(DEBUG="false", SECRET_KEY=secrets.token_urlsafe(64))
    assert done.returncode == 0, done.stderr


def test_the_wsgi_application_loads_views_and_prices_before_the_first_request():
    loaded = (
        "import sys, traceviz.wsgi; print('jobs.web.otlp' in sys.modules, "
        "'genai_prices.data' in sys.modules)"
    )
    done = serve_once(loaded, DEBUG="true", SECRET_KEY="")
    assert done.stdout.split() == ["True", "True"], done.stderr


def test_the_wsgi_application_freezes_what_it_loaded_out_of_the_collectors_reach():
    frozen = "import gc, traceviz.wsgi; print(gc.get_freeze_count() > 10_000)"
    done = serve_once(frozen, DEBUG="true", SECRET_KEY="")
    assert done.stdout.split() == ["True"], done.stderr


def test_postgresql_connections_run_without_jit_or_parallel_workers(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from traceviz.settings import database

    url = "postgres://postgres@127.0.0.1:5432/traceviz"
    serial = "-c max_parallel_workers_per_gather=0"
    assert database(url)["OPTIONS"]["options"] == f"-c jit=off {serial}"
    monkeypatch.setenv("DATABASE_JIT", "true")
    monkeypatch.setenv("DATABASE_PARALLEL_WORKERS", "2")
    assert database(url)["OPTIONS"]["options"] == "-c jit=on -c max_parallel_workers_per_gather=2"
    monkeypatch.setenv("DATABASE_PARALLEL_WORKERS", "two")
    with pytest.raises(ImproperlyConfigured, match="DATABASE_PARALLEL_WORKERS must be an integer"):
        database(url)
    assert "options" not in database("sqlite:///x.sqlite3")["OPTIONS"]


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_database_connection_has_jit_and_parallel_workers_off():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone() == ("off",)
        cursor.execute("SHOW max_parallel_workers_per_gather")
        assert cursor.fetchone() == ("0",)


def test_check_deploy_fails_on_the_built_in_secret_key():
    done = manage("check", "--deploy", **{**PRODUCTION_ENV, "SECRET_KEY": ""})
    assert done.returncode != 0
    assert "traceviz.E001" in done.stderr


@pytest.mark.parametrize("raw", ["X_FORWARDED_PROTO=https", "HTTP_X_FORWARDED_PROTO", "=https"])
def test_a_malformed_proxy_ssl_header_is_refused(monkeypatch, raw):
    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", raw)
    with pytest.raises(ImproperlyConfigured):
        project_settings.env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER")


def test_the_proxy_ssl_header_is_opt_in(monkeypatch):
    monkeypatch.delenv("SECURE_PROXY_SSL_HEADER", raising=False)
    assert project_settings.env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER") is None
    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", "HTTP_X_FORWARDED_PROTO=https")
    assert project_settings.env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER") == (
        "HTTP_X_FORWARDED_PROTO",
        "https",
    )


def directives(header: str) -> dict[str, list[str]]:
    parsed = {}
    for part in header.split(";"):
        name, *values = part.split()
        parsed[name] = values
    return parsed


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/jobs/csp-job/",
        "/jobs/csp-job/?step=n1:1",
        "/escalations/",
        "/dashboard/",
        "/accounts/login/",
    ],
)
def test_pages_carry_a_csp_without_inline_or_eval_script(client, settings, path):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    store(
        [
            event("job_started", "csp-job", 0),
            started("n1", "csp-job", 1),
            finished("n1", "permanent_failure", "csp-job", 2),
        ]
    )
    client.force_login(user("csp-viewer", "operator"))
    response = client.get(path)
    assert response.status_code == 200
    policy = directives(response["Content-Security-Policy"])
    script = policy.get("script-src", policy["default-src"])
    assert "'unsafe-inline'" not in script
    assert "'unsafe-eval'" not in script
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]


# --- the buffering proxy and the workers behind it ---------------------------------------------

NGINX_EXAMPLE = ROOT / "deploy" / "nginx.conf.example"
NGINX_SIZE = {"k": 1024, "m": 1024**2, "g": 1024**3}


def nginx_directives() -> dict[str, list[str]]:
    """The example's directives (comments left out): name -> the values it is given."""
    found: dict[str, list[str]] = {}
    for line in NGINX_EXAMPLE.read_text().splitlines():
        statement = line.split("#", 1)[0].strip()
        if statement.endswith(";"):
            name, _, value = statement[:-1].partition(" ")
            found.setdefault(name, []).append(value.strip())
    return found


def seconds(value: str) -> int:
    return int(value.removesuffix("s"))


def gunicorn_config(**env: str) -> dict:
    import runpy

    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        return runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))


def test_nginx_reads_every_request_whole_before_gunicorn_sees_it():
    nginx = nginx_directives()
    assert nginx["proxy_request_buffering"] == ["on"]
    assert nginx["proxy_buffering"] == ["on"]
    # A client that stalls while sending headers or its body is dropped by nginx, not waited on.
    assert 0 < seconds(nginx["client_header_timeout"][0]) <= 30
    assert 0 < seconds(nginx["client_body_timeout"][0]) <= 30


def test_nginx_admits_the_largest_body_traceviz_accepts_and_little_more():
    size = nginx_directives()["client_max_body_size"][0]
    allowed = int(size[:-1]) * NGINX_SIZE[size[-1].lower()]
    limit = int(example_env()["TRACEVIZ_MAX_BODY_BYTES"])
    # A little above it, so a body just over the limit gets traceviz's own 413 and message.
    assert limit <= allowed <= limit * 1.25


def test_nginx_waits_on_gunicorn_as_long_as_gunicorn_lets_a_request_run():
    timeout = gunicorn_config()["timeout"]
    assert seconds(nginx_directives()["proxy_read_timeout"][0]) >= timeout


def test_gunicorn_defaults_to_sync_workers_on_the_loopback_behind_the_proxy():
    config = gunicorn_config()
    assert (config["worker_class"], config["threads"]) == ("sync", 1)
    assert config["bind"].startswith("127.0.0.1:")
    assert config["body_timeout"] <= seconds(nginx_directives()["client_body_timeout"][0])


def test_gunicorn_exposed_directly_runs_threads_that_free_a_slow_client():
    config = gunicorn_config(GUNICORN_WORKER_CLASS="gthread")
    assert (config["worker_class"], config["threads"]) == ("gthread", 8)


def test_a_request_whose_body_stops_arriving_times_out():
    import socket
    from types import SimpleNamespace

    from gunicorn.http.unreader import SocketUnreader

    config = gunicorn_config(GUNICORN_BODY_TIMEOUT="7")
    ours, theirs = socket.socketpair()
    with ours, theirs:
        config["pre_request"](None, SimpleNamespace(unreader=SocketUnreader(ours)))
        assert ours.gettimeout() == 7


def test_sync_workers_on_a_public_address_are_warned_about():
    from types import SimpleNamespace
    from unittest import mock

    config = gunicorn_config()
    for bind, warned in ((["0.0.0.0:8000"], True), (["127.0.0.1:8000"], False)):
        log = mock.Mock()
        server = SimpleNamespace(cfg=SimpleNamespace(bind=bind, worker_class_str="sync"), log=log)
        config["on_starting"](server)
        assert log.warning.called == warned, bind


def test_a_body_that_stops_arriving_is_a_408(client, ingest_token):
    import io

    class Stalled(io.RawIOBase):
        def readinto(self, buffer):
            raise TimeoutError("timed out")

    response = client.post(
        "/api/v1/events",
        b"",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
        CONTENT_LENGTH="100",
        **{"wsgi.input": Stalled()},
    )
    assert response.status_code == 408
    assert "stopped arriving" in response.json()["error"]
