from django.core.management.base import BaseCommand

from jobs.escalations import alerts


class Command(BaseCommand):
    help = "Evaluate every alert rule now: fire new episodes, resolve the ones that stopped."

    def handle(self, *args, **options):
        outcome = alerts.evaluate()
        for episode in outcome.fired:
            self.stdout.write(f"firing: {episode.rule.name} {episode.subject}")
        for episode in outcome.resolved:
            self.stdout.write(f"resolved: {episode.rule.name} {episode.subject}")
        self.stdout.write(f"{len(outcome.fired)} fired, {len(outcome.resolved)} resolved")
