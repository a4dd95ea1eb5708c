from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self):
        # The Celery app lives here rather than in traceviz/__init__.py so that importing the
        # traceviz package (for traceviz.client) never pulls in Celery or Django.
        import traceviz.celery  # noqa: F401
