"""Emulate PostgreSQL's autovacuum ANALYZE during a bench run.

This machine kind's PostgreSQL runs with autovacuum=off, so tables that grow from empty during
a run keep no statistics and the planner guesses: a lookup of one batch's jobs in the event
table then becomes a sequential scan (about 100 ms instead of 0.6 ms at 400,000 events). A
production server analyzes on its own; the benches run ANALYZE every few seconds, as
autovacuum's default thresholds would on a growing table.
"""

import threading


def analyze_periodically(database_url: str, every: float = 5.0) -> threading.Event:
    """Start a daemon thread that runs ANALYZE every ``every`` seconds; set the returned event
    to stop it."""
    import psycopg

    stop = threading.Event()

    def loop():
        while not stop.wait(every):
            try:
                with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute("ANALYZE")
            except psycopg.Error:
                continue  # the server is down (a fault run): try again next round

    if database_url.startswith(("postgres://", "postgresql://")):
        threading.Thread(target=loop, daemon=True, name="analyze").start()
    return stop
