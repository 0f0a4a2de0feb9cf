"""How many cores this process may use: the default number of grading workers.

``os.cpu_count()`` counts the machine's cores; a process may be allowed fewer: an affinity mask
(``taskset``, a batch scheduler) or a container's CPU quota (``docker run --cpus 2``, which the
emulated trainer's container sets) leave it the rest idle or throttled. The smallest of the three
counts, at least 1.

Standard library only: this runs inside the trainer container too.

>>> quota_cores("200000 100000")
2
>>> quota_cores("150000 100000"), quota_cores("max 100000"), quota_cores("garbage")
(2, None, None)
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1 = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))


def quota_cores(cpu_max: str) -> int | None:
    """Cores a cgroup v2 ``cpu.max`` line (``QUOTA PERIOD``) allows, rounded up; None without a quota."""
    parts = cpu_max.split()
    if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit() or int(parts[1]) == 0:
        return None
    return max(1, math.ceil(int(parts[0]) / int(parts[1])))


def _cgroup_cores() -> int | None:
    try:
        return quota_cores(CGROUP_V2.read_text(encoding="ascii"))
    except (OSError, ValueError):
        pass
    try:
        quota, period = (p.read_text(encoding="ascii").strip() for p in CGROUP_V1)
    except (OSError, ValueError):
        return None
    return quota_cores(f"{quota} {period}") if quota.isdigit() else None  # -1: no quota


def usable_cores() -> int:
    """The cores this process may use: the machine's, its affinity mask's and its cgroup quota's, the least."""
    counts = [os.cpu_count() or 1]
    if hasattr(os, "sched_getaffinity"):
        counts.append(len(os.sched_getaffinity(0)))
    quota = _cgroup_cores()
    if quota is not None:
        counts.append(quota)
    return max(1, min(counts))
