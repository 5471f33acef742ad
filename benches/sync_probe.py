#!/usr/bin/env python3
"""Benchmark: the disk's sync as a request meets it (issue 36's `full`
target). The same probe as `a2a_sync`'s (a 4 KiB page written over in a
preallocated 4 MiB file, then `fsync`, as SQLite syncs a WAL that has
started over), one every millisecond, N times, in DIR (default /tmp, the
disk the benches' state dirs are on). Run it alone, then while a bench
loads the machine, to see what a sync costs on two busy cores.

    python3 benches/sync_probe.py [N] [DIR] [LABEL]
"""

import os
import sys
import time


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    where = sys.argv[2] if len(sys.argv) > 2 else "/tmp"
    label = sys.argv[3] if len(sys.argv) > 3 else "sync"
    path = os.path.join(where, f"sync-probe-{os.getpid()}")
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"\0" * 4096 * 1024)
        os.fsync(fd)
        page = b"\7" * 4096
        took = []
        for i in range(n):
            os.pwrite(fd, page, (i % 1024) * 4096)
            start = time.perf_counter()
            os.fsync(fd)
            took.append(time.perf_counter() - start)
            time.sleep(0.001)
    finally:
        os.close(fd)
        os.unlink(path)
    took.sort()
    p50, p99 = took[len(took) // 2] * 1e3, took[len(took) * 99 // 100] * 1e3
    print(f"{label}: fsync after a 4 KiB overwrite, p50 {p50:.3f} ms, p99 {p99:.3f} ms ({n} syncs)")


if __name__ == "__main__":
    main()
