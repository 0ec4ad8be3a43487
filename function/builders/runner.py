"""The runner: the SuperLink pod's sidecar that starts, follows and stops a Federation's FederationRuns.

A FederationRun is a Kubernetes object; Flower's Control API, which starts
runs, stays on the SuperLink pod's loopback (the gate). The function writes
the Federation's wanted runs into one ConfigMap beside the SuperLink
(`<federation>-superlink-runs`: each run's name, uid, run config and deadline,
and the app's bundle until Flower has taken it), which the kubelet keeps in the
runner's volume. The runner (function/programs/run_program.py, the SuperLink's
own image and CLI) submits each new run over the loopback, stops a run whose
object was deleted or whose deadline passed, and reports what Flower records
of each run into a second ConfigMap (`<federation>-superlink-run-status`) that
only the SuperLink's ServiceAccount may write. Crossplane reads that report
back; each FederationRun's status is its entry there.

So who may start a run is who may create a FederationRun in the Federation's
namespace: Kubernetes RBAC, admission and the audit log decide, not reach to
a port.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from typing import Any

from function.api import names, nodeconfig
from function.api.run_spec import FINISHED, PHASES
from function.api.spec import STATE_VOLUME, superlink_state
from function.builders import identity, pods, tls
from function.federation.runs import Run
from function.federation.value import Federation
from function.releases.flower import CONTROL_PORT, LOOPBACK

CONTAINER = "superlink-runner"
WANTED_VOLUME = "wanted-runs"
WANTED_DIR = "/etc/flower-runs"
WANTED_FILE = "runs.json"
WORK_VOLUME = "superlink-runner-work"
WORK_DIR = "/var/run/flower-runner"
STATE_SUBPATH = "runner"
STATE_DIR = "/var/lib/flower-runner"
# The report's one key in the status ConfigMap.
REPORT_FIELD = "runs"
# How often the runner asks Flower about its runs, when nothing it reads changed.
INTERVAL_SECONDS = 5
# What the runs' ConfigMap may hold of bundles at once (a ConfigMap holds 1 MiB, with its other fields).
MAX_BUNDLES_BYTES = 768 * 1024
ROLE = "superlink-runs"

# Bounds on what the report may say, so a report cannot grow a status without limit.
_MAX_TEXT = 1024
_RUN_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")


def wanted_name(federation: str) -> str:
    """The ConfigMap beside the SuperLink that lists the wanted runs, mounted in the runner."""
    return f"{names.superlink(federation)}-runs"


def status_name(federation: str) -> str:
    """The ConfigMap beside the SuperLink where the runner reports each run."""
    return f"{names.superlink(federation)}-run-status"


def bundle_key(run: str) -> str:
    """A run's app bundle in the wanted runs' ConfigMap (run names are DNS labels: valid keys)."""
    return f"{run}.fab"


@dataclasses.dataclass(frozen=True)
class Reported:
    """One run as the runner last reported it: what Flower records of it."""

    uid: str
    phase: str
    run_id: str | None = None
    flower_status: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    reason: str | None = None

    @property
    def finished(self) -> bool:
        """Whether Flower is done with the run."""
        return self.phase in FINISHED


def reported(live: Any) -> dict[str, Reported]:
    """The runs a live status ConfigMap reports, by run name; entries that are not well formed are left out."""
    data = live.get("data") if isinstance(live, dict) else None
    text = data.get(REPORT_FIELD) if isinstance(data, dict) else None
    try:
        entries = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    if not isinstance(entries, dict):
        return {}
    out = {}
    for name, entry in entries.items():
        read = _entry(entry)
        if isinstance(name, str) and names.problem(name, "ConfigMap") is None and read is not None:
            out[name] = read
    return out


def _entry(entry: Any) -> Reported | None:
    if not isinstance(entry, dict) or entry.get("phase") not in PHASES or not isinstance(entry.get("uid"), str):
        return None
    # "" until Flower gave the run an ID (the runner writes every field, always).
    run_id = entry.get("runId") or None
    if run_id is not None and not (isinstance(run_id, str) and _RUN_ID.match(run_id)):
        return None
    return Reported(
        entry["uid"],
        entry["phase"],
        run_id,
        _text(entry.get("flowerStatus")),
        _text(entry.get("startedAt")),
        _text(entry.get("finishedAt")),
        _text(entry.get("reason")),
    )


def _text(value: Any) -> str | None:
    return value[:_MAX_TEXT] if isinstance(value, str) and value else None


def report_of(run: Run, report: dict[str, Reported]) -> Reported | None:
    """This run's entry, if the report has one for this very object (a run of the same name before it is not it)."""
    entry = report.get(run.name)
    return entry if entry is not None and entry.uid == run.uid else None


def bundle(configmap: Any, key: str) -> bytes | str:
    """The app bundle a tenant's ConfigMap holds under key, or why it holds none."""
    if not isinstance(configmap, dict):
        return "not found"
    binary = (configmap.get("binaryData") or {}).get(key)
    if isinstance(binary, str):
        try:
            return base64.b64decode(binary, validate=True)
        except ValueError:
            return f"binaryData {key!r} is not base64"
    if isinstance((configmap.get("data") or {}).get(key), str):
        return f"holds {key!r} as text: a bundle is binary (kubectl create configmap NAME --from-file={key}=APP.fab)"
    return f"has no binaryData {key!r}"


