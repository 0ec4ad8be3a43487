"""The bundler: a Job beside the SuperLink that turns a run's app image into the bundle the runner submits.

A FederationRun may take its app from an OCI image holding the app's
directory (the image a team builds FROM flwr/superexec for process
isolation). The runner submits bundles (`flwr run` of a FAB), and the
SuperLink pod cannot pull images at run time without rolling, so for each
such run Flower has not taken yet the function composes, in the SuperLink's
namespace: a ConfigMap created empty, and a Job whose one container runs in
the app's image (function/programs/bundle_program.py: the image's own
`flwr build`) and writes the bundle, or why there is none, into that
ConfigMap. The runner reads it from there with its token
(function/builders/runner.py) and goes on as with a bundle from a ConfigMap.

The image runs with a ServiceAccount of its own whose Role may read and
write those ConfigMaps alone (by name), in the restricted Pod Security
Standard, with no other token and nothing else mounted but the program.
Which images may run at all is the platform's (policy runImages).
"""

from __future__ import annotations

import hashlib
from typing import Any

from function.api import names
from function.builders import identity, pods
from function.federation.runs import Run
from function.federation.value import Federation
from function.programs import flwr_control

CONTAINER = "app-bundler"
# Where the bundle is, in the ConfigMap it fills, and where it says why there is none (the program's own names).
BUNDLE_KEY = flwr_control.BUNDLE_KEY
ERROR_KEY = flwr_control.BUNDLE_ERROR_KEY
# Scratch for `flwr build` (and its HOME): on the container's own /tmp emptyDir (pods.harden).
WORK_DIR = "/tmp/flower-bundle"  # noqa: S108 - a path in the container, on its own emptyDir
ROLE = "app-bundler"
# A Job that cannot pull or build its image in this long has failed; its run stays Pending, saying so.
DEADLINE_SECONDS = 900
BACKOFF_LIMIT = 3
# Labels its Job and ConfigMap carry: which run they are for (`kubectl get jobs -l flower.crossplane.io/run=NAME`).
RUN_LABEL = "flower.crossplane.io/run"


def name(federation: str, run: Run) -> str:
    """The Job and ConfigMap of one run: named after its object's uid, so a run applied again starts afresh.

    A Federation's name leaves room (names.MAX_STATEFULSET_NAME) for the ten characters of the hash.
    """
    return f"{federation}-app-{hashlib.sha256(run.uid.encode()).hexdigest()[:10]}"


def account(federation: str) -> str:
    """The bundlers' ServiceAccount: the Federation's, in the SuperLink's namespace."""
    return f"{federation}-{ROLE}"


def labels(fed: Federation, run: Run) -> dict[str, str]:
    """A bundler's labels: the operator's, and its run's name."""
    return {**names.labels(fed.name, "superlink", "app-bundler"), RUN_LABEL: run.name}


def configmap(fed: Federation, run: Run) -> dict[str, Any]:
    """Where the Job writes the bundle: created empty, written by the Job, read by the runner."""
    return identity.configmap(name(fed.name, run), fed.namespace, labels(fed, run))


def job(fed: Federation, run: Run) -> dict[str, Any]:
    """The Job that runs the app's image once: `flwr build` of its directory, written into the ConfigMap."""
    image = run.spec.app.image
    if image is None:
        msg = f"run {run.name!r} takes its app from a ConfigMap: it has no bundler"
        raise ValueError(msg)
    target = name(fed.name, run)
    args = [
        "bundle",
        f"--app={image.path}",
        f"--configmap={target}",
        f"--key={BUNDLE_KEY}",
        f"--work={WORK_DIR}",
        f"--kube-credentials={identity.KUBE_DIR}",
    ]
    mounts = [{"name": identity.KUBE_VOLUME, "mountPath": identity.KUBE_DIR, "readOnly": True}]
    container = identity.program(CONTAINER, image.reference, args, mounts)
    container["env"] = [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    pod = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [identity.program_volume(fed.name), identity.kube_api_volume()],
    }
    own = labels(fed, run)
    metadata = {"name": target, "namespace": fed.namespace, "labels": own}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "template": {
                "metadata": {"labels": dict(own)},
                "spec": pods.harden(pod, account(fed.name), fed.spec),
            },
        },
    }


def service_account(fed: Federation) -> dict[str, Any]:
    """The bundlers' ServiceAccount; its token reaches only the bundler container (identity.kube_api_volume)."""
    return pods.service_account_manifest(account(fed.name), fed.namespace, names.labels(fed.name, "superlink", ROLE))


def role(fed: Federation, configmaps: list[str]) -> dict[str, Any]:
    """Read and write the bundles' ConfigMaps, by name: never empty (no resourceNames would mean every one)."""
    if not configmaps:
        msg = "a Role without resourceNames would reach every ConfigMap"
        raise ValueError(msg)
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"],
            "resourceNames": sorted(configmaps)}  # fmt: skip
    return identity.role(account(fed.name), fed.namespace, names.labels(fed.name, "superlink", ROLE), [rule])


def binding(fed: Federation) -> dict[str, Any]:
    """The Role above, to the bundlers' ServiceAccount alone."""
    labels_ = names.labels(fed.name, "superlink", ROLE)
    return identity.binding(account(fed.name), account(fed.name), fed.namespace, labels_)
