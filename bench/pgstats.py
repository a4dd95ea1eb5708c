"""Emulate PostgreSQL's autovacuum ANALYZE during a bench run.

This machine kind's PostgreSQL runs with autovacuum=off, so tables that grow from empty during
a run keep no statistics and the planner guesses: a lookup of one batch's jobs in the event
table then becomes a sequential scan (about 100 ms instead of 0.6 ms at 400,000 events). A
production server analyzes on its own; the benches do what autovacuum's defaults would: every
few seconds, ANALYZE each table (partition) changed by more than 50 rows + 10 % since its last
ANALYZE. Autovacuum never analyzes a partitioned table itself (its ANALYZE samples and analyzes
every partition again: 15 s and more at 10M events), so that runs only every
``PARENT_ROUNDS``-th round, as an operator's scheduled ANALYZE would.
"""

import threading

PARENT_ROUNDS = 10
CHANGED = (
    "SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables "
    "WHERE schemaname = 'public' AND n_mod_since_analyze > 50 + 0.1 * n_live_tup"
)
PARTITIONED = (
    "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relkind = 'p' AND n.nspname = 'public'"
)


def analyze_periodically(database_url: str, every: float = 5.0) -> threading.Event:
    """Start a daemon thread that analyzes the changed tables every ``every`` seconds (and the
    partitioned ones every PARENT_ROUNDS rounds); set the returned event to stop it."""
    import psycopg

    stop = threading.Event()

    def loop():
        rounds = 0
        while not stop.wait(every):
            rounds += 1
            try:
                with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
                    tables = [row[0] for row in conn.execute(CHANGED)]
                    if rounds % PARENT_ROUNDS == 0:
                        tables = [row[0] for row in conn.execute(PARTITIONED)]
                    for table in tables:
                        conn.execute(f"ANALYZE {table}")
            except psycopg.Error:
                continue  # the server is down (a fault run): try again next round

    if database_url.startswith(("postgres://", "postgresql://")):
        threading.Thread(target=loop, daemon=True, name="analyze").start()
    return stop
