#!/usr/bin/env python3
"""Benchmark: what one retention delete of an A2A task costs in each layout
of the task tables, side by side on copies of one filled database (issue 36).

The database is built from this repo's migrations up to 0021 (the layout
with de-duplication as an index on `tasks`, `tasks_message`), filled with
TASKS completed tasks as `store_growth` fills them (100 routes, 10,000
contexts across the whole fill, four events a task), with client message
ids that are either random (`uuid`: UUIDv4, as the A2A SDKs make them) or
`fill-<n>` (`fill`: the store_growth bench's). Then, on a fresh copy each,
the oldest 20,000 ended tasks (`DELETES`) are deleted the way retention deletes them
(roostd's statement, batches of 200, a passive checkpoint every 2,000), and
the µs and bytes written (WAL and checkpoints) per task are printed:

- `0021`: the layout before migration 0022;
- `0022`: migration 0022 applied (de-duplication in `task_messages`,
  whose entries a delete leaves for a later sweep);
- `0022 without tasks_context`: also without the context index, the
  other index keyed at random to a task's age (not a layout roostd has:
  what that index costs a delete).

With `CONVERSATIONS=1` each context also has an agent's conversation (an
agent route that keeps one per context), and the layouts compared are
`0022` (migration 0013's trigger, whose check for another task of the
context no index covers) and `0023` (the check reads `tasks_context`).
`CONTEXTS` (default 10,000) sets how many contexts the tasks spread over:
as many as TASKS makes a context of one task each, an agent's usual
conversation. `DELETES` (default 20,000) sets how many tasks are deleted.

Uses Python's own sqlite3 module (the SQLite it links, not roostd's
bundled one) with roostd's pragmas (WAL, synchronous NORMAL, foreign keys,
no auto-checkpoint). State in DIR (default: a directory under /var/tmp,
on the real disk), removed at the end.

    python3 benches/prune_layouts.py [TASKS] [uuid|fill] [DIR]
    CONVERSATIONS=1 CONTEXTS=100000 DELETES=2000 python3 benches/prune_layouts.py 100000
"""

import glob
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid

TASKS = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
IDS = sys.argv[2] if len(sys.argv) > 2 else "uuid"
DIR = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(dir="/var/tmp")
MIGRATIONS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "migrations", "*.sql")))
BEFORE = [m for m in MIGRATIONS if int(os.path.basename(m)[:4]) <= 21]
M0022 = [m for m in MIGRATIONS if os.path.basename(m).startswith("0022")]
M0023 = [m for m in MIGRATIONS if os.path.basename(m).startswith("0023")]
CONVERSATIONS = os.environ.get("CONVERSATIONS") == "1"
CONTEXTS = int(os.environ.get("CONTEXTS", "10000"))
DELETES = int(os.environ.get("DELETES", "20000"))

# roostd's retention delete (daemon/src/store/writes.rs, `prune`).
PRUNE = (
    "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE source = 'a2a' "
    "AND ended_at IS NOT NULL AND state IN ('completed', 'failed', 'canceled', 'rejected') "
    "AND (ended_at, id) < (?1, ?2) ORDER BY ended_at, id LIMIT 200)"
)


def written():
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def connect(path):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; "
        "PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 0;"
    )
    return conn


def fill(path):
    conn = connect(path)
    for migration in BEFORE:
        with open(migration) as f:
            conn.executescript(f.read())
    conn.execute(
        "INSERT INTO sessions (id, name, capsule, version, manifest, workdir, bookkeeping_dir, "
        "state, restart_policy, request_json, created_at, updated_at) "
        "VALUES ('ses_1', 'bench', 'bench', '0.1.0', '/m', '/w', '/b', 'running', 'always', '{}', 't', 't')"
    )
    events = (
        (1, '{"type":"status","state":"submitted"}'),
        (2, '{"type":"status","state":"working"}'),
        (3, '{"type":"artifact","text":"hello back"}'),
        (4, '{"type":"status","state":"completed"}'),
    )
    conn.execute("BEGIN")
    for i in range(TASKS):
        r = i % 100
        route = "bench" if r == 0 else f"r{r:02}"
        task = f"tsk_f111{i:028x}"
        context = f"ctx_f111{i % CONTEXTS:028x}"
        message = str(uuid.uuid4()) if IDS == "uuid" else f"fill-{i}"
        at = f"2026-12-05T{i // 3_600_000 % 24:02}:{i // 60_000 % 60:02}:{i // 1000 % 60:02}.{i:09d}Z"
        conn.execute(
            "INSERT INTO tasks (id, session_id, context_id, source, state, input_bytes, "
            "created_at, updated_at, route, message_json, message_id, owner) "
            "VALUES (?, 'ses_1', ?, 'a2a', 'submitted', 5, ?, ?, ?, ?, ?, '')",
            (task, context, at, at, route,
             '{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"hello"}]}' % message, message),
        )
        for seq, body in events:
            conn.execute(
                "INSERT INTO task_events (task_id, seq, body_json, at) VALUES (?, ?, ?, ?)",
                (task, seq, body, at),
            )
        conn.execute(
            "UPDATE tasks SET state = 'completed', ended_at = ?, updated_at = ?, "
            "answer = 'hello back' WHERE id = ?",
            (at, at, task),
        )
        if CONVERSATIONS and i < CONTEXTS:
            conn.execute(
                "INSERT INTO conversations (route, context_id, messages, updated_at) "
                "VALUES (?, ?, '[]', ?)",
                (route, context, at),
            )
        if i % 20_000 == 19_999:
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("BEGIN")
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def prune(base, label, setup):
    path = os.path.join(DIR, "copy.db")
    for f in glob.glob(path + "*"):
        os.remove(f)
    shutil.copy(base, path)
    conn = connect(path)
    for migration in setup:
        if migration.endswith(".sql"):
            with open(migration) as f:
                conn.executescript(f.read())
        else:
            conn.executescript(migration)
    bound = conn.execute("SELECT ended_at, id FROM tasks ORDER BY ended_at, id LIMIT 1 OFFSET ?", (DELETES,)).fetchone()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.sync()
    before, started, deleted = written(), time.perf_counter(), 0
    while True:
        batch = conn.execute(PRUNE, bound).rowcount
        deleted += batch
        if deleted // 2000 != (deleted - batch) // 2000:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        if batch < 200:
            break
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    secs, bytes_ = time.perf_counter() - started, written() - before
    print(f"| {label} | {deleted:,} | {secs * 1e6 / deleted:.1f} µs | {bytes_ / 1024 / deleted:.1f} KiB |", flush=True)
    conn.close()


def main():
    os.makedirs(DIR, exist_ok=True)
    base = os.path.join(DIR, "base.db")
    started = time.perf_counter()
    fill(base)
    print(f"{TASKS:,} tasks, {IDS} message ids, filled in {time.perf_counter() - started:.0f} s; "
          f"{os.path.getsize(base) / TASKS:.0f} bytes a task")
    print("| layout | deleted | a task | written a task |")
    print("|---|---|---|---|")
    if CONVERSATIONS:
        prune(base, "0022, a conversation per context (0013's trigger)", M0022)
        prune(base, "0023 (the trigger reads `tasks_context`)", M0022 + M0023)
    else:
        prune(base, "0021 (`tasks_message` on `tasks`)", [])
        prune(base, "0022 (`task_messages`, entries left for a sweep)", M0022)
        prune(base, "0022 without `tasks_context`", M0022 + ["DROP INDEX tasks_context;"])
    shutil.rmtree(DIR, ignore_errors=True)


if __name__ == "__main__":
    main()
