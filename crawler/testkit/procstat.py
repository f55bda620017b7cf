"""A process's counters from Linux's /proc/<pid>/stat, for tests and benchmarks."""

from __future__ import annotations

import os


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and
    parentheses): index 0 is the state, field 3 of proc(5)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def minor_faults(pid: int) -> int:
    """Page faults the process served without I/O (minflt), since it started."""
    return int(stat_fields(pid)[7])


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time (utime + stime, not its children's)."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
