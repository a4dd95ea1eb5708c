import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from jobs.contract import bodies
from jobs.ingest.store import store_batch
from jobs.management.progress import Progress

NDJSON_SUFFIXES = {".ndjson", ".jsonl"}


class Command(BaseCommand):
    help = (
        "Import events from a JSON or NDJSON file through the same validation and storage as the "
        "API; prints the same per-item report."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)
        parser.add_argument("--batch", type=int, default=1000, help="events per transaction")
        parser.add_argument(
            "--defer-projection",
            action="store_true",
            help="append only, as Prefer: respond-async does: the jobs stay dirty until "
            "run_projector folds them",
        )

    def handle(self, *args, path, batch, defer_projection, **options):
        try:
            body = path.read_bytes()
        except OSError as error:
            raise CommandError(f"cannot read {path}: {error.strerror}") from None
        content_type = (
            "application/x-ndjson" if path.suffix.lower() in NDJSON_SUFFIXES else "application/json"
        )
        try:
            items = bodies.decode_body(body, content_type)
        except bodies.BodyError as error:
            raise CommandError(f"{path}: {error.message}") from None
        totals = {"received": 0, "stored": 0, "duplicates": 0, "rejected": 0}
        errors = []
        progress = Progress(self.stderr, "events imported", len(items))
        size = min(batch, settings.TRACEVIZ_MAX_BATCH_EVENTS)
        for start in range(0, len(items), size):
            parsed = bodies.parse_items(items[start : start + size], size)
            for item_error in parsed.errors:
                item_error["index"] += start
            result = store_batch(parsed, project=not defer_projection)
            for key in totals:
                totals[key] += getattr(result, key)
            errors.extend(result.errors)
            progress.advance(parsed.total)
        self.stderr.write(progress.finish())
        self.stdout.write(json.dumps({**totals, "errors": errors}, indent=2))
        if totals["rejected"]:
            raise CommandError(f"{totals['rejected']} of {totals['received']} events rejected")