def wanted(
    federation: str,
    namespace: str,
    runs: list[Run],
    bundles: dict[str, bytes],
    labels: dict[str, str],
    bundled: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The wanted runs' ConfigMap: every run of the Federation, and the bundles given (of runs not yet submitted).

    bundled: by run name, the ConfigMap where a bundler Job writes the bundle of a run whose app is an image
    (function/builders/bundler.py), which the runner reads with its token.
    """
    bundled = bundled or {}
    listed = [
        {
            "name": r.name,
            "uid": r.uid,
            "app": bundle_key(r.name) if r.name in bundles else None,
            **({"appConfigMap": bundled[r.name]} if r.name in bundled else {}),
            # Typed as Flower reads a run config: "3" is 3, "true" is true.
            "runConfig": nodeconfig.typed(r.spec.runConfig),
            "deadlineSeconds": r.spec.deadlineSeconds,
        }
        for r in runs
    ]
    text = json.dumps({"runs": listed}, sort_keys=True, separators=(",", ":"))
    manifest = identity.configmap(wanted_name(federation), namespace, labels, data={WANTED_FILE: text})
    if runs:
        # Every listed run keeps its key, emptied once its bundle no longer travels: provider-kubernetes
        # v1.0 (the e2e's 1.30 plane) leaves a key dropped from the manifest in the live ConfigMap
        # (v1.2 removes it), so there a dropped key would keep the bundle's bytes for good.
        carried = {r.name: base64.b64encode(bundles[r.name]).decode() if r.name in bundles else "" for r in runs}
        manifest["binaryData"] = {bundle_key(n): text for n, text in sorted(carried.items())}
    return manifest


def status_configmap(federation: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The runner's report, created empty: the runner writes it, Crossplane only reads it back."""
    return identity.configmap(status_name(federation), namespace, labels, data={REPORT_FIELD: "{}"})


def role(federation: str, namespace: str, labels: dict[str, str], bundled: list[str] | None = None) -> dict[str, Any]:
    """What the SuperLink's ServiceAccount may do for the runner: read and write its report, nothing else.

    And read the bundles its bundler Jobs write (bundled, by name: the rule is there only when there are some).
    """
    rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"],
              "resourceNames": [status_name(federation)]}]  # fmt: skip
    if bundled:
        rules.append({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                      "resourceNames": sorted(bundled)})  # fmt: skip
    return identity.role(f"{federation}-{ROLE}", namespace, labels, rules)


def binding(federation: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The Role above, to the SuperLink's own ServiceAccount: not the pools', whose pods must not report runs."""
    return identity.binding(f"{federation}-{ROLE}", pods.superlink_service_account(federation), namespace, labels)


def container(fed: Federation) -> dict[str, Any]:
    """The runner, a native sidecar of the SuperLink pod in its image, reaching the Control API on the loopback."""
    persistent = superlink_state(fed.spec) is not None
    args = [
        "runner",
        f"--address={LOOPBACK}:{CONTROL_PORT}",
        f"--cli-config={fed.superlink_dialect.cli_config}",
        f"--work={WORK_DIR}",
        f"--state={STATE_DIR if persistent else WORK_DIR + '/state'}",
        f"--wanted={WANTED_DIR}",
        f"--kube-credentials={identity.KUBE_DIR}",
        f"--report={status_name(fed.name)}",
        f"--interval={INTERVAL_SECONDS}",
    ]
    mounts: list[dict[str, Any]] = [
        {"name": WANTED_VOLUME, "mountPath": WANTED_DIR, "readOnly": True},
        {"name": WORK_VOLUME, "mountPath": WORK_DIR},
    ]
    if persistent:
        # Its own folder of the SuperLink's state volume: what it submitted survives a restart as Flower's runs do.
        mounts.append({"name": STATE_VOLUME, "mountPath": STATE_DIR, "subPath": STATE_SUBPATH})
    if tls.enabled(fed.spec):
        args.append(f"--root-certificates={tls.TLS_DIR}/{tls.CA_FILE}")
        mounts.append(tls.ca_mount())
    # The token it reports with (role): only this container and the registrar mount it.
    mounts.append({"name": identity.KUBE_VOLUME, "mountPath": identity.KUBE_DIR, "readOnly": True})
    out = identity.program(CONTAINER, fed.images.superlink, args, mounts)
    out["env"] = [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    out["restartPolicy"] = "Always"
    return out


def volumes(fed: Federation) -> list[dict[str, Any]]:
    """The runner's program, scratch space, the wanted runs (optional: the pod may start first) and its token."""
    return [
        identity.program_volume(fed.name),
        {"name": WORK_VOLUME, "emptyDir": {}},
        {"name": WANTED_VOLUME, "configMap": {"name": wanted_name(fed.name), "optional": True}},
        identity.kube_api_volume(),
    ]
