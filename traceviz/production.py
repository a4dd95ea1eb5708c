"""What production refuses: serving with DEBUG off and the built-in SECRET_KEY (sessions, CSRF
tokens and password-reset links signed with a key published in the repository)."""

from django.core.exceptions import ImproperlyConfigured

# The embedded default's key, for `make run` and tests; never for a served site.
EMBEDDED_SECRET_KEY = "traceviz-embedded-default-key-not-for-production-use-0123456789"
PROBLEM = (
    "SECRET_KEY is traceviz's built-in development key and DEBUG is off: set SECRET_KEY to a "
    "long random value (python -c 'import secrets; print(secrets.token_urlsafe(64))')"
)


def uses_embedded_key_in_production(settings) -> bool:
    return not settings.DEBUG and settings.SECRET_KEY == EMBEDDED_SECRET_KEY


def refuse_embedded_secret_key() -> None:
    """Called by wsgi.py and asgi.py, so gunicorn and runserver never start serving with it."""
    from django.conf import settings

    if uses_embedded_key_in_production(settings):
        raise ImproperlyConfigured(PROBLEM)


def check_secret_key(app_configs, **kwargs) -> list:
    """``manage.py check --deploy``: an error for the built-in key."""
    from django.conf import settings
    from django.core import checks

    if uses_embedded_key_in_production(settings):
        return [checks.Error(PROBLEM, id="traceviz.E001")]
    return []
