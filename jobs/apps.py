from django.apps import AppConfig
from django.core import checks
from django.db.backends.signals import connection_created


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self):
        # The Celery app lives here rather than in traceviz/__init__.py so that importing the
        # traceviz package never pulls in Celery.
        # Register the tasks in every process: the domain enqueues them by name (the outbox's
        # deliver_after_commit), and a name resolves to the task (eager without a broker)
        # only once its module has been imported.
        import jobs.tasks  # noqa: F401
        import traceviz.celery  # noqa: F401
        from jobs.ingest import database
        from traceviz.production import check_secret_key

        checks.register(check_secret_key, checks.Tags.security, deploy=True)
        # Every connection to PostgreSQL reads timestamps faster than Django's loader does.
        connection_created.connect(database.read_timestamps_fast)
