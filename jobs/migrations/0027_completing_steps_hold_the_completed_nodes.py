"""A job's completed nodes are held by the steps that completed them, not by a list on the job.

``Job.completed_node_ids`` grew with the job, and every batch read it, decoded it, wrote it
back and (past 2 KB) compressed it into a new TOAST value: a 10,000-step run streamed live paid
that on every request, and the request's server time grew with the job (bench/README.md, "The
long job's completed nodes"). Now the step whose success completed a node holds the node's
place in the list (``Step.completes``); ``Job.completed_node_ids`` reads the list off them.

The stored lists move onto the steps: a node's completing step is its first success, the step
with the earliest ``marks["success"]`` (replay records it there). The fold's version changes
(``walk.FOLD_VERSION``), so each job's next batch replays it whole and rewrites its steps."""

from django.db import migrations, models

JOBS_PER_ROUND = 500


def steps_hold_the_lists(apps, schema_editor):
    alias = schema_editor.connection.alias
    Job = apps.get_model("jobs", "Job")
    Step = apps.get_model("jobs", "Step")
    lists = Job.objects.using(alias).exclude(completed_node_ids=[]).order_by("pk")
    rows = list(lists.values_list("pk", "completed_node_ids"))
    for start in range(0, len(rows), JOBS_PER_ROUND):
        chunk = dict(rows[start : start + JOBS_PER_ROUND])
        first_success: dict[tuple[int, str], tuple[int, int]] = {}
        steps = Step.objects.using(alias).filter(job_id__in=list(chunk))
        for pk, job_pk, node, marks in steps.values_list("pk", "job_id", "node_id", "marks"):
            if mark := marks.get("success"):
                found = first_success.get((job_pk, node))
                if found is None or mark[0] < found[0]:
                    first_success[(job_pk, node)] = (mark[0], pk)
        completing = [
            Step(pk=first_success[(job_pk, node)][1], completes=place)
            for job_pk, nodes in chunk.items()
            for place, node in enumerate(nodes)
            if (job_pk, node) in first_success
        ]
        Step.objects.using(alias).bulk_update(completing, ["completes"], batch_size=JOBS_PER_ROUND)


def jobs_hold_the_lists(apps, schema_editor):
    alias = schema_editor.connection.alias
    Job = apps.get_model("jobs", "Job")
    Step = apps.get_model("jobs", "Step")
    lists: dict[int, list[str]] = {}
    completing = Step.objects.using(alias).filter(completes__isnull=False).order_by("job_id", "completes")
    for job_pk, node in completing.values_list("job_id", "node_id"):
        lists.setdefault(job_pk, []).append(node)
    jobs = [Job(pk=pk, completed_node_ids=nodes) for pk, nodes in lists.items()]
    Job.objects.using(alias).bulk_update(jobs, ["completed_node_ids"], batch_size=JOBS_PER_ROUND)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0026_partial_step_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="step",
            name="completes",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(steps_hold_the_lists, jobs_hold_the_lists),
        migrations.RemoveField(
            model_name="job",
            name="completed_node_ids",
        ),
    ]
