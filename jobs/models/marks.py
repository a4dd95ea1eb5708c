"""Where each job's projection stands against its appended events (docs/architecture.md,
"Data flow"): the dirty marks that the append writes and the projector clears."""

from django.db import models
from django.db.models import F, Q


class ProjectionMarkQuerySet(models.QuerySet):
    def dirty(self) -> "ProjectionMarkQuerySet":
        """The marks of jobs with appended events not yet folded into their rows."""
        return self.filter(generation__gt=F("projected"))


class ProjectionMark(models.Model):
    """One row per job that received events: how many appends it had (``generation``) and how
    many of them its rows hold (``projected``). The job is dirty while ``generation`` is the
    greater.

    Each append's transaction upserts its jobs' marks in one statement, adding one to
    ``generation`` under the mark's row lock, and stores its events with that number
    (``Event.generation``). So one job's appends take its numbers in commit order: a projector
    that reads ``generation`` G folds exactly the events numbered ``projected`` < n <= G, all
    committed, and sets ``projected`` to G in the transaction that writes the rows. The row
    stays when the job is clean: its numbers go on from there, so a job's events keep one
    sequence. ``partition_day`` is the job's day, fixed by its first append (the Job row comes
    later, with its projection)."""

    job_id = models.CharField(max_length=200, primary_key=True)
    partition_day = models.DateField()
    generation = models.BigIntegerField(default=1)
    projected = models.BigIntegerField(default=0)
    # The next fold replays the job from every event (events re-homed into it, ``aliases``).
    whole = models.BooleanField(default=False)
    # When its oldest event not folded yet arrived (the lag's clock: set when the job becomes
    # dirty, moved on by a fold that leaves it dirty), and its latest append.
    first_marked_at = models.DateTimeField()
    marked_at = models.DateTimeField()

    objects = ProjectionMarkQuerySet.as_manager()

    class Meta:
        indexes = [
            # The projector's queue and the lag (/metrics, /healthz): dirty marks, oldest first.
            # Clean jobs, nearly all of them, stay out of it.
            models.Index(
                fields=["first_marked_at"],
                condition=Q(generation__gt=F("projected")),
                name="mark_dirty_oldest",
            ),
        ]

    def __str__(self):
        return f"{self.job_id} {self.projected}/{self.generation}"
