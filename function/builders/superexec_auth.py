"""The shared secret a SuperExec sidecar proves itself with (Flower 1.29 and later, process isolation).

The SuperLink and SuperNode accept a SuperExec on their app-facing API only if
it holds the same secret (--superexec-auth-secret-file). Each pod makes its own:
an init container writes a random one into a memory volume that only that
pod's containers mount. It never exists in an Object, the XR, a Secret or a
log, and it changes whenever the pod is replaced. The init container runs the
pod's own Flower image's Python with a fixed program: no shell, no user text.
"""

from __future__ import annotations

from typing import Any

from function.api.spec import FederationSpec
from function.releases.flower import Dialect

VOLUME = "superexec-auth"
DIR = "/var/run/flower"
FILE = f"{DIR}/superexec-secret"
CONTAINER = "superexec-auth"
# 32 random bytes as hex, readable by the pod's user alone.
PROGRAM = (
    "import os, secrets, sys; "
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600); "
    "os.write(fd, secrets.token_hex(32).encode()); "
    "os.close(fd)"
)


def enabled(spec: FederationSpec, dialect: Dialect) -> bool:
    """Whether a pod's SuperExec sidecar proves itself with a secret: process isolation, Flower 1.29 and later."""
    return spec.isolationMode == "process" and dialect.superexec_auth


def args() -> list[str]:
    """What the SuperLink, SuperNode and their SuperExec are told."""
    return [f"--superexec-auth-secret-file={FILE}"]


def mount(*, read_only: bool = True) -> dict[str, Any]:
    """The memory volume, read-only for everyone but the init container that writes it."""
    out: dict[str, Any] = {"name": VOLUME, "mountPath": DIR}
    if read_only:
        out["readOnly"] = True
    return out


def volume() -> dict[str, Any]:
    """A memory-backed emptyDir: the secret never touches a disk."""
    return {"name": VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}


def init_container(image: str) -> dict[str, Any]:
    """Writes the pod's secret before the Flower containers start."""
    return {
        "name": CONTAINER,
        "image": image,
        "command": ["python", "-c", PROGRAM, FILE],
        "volumeMounts": [mount(read_only=False)],
    }
