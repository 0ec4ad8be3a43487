"""The Pod Security Standards' "restricted" profile, written from the published
standard (kubernetes.io/docs/concepts/security/pod-security-standards), as a
checker over a pod spec. Returns the controls a pod breaks."""

from __future__ import annotations

from typing import Any

BASELINE_CAPABILITIES = {
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
SAFE_SYSCTLS = {
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
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod.get("containers", []), *pod.get("ephemeralContainers", [])]


def violations(pod: dict[str, Any]) -> set[str]:
    """The Pod Security Standard controls a pod spec breaks, Baseline and Restricted."""
    return _baseline(pod) | _baseline_contexts(pod) | _restricted(pod)


def _contexts(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [pod.get("securityContext") or {}] + [c.get("securityContext") or {} for c in _containers(pod)]


def _baseline(pod: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    containers = _containers(pod)
    if any((sc.get("windowsOptions") or {}).get("hostProcess") for sc in _contexts(pod)):
        found.add("hostProcess")
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        found.add("hostNamespaces")
    if any((c.get("securityContext") or {}).get("privileged") for c in containers):
        found.add("privileged")
    for c in containers:
        added = set(((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            found.add("capabilities")
    if any("hostPath" in v for v in pod.get("volumes") or []):
        found.add("hostPath")
    if any(p.get("hostPort") for c in containers for p in c.get("ports") or []):
        found.add("hostPorts")
    if any(s.get("name") not in SAFE_SYSCTLS for s in (pod.get("securityContext") or {}).get("sysctls") or []):
        found.add("sysctls")
    return found


def _baseline_contexts(pod: dict[str, Any]) -> set[str]:
    """Baseline controls of each security context, the pod's and its containers'."""
    found: set[str] = set()
    for sc in _contexts(pod):
        apparmor = (sc.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            found.add("appArmor")
        selinux = sc.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            found.add("seLinux")
        if sc.get("procMount") not in (None, "Default"):
            found.add("procMount")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.add("seccomp")
    return found


def _restricted(pod: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    pod_sc = pod.get("securityContext") or {}
    if any(not (set(v) - {"name"}) <= RESTRICTED_VOLUMES for v in pod.get("volumes") or []):
        found.add("volumeTypes")
    for c in _containers(pod):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            found.add("allowPrivilegeEscalation")
        if sc.get("runAsNonRoot") is False or not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
            found.add("runAsNonRoot")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.add("capabilities")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.add("seccomp")
    if any(sc.get("runAsUser") == 0 for sc in _contexts(pod)):
        found.add("runAsUser")
    return found
