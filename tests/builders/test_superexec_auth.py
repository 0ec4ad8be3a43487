"""The SuperExec shared secret: made in each pod, by a fixed program, never in an Object."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from function.builders import fleet_proxy, runner, superexec_auth
from function.serving import render
from support.helpers import ANY_NAMESPACE_POLICY, PROCESS, spec

FLAG = f"--superexec-auth-secret-file={superexec_auth.FILE}"


def pods(changes):
    """Each rendered workload's pod spec, by workload name."""
    xr = {"apiVersion": "flower.crossplane.io/v1alpha1", "kind": "Federation",
          "metadata": {"name": "fed", "namespace": "default"}, "spec": spec(PROCESS, **changes)}  # fmt: skip
    # A platform that allows busybox in init containers.
    docs, _ = render.render(xr, [], policy={**ANY_NAMESPACE_POLICY, "initContainerImages": ["busybox"]})
    out = {}
    for doc in docs[1:]:
        manifest = doc["spec"]["forProvider"]["manifest"]
        template = (manifest.get("spec") or {}).get("template")
        if template:
            out[manifest["metadata"]["name"]] = template["spec"]
    return out


def at(release, isolation="process"):
    changes = {
        "isolationMode": isolation,
        "superlink__image": f"flwr/superlink:{release}",
        "supernodes__image": f"flwr/supernode:{release}",
    }
    if isolation == "subprocess":
        changes["superlink__superexecImage"] = None
        changes["supernodes__pools"] = [{"name": "default", "replicas": 2}]
    return pods(changes)


@pytest.mark.parametrize(
    ("reason", "release", "isolation", "want"),
    [
        ("before 1.29 Flower has no such secret", "1.25.0", "process", False),
        ("1.29 brings it, for process isolation", "1.29.0", "process", True),
        ("the newest release", "1.41.0", "process", True),
        ("subprocess isolation: no sidecar, Flower ignores it", "1.41.0", "subprocess", False),
    ],
)
def test_which_pods_share_a_secret(reason, release, isolation, want):
    for name, pod in at(release, isolation).items():
        # The Fleet proxy (1.40+) is nginx: it neither runs apps nor holds the secret.
        flower_containers = [c for c in pod["containers"] if c["name"] != fleet_proxy.CONTAINER]
        flagged = [c["name"] for c in flower_containers if FLAG in c["args"]]
        # The runner (a sidecar of the SuperLink's from 1.26) runs no app and holds no secret.
        inits = [c["name"] for c in pod.get("initContainers", []) if c["name"] != runner.CONTAINER]
        if want:
            assert len(flagged) == len(flower_containers) == 2, (reason, name, flagged)
            assert inits == [superexec_auth.CONTAINER], (reason, name)
        else:
            assert (flagged, inits) == ([], []), (reason, name)


def test_the_secret_lives_in_memory_and_only_its_writer_may_write():
    for name, pod in at("1.41.0").items():
        volume = next(v for v in pod["volumes"] if v["name"] == superexec_auth.VOLUME)
        assert volume["emptyDir"]["medium"] == "Memory", name
        (init,) = [c for c in pod["initContainers"] if c["name"] == superexec_auth.CONTAINER]
        assert init["securityContext"]["readOnlyRootFilesystem"] is True
        # The writer runs the pod's own Flower image; the readers mount read-only.
        assert init["image"] == pod["containers"][0]["image"]
        for c in pod["containers"]:
            mount = next((m for m in c["volumeMounts"] if m["name"] == superexec_auth.VOLUME), None)
            if c["name"] == fleet_proxy.CONTAINER:
                assert mount is None, "each container mounts only what it uses"
                continue
            assert mount is not None, (name, c["name"])
            assert mount.get("readOnly") is True, (name, c["name"])


def test_a_podtemplates_init_containers_come_after_the_secret_writer():
    # Restricted, from an image the platform allows (tests/api/test_policy.py).
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    extra = {"spec": {"initContainers": [{"name": "warm-cache", "image": "busybox", "securityContext": restricted}]}}
    pod = at_release_with_template("1.41.0", extra)
    assert [c["name"] for c in pod["initContainers"]] == [superexec_auth.CONTAINER, runner.CONTAINER, "warm-cache"]


def at_release_with_template(release, template):
    return pods(
        {
            "superlink__image": f"flwr/superlink:{release}",
            "supernodes__image": f"flwr/supernode:{release}",
            "superlink__podTemplate": template,
        }
    )["fed-superlink"]


def test_the_program_writes_a_fresh_random_secret_only_its_owner_reads(tmp_path: pathlib.Path):
    # The init container's own program, run for real: two pods never share a secret.
    secrets = []
    for i in range(2):
        path = tmp_path / f"secret-{i}"
        subprocess.run([sys.executable, "-c", superexec_auth.PROGRAM, str(path)], check=True)
        assert path.stat().st_mode & 0o777 == 0o600
        secrets.append(path.read_text())
    assert len(secrets[0]) == 64 and secrets[0] != secrets[1]
    assert all(c in "0123456789abcdef" for c in secrets[0])
