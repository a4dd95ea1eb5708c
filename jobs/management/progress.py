"""Progress lines for long commands: count, rate and time left."""

import time


class Progress:
    """Prints ``label: done/total (rate/s, ~Ns left)`` at most every ``every`` seconds."""

    def __init__(self, stream, label: str, total: int | None, every: float = 1.0):
        self.stream, self.label, self.total, self.every = stream, label, total, every
        self.done = 0
        self.started = self.last = time.monotonic()

    def advance(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.stream.write(self.line(now))

    def line(self, now: float | None = None) -> str:
        elapsed = max((now or time.monotonic()) - self.started, 1e-9)
        rate = self.done / elapsed
        if self.total:
            left = (self.total - self.done) / rate if rate else 0
            return f"{self.label}: {self.done}/{self.total} ({rate:,.0f}/s, ~{left:.0f}s left)"
        return f"{self.label}: {self.done} ({rate:,.0f}/s)"

    def finish(self) -> str:
        elapsed = time.monotonic() - self.started
        return (
            f"{self.label}: {self.done} in {elapsed:.1f}s ({self.done / max(elapsed, 1e-9):,.0f}/s)"
        )
