"""The peak memory of this process, for the benchmarks' children.

``getrusage(RUSAGE_SELF).ru_maxrss`` is not that for a process started by a larger one:
Linux keeps the high-water mark across fork and exec, so a child reports its parent's RSS at
the fork when that was higher (a 9 MiB child of a 300 MiB bench parent reports 310 MiB).
``VmHWM`` in ``/proc/self/status`` belongs to the process's own address space, which exec
replaces: the child's own peak.
"""

from __future__ import annotations

import resource
from pathlib import Path


def peak_rss_mib() -> float:
    """This process's own peak resident set, in MiB (``ru_maxrss`` where there is no ``/proc``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
