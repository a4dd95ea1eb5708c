"""Who may do what: roles, producers' ingest tokens and users' saved views."""

import hashlib
import hmac
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

TOKEN_PREFIX_CHARS = 8


class Role(models.TextChoices):
    """The groups that grant access (docs/architecture.md); migration 0002 creates them."""

    OPERATOR = "operator"
    SUPPORT = "support"
    ENGINEER = "engineer"


class IngestToken(models.Model):
    """A producer's bearer token, stored hashed; the clear token is shown once at creation."""

    name = models.CharField(max_length=200, unique=True)
    prefix = models.CharField(max_length=TOKEN_PREFIX_CHARS, db_index=True)
    token_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Requests per minute; None means settings.TRACEVIZ_INGEST_RATE_LIMIT.
    rate_limit_per_minute = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self):
        return self.name

    @staticmethod
    def hash(raw: str) -> str:
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def set_new_secret(self) -> str:
        """Give this (unsaved) token a fresh secret; returns it in clear, never stored."""
        raw = "tvz_" + secrets.token_urlsafe(32)
        self.prefix = raw[:TOKEN_PREFIX_CHARS]
        self.token_hash = self.hash(raw)
        return raw

    @classmethod
    def issue(cls, name: str) -> tuple["IngestToken", str]:
        """Create a token; returns the row and the clear token, which is never stored."""
        token = cls(name=name)
        raw = token.set_new_secret()
        token.save()
        return token, raw

    @classmethod
    def authenticate(cls, raw: str) -> "IngestToken | None":
        """The live token matching ``raw``, compared in constant time, or None."""
        digest = cls.hash(raw)
        candidates = cls.objects.filter(prefix=raw[:TOKEN_PREFIX_CHARS], revoked_at__isnull=True)
        for token in candidates:
            if hmac.compare_digest(token.token_hash, digest):
                return token
        return None


class SavedView(models.Model):
    """A user's named filters of a list page: the page's path and its query string. Its URL
    (``/views/<id>/``) is a share link: it opens the same filters for anyone who may see the
    page; only its owner deletes it."""

    class Page(models.TextChoices):
        JOBS = "/", "Jobs"
        FAILURES = "/failures/", "Failures"
        ESCALATIONS = "/escalations/", "Escalations"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views"
    )
    name = models.CharField(max_length=100)
    path = models.CharField(max_length=32, choices=Page.choices)
    query = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # One view per name and owner; its index serves the navigation's list of a
            # user's views.
            models.UniqueConstraint(fields=["owner", "name"], name="saved_view_owner_name"),
        ]

    def __str__(self):
        return f"{self.name} ({self.path})"

    @property
    def target_url(self) -> str:
        """The page with the saved filters."""
        return self.path + (f"?{self.query}" if self.query else "")
