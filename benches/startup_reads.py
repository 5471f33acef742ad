#!/usr/bin/env python3
"""Benchmark: what roostd's start-up reads of the task table cost as the
store grows (issue 36), on a database filled as `prune_layouts.py` fills it
(TASKS completed A2A tasks over 100 routes, the repo's migrations, no
session asleep, no task live).

Each statement is run as roostd runs it at start-up (best of three) and its
plan printed:

- hibernated sessions with tasks waiting (`store/hibernations.rs`): the
  join from the tasks, as it was, beside the read from the sessions;
- the tasks a stop left `working` (`Tasks::recover`, `a2a_tasks.rs`).

Uses Python's own sqlite3 module; state in DIR (default: a directory under
/var/tmp, on the real disk), removed at the end.

    python3 benches/startup_reads.py [TASKS] [DIR]
"""

import importlib.util
import os
import shutil
import sys
import tempfile
import time

TASKS = sys.argv[1] if len(sys.argv) > 1 else "300000"
DIR = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(dir="/var/tmp")

# The fill of `prune_layouts.py`, with its arguments.
sys.argv = [sys.argv[0], TASKS, "fill", DIR]
spec = importlib.util.spec_from_file_location(
    "prune_layouts", os.path.join(os.path.dirname(__file__), "prune_layouts.py")
)
layouts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layouts)

READS = [
    (
        "hibernated sessions with tasks, joined from the tasks (before)",
        "SELECT DISTINCT t.session_id FROM tasks t JOIN hibernations h "
        "ON h.session_id = t.session_id WHERE t.source = 'a2a' AND t.state = 'submitted'",
    ),
    (
        "hibernated sessions with tasks, from the sessions (now)",
        "SELECT h.session_id FROM hibernations h WHERE EXISTS (SELECT 1 FROM tasks t "
        "WHERE t.session_id = h.session_id AND t.source = 'a2a' AND t.state = 'submitted')",
    ),
    (
        "tasks left working (recover)",
        "SELECT id FROM tasks WHERE source = 'a2a' AND state IN ('working', 'input-required') "
        "ORDER BY created_at, id",
    ),
]


def main():
    os.makedirs(DIR, exist_ok=True)
    base = os.path.join(DIR, "base.db")
    layouts.fill(base)
    conn = layouts.connect(base)
    for migration in layouts.MIGRATIONS:
        if int(os.path.basename(migration)[:4]) > 21:
            with open(migration) as f:
                conn.executescript(f.read())
    print(f"{int(TASKS):,} tasks")
    print("| read | best of 3 | plan |")
    print("|---|---|---|")
    for label, sql in READS:
        took = []
        for _ in range(3):
            started = time.perf_counter()
            conn.execute(sql).fetchall()
            took.append(time.perf_counter() - started)
        plan = "; ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql))
        print(f"| {label} | {min(took) * 1e3:.2f} ms | {plan} |", flush=True)
    conn.close()
    shutil.rmtree(DIR, ignore_errors=True)


if __name__ == "__main__":
    main()
