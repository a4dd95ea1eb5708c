"""Static files in production shape: collectstatic writes content-hashed names and gzip copies
whitenoise serves (the manifest storage), and pages link the hashed names."""

import gzip

import pytest
from django.core.management import call_command
from django.templatetags.static import static


@pytest.fixture
def collected(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    call_command("collectstatic", interactive=False, verbosity=0)
    return tmp_path


def test_collectstatic_writes_hashed_gzipped_plotly(collected):
    url = static("vendor/plotly/plotly-basic.min.js")
    assert url.startswith("/static/vendor/plotly/plotly-basic.min.") and url != (
        "/static/vendor/plotly/plotly-basic.min.js"
    )
    hashed = collected / url.removeprefix("/static/")
    compressed = hashed.with_name(hashed.name + ".gz")
    assert gzip.decompress(compressed.read_bytes()) == hashed.read_bytes()
    assert compressed.stat().st_size < 500_000 < hashed.stat().st_size


def test_dashboard_links_the_hashed_bundle(collected, client, db):
    from tests import factories

    client.force_login(factories.user("olga", "operator"))
    html = client.get("/dashboard/").content.decode()
    assert static("vendor/plotly/plotly-basic.min.js") in html
    assert 'plotly-basic.min.js"' not in html
