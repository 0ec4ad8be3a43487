"""The Pod Security Standards, judged on a composed pod spec.

The controls of the baseline and restricted levels
(https://kubernetes.io/docs/concepts/security/pod-security-standards/), read
the way the API server's admission reads them. Pure: a pod spec in, the
violations out, each with the path in the pod spec where it is, so the
function can name the Federation field it came from. tests/api/test_policy.py
holds it to the Kubernetes judge (tools/psscheck) on the same pods.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
        "image",
    }
)
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


@dataclasses.dataclass(frozen=True)
class Violation:
    """A control a pod spec fails: where (a path in the pod spec), what, and the lowest level it breaks."""

    path: tuple[str | int, ...]
    what: str
    level: str  # "baseline" (so restricted too) or "restricted"


def _containers(pod: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:
    for key in CONTAINER_LISTS:
        for i, container in enumerate(pod.get(key) or []):
            if isinstance(container, dict):
                yield (key, i), container


def _context(obj: dict[str, Any]) -> dict[str, Any]:
    context = obj.get("securityContext")
    return context if isinstance(context, dict) else {}


def violations(pod: dict[str, Any], annotations: dict[str, str] | None = None) -> list[Violation]:
    """Every baseline and restricted control pod fails, in a stable order."""
    return [*_baseline(pod, annotations or {}), *_restricted(pod)]


def _baseline(pod: dict[str, Any], annotations: dict[str, str]) -> Iterator[Violation]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field) is True:
            yield Violation((field,), f"{field} shares the host's namespaces", "baseline")
    pod_context = _context(pod)
    yield from _context_baseline(("securityContext",), pod_context)
    for i, sysctl in enumerate(pod_context.get("sysctls") or []):
        name = sysctl.get("name") if isinstance(sysctl, dict) else None
        if name not in SAFE_SYSCTLS:
            yield Violation(("securityContext", "sysctls", i), f"sysctl {name} is not a safe one", "baseline")
    for i, volume in enumerate(pod.get("volumes") or []):
        if isinstance(volume, dict) and "hostPath" in volume:
            yield Violation(("volumes", i), f"volume {volume.get('name')} is a hostPath", "baseline")
    for key, value in sorted(annotations.items()):
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            yield Violation(("metadata", "annotations", key), f"AppArmor profile {value}", "baseline")
    for path, container in _containers(pod):
        yield from _container_baseline(path, container)


def _container_baseline(path: tuple[str | int, ...], container: dict[str, Any]) -> Iterator[Violation]:
    context = _context(container)
    if context.get("privileged") is True:
        yield Violation((*path, "securityContext", "privileged"), "a privileged container", "baseline")
    added = (context.get("capabilities") or {}).get("add") or []
    beyond = sorted(str(c) for c in added if c not in BASELINE_CAPABILITIES)
    if beyond:
        where = (*path, "securityContext", "capabilities", "add")
        yield Violation(where, f"capabilities {', '.join(beyond)} added", "baseline")
    if context.get("procMount") not in (None, "Default"):
        yield Violation((*path, "securityContext", "procMount"), f"procMount {context['procMount']}", "baseline")
    yield from _context_baseline((*path, "securityContext"), context)
    for j, port in enumerate(container.get("ports") or []):
        if isinstance(port, dict) and port.get("hostPort") not in (None, 0):
            yield Violation((*path, "ports", j, "hostPort"), f"host port {port['hostPort']}", "baseline")


def _context_baseline(path: tuple[str | int, ...], context: dict[str, Any]) -> Iterator[Violation]:
    """The controls a pod's and a container's securityContext share."""
    if (context.get("windowsOptions") or {}).get("hostProcess") is True:
        yield Violation((*path, "windowsOptions", "hostProcess"), "a Windows host process", "baseline")
    if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
        yield Violation((*path, "seccompProfile"), "seccomp profile Unconfined", "baseline")
    if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
        yield Violation((*path, "appArmorProfile"), "AppArmor profile Unconfined", "baseline")
    selinux = context.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
        yield Violation((*path, "seLinuxOptions"), "custom SELinux options", "baseline")


def _restricted(pod: dict[str, Any]) -> Iterator[Violation]:
    for i, volume in enumerate(pod.get("volumes") or []):
        kinds = sorted(k for k in volume if k != "name") if isinstance(volume, dict) else []
        if any(k not in RESTRICTED_VOLUMES for k in kinds) and "hostPath" not in kinds:
            yield Violation(("volumes", i), f"volume {volume.get('name')} of type {', '.join(kinds)}", "restricted")
    pod_context = _context(pod)
    if pod_context.get("runAsUser") == 0:
        yield Violation(("securityContext", "runAsUser"), "runs as root (runAsUser 0)", "restricted")
    if pod_context.get("runAsNonRoot") is False:
        yield Violation(("securityContext", "runAsNonRoot"), "runAsNonRoot false", "restricted")
    for path, container in _containers(pod):
        yield from _container_restricted(path, _context(container), pod_context)


def _container_restricted(
    path: tuple[str | int, ...], context: dict[str, Any], pod_context: dict[str, Any]
) -> Iterator[Violation]:
    if context.get("allowPrivilegeEscalation") is not False:
        where = (*path, "securityContext", "allowPrivilegeEscalation")
        yield Violation(where, "allowPrivilegeEscalation is not false", "restricted")
    if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
        yield Violation((*path, "securityContext", "runAsNonRoot"), "runAsNonRoot is not true", "restricted")
    if context.get("runAsUser") == 0:
        yield Violation((*path, "securityContext", "runAsUser"), "runs as root (runAsUser 0)", "restricted")
    seccomp = (context.get("seccompProfile") or {}).get("type", (pod_context.get("seccompProfile") or {}).get("type"))
    if seccomp not in ("RuntimeDefault", "Localhost"):
        where = (*path, "securityContext", "seccompProfile")
        yield Violation(where, "no RuntimeDefault or Localhost seccomp profile", "restricted")
    capabilities = context.get("capabilities") or {}
    if "ALL" not in (capabilities.get("drop") or []):
        yield Violation(
            (*path, "securityContext", "capabilities", "drop"), "capabilities not dropped (ALL)", "restricted"
        )
    # Those beyond baseline's are baseline's violations already.
    beyond = sorted(str(c) for c in capabilities.get("add") or [] if c in BASELINE_CAPABILITIES - {"NET_BIND_SERVICE"})
    if beyond:
        where = (*path, "securityContext", "capabilities", "add")
        yield Violation(where, f"capabilities {', '.join(beyond)} added", "restricted")


def failing(pod: dict[str, Any], level: str, annotations: dict[str, str] | None = None) -> list[Violation]:
    """The violations that break level (none at privileged)."""
    if level == "privileged":
        return []
    found = violations(pod, annotations)
    return found if level == "restricted" else [v for v in found if v.level == "baseline"]
