"""How many CPUs this process may use: what `--workers auto` starts.

Its CPU affinity (the cpuset a container runtime gives it), bounded by the CPU
quota of its cgroup and every cgroup above it, rounded up: a pod limited to
1.5 CPUs gets 2 workers, as Go's runtime sizes GOMAXPROCS. cgroup v2 (cpu.max)
and v1 (cpu.cfs_quota_us) are both read, each where /proc/self/mountinfo says
it is mounted and at the path /proc/self/cgroup names, so the count is right
in a container (which sees its own cgroup at the mount's root) and on a host.

With no quota at all, a pod on a large node would start a worker per node CPU,
each with its own memory (docs/operations.md, Sizing the function): AUTO_CAP
bounds that case; a CPU limit or an explicit number of workers goes past it.
"""

from __future__ import annotations

import math
import os
import pathlib

AUTO_CAP = 8  # workers when no cgroup quota bounds them (a pod without a CPU limit)

PROC = pathlib.Path("/proc/self")
V1, V2 = 1, 2  # cgroup versions


def usable(proc: pathlib.Path = PROC) -> int:
    """Workers for `auto`: the CPUs the affinity allows, bounded by the cgroup quota, or by AUTO_CAP without one."""
    affinity = len(os.sched_getaffinity(0))
    quota = quota_cpus(proc)
    if quota is None:
        return max(1, min(affinity, AUTO_CAP))
    return max(1, min(affinity, math.ceil(quota)))


def quota_cpus(proc: pathlib.Path = PROC) -> float | None:
    """The smallest CPU quota, in CPUs, of this process's cgroups and their ancestors; None if none is set."""
    quotas = [q for point, directory, version in cpu_cgroups(proc) for q in _quotas_up(point, directory, version)]
    return min(quotas, default=None)


def cpu_cgroups(proc: pathlib.Path) -> list[tuple[pathlib.Path, pathlib.Path, int]]:
    """(mount point, this process's cgroup there, version) for each hierarchy that can hold a CPU quota."""
    try:
        memberships = (proc / "cgroup").read_text().splitlines()
        mounts = (proc / "mountinfo").read_text().splitlines()
    except OSError:  # not Linux, or no /proc: no quota can be read
        return []
    found = []
    for line in mounts:
        fields = line.split()
        # id parent major:minor root mount-point options [optional...] - fstype source super-options
        dash = fields.index("-")
        root, point, fstype, options = fields[3], fields[4], fields[dash + 1], fields[dash + 3].split(",")
        for member in memberships:
            hierarchy, controllers, path = member.split(":", 2)
            if fstype == "cgroup2" and hierarchy == "0":
                version = V2
            elif fstype == "cgroup" and "cpu" in controllers.split(",") and "cpu" in options:
                version = V1
            else:
                continue
            found.append((pathlib.Path(point), _inside(pathlib.Path(point), root, path), version))
    return found


def _inside(point: pathlib.Path, root: str, path: str) -> pathlib.Path:
    # A container's mount shows its own cgroup at the mount point: the mount's root is that
    # cgroup, and /proc/self/cgroup may name it from the host's root (no cgroup namespace).
    relative = os.path.relpath(path, root)
    return point if relative.startswith("..") else point / relative


def _quotas_up(point: pathlib.Path, directory: pathlib.Path, version: int) -> list[float]:
    """The CPU quotas set at directory and each cgroup above it, up to the mount point."""
    levels = [directory, *(d for d in directory.parents if d.is_relative_to(point))]
    return [q for q in (_quota(level, version) for level in levels) if q is not None]


def _quota(level: pathlib.Path, version: int) -> float | None:
    try:
        if version == V2:
            quota, period = (level / "cpu.max").read_text().split()
        else:
            quota = (level / "cpu.cfs_quota_us").read_text().strip()
            period = (level / "cpu.cfs_period_us").read_text().strip()
    except (OSError, ValueError):  # no such file at this level (a v2 cgroup without the cpu controller)
        return None
    if quota in ("max", "-1") or int(period) <= 0:
        return None
    return int(quota) / int(period)
