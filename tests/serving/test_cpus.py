"""`--workers auto`: the CPUs a process may use, from its affinity and its cgroups' CPU quotas (serving/cpus.py).

Each case lays out /proc/self/cgroup, /proc/self/mountinfo and the cgroup files as the kernel shows
them, in a container or on a host; the real kernel's are read by tests/serving/test_shutdown.py.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from function.serving import cpus


@dataclasses.dataclass(frozen=True)
class Layout:
    reason: str
    cgroup: str  # /proc/self/cgroup
    mounts: list[tuple[str, str, str, str]]  # (root, mount point under the fake /, fstype, super options)
    files: dict[str, str]  # cgroup file (under the fake /) -> content
    quota: float | None


V2_CONTAINER = [("/", "sys/fs/cgroup", "cgroup2", "rw")]
V1_HOST = [("/", "sys/fs/cgroup/cpu,cpuacct", "cgroup", "rw,cpu,cpuacct")]


def v1(directory: str, quota: int, period: int = 100_000) -> dict[str, str]:
    """A v1 cgroup's CPU quota files (a quota of -1 is none)."""
    return {f"{directory}/cpu.cfs_quota_us": f"{quota}\n", f"{directory}/cpu.cfs_period_us": f"{period}\n"}


LAYOUTS = [
    Layout("a pod's limit, cgroup v2 with its own namespace: its cgroup is the mount's root",
           "0::/\n", V2_CONTAINER, {"sys/fs/cgroup/cpu.max": "150000 100000\n"}, 1.5),
    Layout("no limit, cgroup v2", "0::/\n", V2_CONTAINER, {"sys/fs/cgroup/cpu.max": "max 100000\n"}, None),
    Layout("cgroup v1 bound into a container without a cgroup namespace: the path names the host's cgroup",
           "4:cpu,cpuacct:/kubepods/pod1/c1\n2:memory:/kubepods/pod1/c1\n",
           [("/kubepods/pod1/c1", "sys/fs/cgroup/cpu,cpuacct", "cgroup", "rw,cpu,cpuacct")],
           v1("sys/fs/cgroup/cpu,cpuacct", 200000), 2.0),
    Layout("cgroup v1 on a host: a parent's quota bounds its children, the smallest wins",
           "4:cpu,cpuacct:/a/b\n", V1_HOST,
           {**v1("sys/fs/cgroup/cpu,cpuacct", -1), **v1("sys/fs/cgroup/cpu,cpuacct/a", 50000),
            **v1("sys/fs/cgroup/cpu,cpuacct/a/b", 300000)}, 0.5),
    Layout("cgroup v2 on a host: a grandparent's quota counts through a cgroup without the cpu controller",
           "0::/a/b/c\n", [("/", "sys/fs/cgroup", "cgroup2", "rw")],
           {"sys/fs/cgroup/a/cpu.max": "400000 100000\n", "sys/fs/cgroup/a/b/cpu.max": "max 100000\n"}, 4.0),
    Layout("v1 and v2 side by side (hybrid): the v1 cpu hierarchy's quota, the v2 one without the controller",
           "1:cpu:/\n0::/\n",
           [("/", "sys/fs/cgroup/cpu", "cgroup", "rw,cpu"), ("/", "sys/fs/cgroup/unified", "cgroup2", "rw")],
           v1("sys/fs/cgroup/cpu", 100000), 1.0),
    Layout("a v1 hierarchy without the cpu controller holds no CPU quota", "3:memory:/x\n",
           [("/", "sys/fs/cgroup/memory", "cgroup", "rw,memory")], {}, None),
    Layout("no cgroup mounted", "0::/\n", [], {}, None),
    Layout("a malformed cpu.max is no quota", "0::/\n", V2_CONTAINER, {"sys/fs/cgroup/cpu.max": "lots\n"}, None),
    Layout("a period of 0 is no quota", "0::/\n", V2_CONTAINER, {"sys/fs/cgroup/cpu.max": "100000 0\n"}, None),
]  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.reason)
def test_the_quota_is_read_where_the_kernel_shows_it(layout, tmp_path):
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(layout.cgroup)
    mountinfo = [
        f"{30 + i} 23 0:{40 + i} {root} {tmp_path / point} rw,nosuid - {fstype} cgroup {options}"
        for i, (root, point, fstype, options) in enumerate(layout.mounts)
    ]
    (proc / "mountinfo").write_text("\n".join(["22 1 8:1 / / rw - ext4 /dev/root rw", *mountinfo]) + "\n")
    for name, content in layout.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    assert cpus.quota_cpus(proc) == layout.quota


def test_no_proc_is_no_quota(tmp_path):
    assert cpus.quota_cpus(tmp_path / "absent") is None


@pytest.mark.parametrize(
    ("reason", "affinity", "quota", "workers"),
    [
        ("a quota is rounded up, as Go sizes GOMAXPROCS", 4, 1.5, 2),
        ("a quota under one CPU still composes", 4, 0.2, 1),
        ("the CPUs the process may run on bound a larger quota", 2, 6.0, 2),
        ("without a quota, every CPU it may run on", 4, None, 4),
        ("without a quota, at most AUTO_CAP: a pod with no limit on a large node", 64, None, cpus.AUTO_CAP),
    ],
)
def test_auto_is_the_affinity_bounded_by_the_quota(monkeypatch, reason, affinity, quota, workers):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(affinity)))
    monkeypatch.setattr(cpus, "quota_cpus", lambda _proc=cpus.PROC: quota)
    assert cpus.usable() == workers, reason
