"""GPU settings of a pool, as the flower-operator applies them."""

from __future__ import annotations

from typing import Any

from function.api.spec import GPUConfig

DEFAULT_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}


def resource_name(gpu: GPUConfig) -> str:
    """The extended resource a pod requests: as given, else the vendor's (NVIDIA's by default)."""
    return gpu.resourceName or DEFAULT_RESOURCE.get(gpu.vendor or "nvidia", "nvidia.com/gpu")


def requests(gpu: GPUConfig | None) -> dict[str, str]:
    """Extended-resource requests (and limits) for the container that runs the ClientApp."""
    if gpu is None or not gpu.enabled or gpu.mountAll:
        return {}
    return {resource_name(gpu): str(gpu.count)}


def with_gpus(resources: dict[str, Any] | None, gpu: GPUConfig | None) -> dict[str, Any]:
    """A container's resources with the GPU requests added to both limits and requests."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in (resources or {}).items()}
    extra = requests(gpu)
    if extra:
        out["limits"] = {**(out.get("limits") or {}), **extra}
        out["requests"] = {**(out.get("requests") or {}), **extra}
    return out


def mount_all(gpu: GPUConfig | None) -> str | None:
    """The vendor whose GPUs are all exposed, or None."""
    return gpu.vendor if gpu is not None and gpu.mountAll else None


def env(gpu: GPUConfig | None) -> list[dict[str, str]]:
    """With mountAll, the vendor's variable that makes every GPU of the node visible."""
    vendor = mount_all(gpu)
    if vendor == "nvidia":
        return [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    if vendor == "amd":
        return [{"name": "ROCR_VISIBLE_DEVICES", "value": "all"}]
    return []


def volumes(gpu: GPUConfig | None) -> list[dict[str, Any]]:
    """With AMD mountAll, the node's device files as hostPath volumes."""
    if mount_all(gpu) != "amd":
        return []
    return [
        {"name": "dev-kfd", "hostPath": {"path": "/dev/kfd", "type": "CharDevice"}},
        {"name": "dev-dri", "hostPath": {"path": "/dev/dri", "type": "Directory"}},
    ]


def volume_mounts(gpu: GPUConfig | None) -> list[dict[str, str]]:
    """Where the container sees the volumes() device files: at the same paths."""
    if mount_all(gpu) != "amd":
        return []
    return [{"name": "dev-kfd", "mountPath": "/dev/kfd"}, {"name": "dev-dri", "mountPath": "/dev/dri"}]


def security_context(gpu: GPUConfig | None) -> dict[str, Any] | None:
    """The container's security context with AMD mountAll, or None.

    AMD's device files need a privileged container; NVIDIA uses its runtime class.
    """
    return {"privileged": True} if mount_all(gpu) == "amd" else None


def needs_privilege(gpu: GPUConfig | None) -> bool:
    """Whether the pool's pods break the restricted Pod Security Standard (AMD mountAll)."""
    return security_context(gpu) is not None


def runtime_class(gpu: GPUConfig | None) -> str | None:
    """The pod's runtimeClassName with NVIDIA mountAll, or None."""
    return "nvidia" if mount_all(gpu) == "nvidia" else None
