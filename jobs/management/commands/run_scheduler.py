import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections
from django.utils.module_loading import import_string

# Longest sleep between looks at the schedule, so a stop signal is answered quickly.
TICK_SECONDS = 1.0


class Command(BaseCommand):
    help = (
        "The embedded default's beat: run every periodic task of CELERY_BEAT_SCHEDULE in this "
        "process at its interval (each once at start), until stopped. `make run` starts it "
        "beside runserver. With a broker, run `celery -A traceviz beat` and a worker instead."
    )

    def handle(self, *args, **options):
        self.verbosity = options["verbosity"]
        if settings.CELERY_BROKER_URL:
            self.stdout.write(
                "CELERY_BROKER_URL is set: periodic tasks belong to celery beat and a worker "
                "(see README, Deploying); run_scheduler is for the embedded default."
            )
            return
        # A stop signal is noted, and honoured between tasks: raised inside a task, any code
        # there that catches broad exceptions would swallow it, and the scheduler run on.
        self.stopping = False
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        schedule = settings.CELERY_BEAT_SCHEDULE
        self.stdout.write(f"run_scheduler: {', '.join(schedule)}", ending="\n")
        self.stdout.flush()
        due = dict.fromkeys(schedule, time.monotonic())
        while not self.stopping:
            for name, entry in schedule.items():
                if due[name] <= time.monotonic() and not self.stopping:
                    self._run(name, entry["task"])
                    due[name] = time.monotonic() + float(entry["schedule"])
            if not self.stopping:
                time.sleep(max(0.0, min(TICK_SECONDS, min(due.values()) - time.monotonic())))
        self.stdout.write("run_scheduler: stopped")

    def _run(self, name: str, task_path: str) -> None:
        """Run one task here; a failing task is reported and tried again at its next time,
        never ends the scheduler."""
        close_old_connections()
        try:
            result = import_string(task_path).apply(throw=True).get()
        except Exception as error:  # a task's failure must not stop the others
            self.stderr.write(f"{name}: failed: {type(error).__name__}: {error}")
        else:
            # Quiet minutes stay quiet beside runserver's log; -v 2 shows every run.
            if self.verbosity >= 2 or _did_something(result):
                self.stdout.write(f"{name}: {result}")
        finally:
            close_old_connections()
        self.stdout.flush()

    def _stop(self, signum, frame):
        self.stopping = True


def _did_something(result) -> bool:
    if isinstance(result, dict):
        return any(result.values())
    return bool(result)
