"""The product as users run it: the package installed by Crossplane, Federations
applied with kubectl, workloads asserted on live objects in every cluster.

The tests of one control plane run in file order and build on each other: the
examples applied by one are what the next changes, faults and finally deletes.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from controlplane import (
    CA_ISSUER,
    CROSSPLANE_NS,
    FUNCTION,
    POLL_SECONDS,
    PROVIDER_SERVICE_ACCOUNT,
    RELEASE,
    SITES,
    ClaimBinder,
    Cluster,
    ControlPlane,
    KubectlError,
    condition,
    cpu_quantity,
    dependencies,
    platform_policy,
    readme_folder,
    readme_steps,
    run_as_written,
    wait_for,
)
from function.api import exposure, names, policy
from function.api.refusals import parse
from function.api.run_spec import ONE_SOURCE
from function.api.spec import ProviderConfigRef
from function.builders import bundler, identity, key_gatherer, netpol, published_keys, superlink
from function.federation import read
from function.federation import runs as read_runs
from function.programs import flwr_control, gather_program, identity_program, key_publications, run_program
from function.releases.flower import CONTROL_PORT
from function.serving import cpus
from support import real_flower, served
from support.peers import CLAIMS, INVALID, ROOT, hack_module, load_all, need
from support.podrunner import PodRunner

build_image = hack_module("build_image")

# Pod Security admission as a cluster admin sets it (docs/pods-and-nodeconfig.md#pod-security):
# every namespace the examples' pods land in refuses pods that break "restricted", but the
# one of gpu-mountall.yaml, whose AMD pool needs a privileged container. The namespaces
# the function creates label themselves (function/composition/compose.py).
POD_SECURITY = {"default": "restricted", "flower": "restricted", "ml-platform": "restricted",
                "gpu-privileged": "privileged"}  # fmt: skip
POD_SECURITY_MODES = ("audit", "enforce", "warn")
READY_TIMEOUT = 300
CONFIGURATION_V2 = pathlib.Path(
    os.environ.get("CONFIGURATION_V2_XPKG") or ROOT / ".cache" / "package" / "configuration-flower-v2.xpkg"
)
V2_EXAMPLE = CLAIMS[0].parent.parent / "v2" / "federation.yaml"
V2_PROVIDER_CONFIGS = V2_EXAMPLE.parent / "providerconfigs.yaml"
V2_TENANT = V2_EXAMPLE.parent / "tenant.yaml"
# A member of the group examples/v2/tenant.yaml binds, as the API server is told who asks.
AS_TENANT = ("--as=alice", "--as-group=team-a")
# The v2 tenant's platform lets podTemplates set one field of its own, which the tenant's
# Federation sets (to what the function sets anyway): a policy to tighten under it.
V2_POLICY = {"podFields": ["automountServiceAccountToken"]}
V2_POD_TEMPLATE = {"spec": {"automountServiceAccountToken": False}}


# Crossplane's and the provider's behaviour alone, which no API server release changes: run on
# the newest minor only (conftest.py); every other scenario runs on every minor.
NEWEST_MINOR = pytest.mark.newest_minor


# -- helpers --------------------------------------------------------------------------------


def claim_of(path: pathlib.Path) -> dict[str, Any]:
    return load_all(path)[0]


def expected_message(path: pathlib.Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: ")
    return first[len("# expect: ") :]


def get_claim(plane: ControlPlane, name: str, namespace: str) -> dict[str, Any] | None:
    return plane.hub.get("federations.flower.crossplane.io", name, namespace)


def ready(obj: dict[str, Any] | None) -> bool:
    return condition(obj, "Ready").get("status") == "True" and condition(obj, "Synced").get("status") == "True"


def wait_ready(plane: ControlPlane, name: str, namespace: str, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
    return wait_for(f"Federation {namespace}/{name} Ready", lambda: _if(ready, get_claim(plane, name, namespace)),
                    timeout=timeout, interval=2)  # fmt: skip


def _if(pred, value):
    return value if pred(value) else None


def composite_of(plane: ControlPlane, claim: dict[str, Any]) -> dict[str, Any]:
    ref = claim["spec"]["resourceRef"]
    return plane.hub.get("xfederations.flower.crossplane.io", ref["name"])


def objects_of(plane: ControlPlane, composite_name: str) -> list[dict[str, Any]]:
    return plane.hub.get("objects.kubernetes.crossplane.io", selector=f"crossplane.io/composite={composite_name}")


def cluster_for(plane: ControlPlane, provider_config: str) -> Cluster:
    return plane.cluster_of(provider_config)


def live(plane: ControlPlane, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object an Object manages, read from the cluster it targets."""
    manifest = obj["spec"]["forProvider"]["manifest"]
    cluster = cluster_for(plane, obj["spec"]["providerConfigRef"]["name"])
    return cluster.get(_resource(manifest), manifest["metadata"]["name"], manifest["metadata"].get("namespace", ""))


def workloads(plane: ControlPlane, composite_name: str) -> dict[str, dict[str, Any]]:
    """name -> live workload, for every StatefulSet and DaemonSet the Federation composed."""
    out = {}
    for obj in objects_of(plane, composite_name):
        if obj["spec"]["forProvider"]["manifest"]["kind"] in ("StatefulSet", "DaemonSet"):
            workload = live(plane, obj)
            assert workload is not None, f"{obj['metadata']['name']} has no live workload"
            out[workload["metadata"]["name"]] = workload
    return out


def columns(plane: ControlPlane, name: str, namespace: str) -> dict[str, str]:
    """`kubectl get federation` as printed: columns cut where the header's names start."""
    out = plane.hub.kubectl("get", "federation", name, "-n", namespace)
    header, row = out.splitlines()[:2]
    starts = [m.start() for m in re.finditer(r"\S+", header)] + [None]
    names = header.split()
    return {n: row[a:b].strip() for n, a, b in zip(names, starts, starts[1:], strict=False)}


def generations(plane: ControlPlane, composite_name: str) -> dict[str, int]:
    """metadata.generation of every Object and of every live object it manages."""
    return generations_of(plane, [composite_name])[composite_name]


def generations_of(plane: ControlPlane, composites: list[str]) -> dict[str, dict[str, int]]:
    """generations() of each composite, read with one list per cluster and kind instead of one get per object:
    the idle test asks for every Federation's objects eight times."""
    # A remote cluster's Objects are its FederationCluster's, composed by a group the Federation composed:
    # counted as the Federation's own.
    parents = {c["metadata"]["name"]: c["metadata"].get("labels", {}).get("crossplane.io/composite")
               for kind in ("xfederationclusters", "xfederationclustergroups")
               for c in plane.hub.get(f"{kind}.flower.crossplane.io")}  # fmt: skip

    def owner(obj: dict[str, Any]) -> str:
        composite = obj["metadata"].get("labels", {}).get("crossplane.io/composite", "")
        while composite in parents:
            composite = parents[composite] or ""
        return composite

    objects = [o for o in plane.hub.get("objects.kubernetes.crossplane.io") if owner(o) in composites]
    wanted: dict[str, tuple[Cluster, set[str]]] = {}
    for obj in objects:
        cluster = cluster_for(plane, obj["spec"]["providerConfigRef"]["name"])
        wanted.setdefault(cluster.name, (cluster, set()))[1].add(_resource(obj["spec"]["forProvider"]["manifest"]))
    found: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for cluster, resources in wanted.values():
        for item in cluster.get(",".join(sorted(resources))):
            meta = item["metadata"]
            found[cluster.name, item["kind"], meta.get("namespace", ""), meta["name"]] = item
    out: dict[str, dict[str, int]] = {c: {} for c in composites}
    for obj in objects:
        mine = out[owner(obj)]
        mine[f"Object/{obj['metadata']['name']}"] = obj["metadata"]["generation"]
        manifest = obj["spec"]["forProvider"]["manifest"]
        cluster = cluster_for(plane, obj["spec"]["providerConfigRef"]["name"])
        key = (cluster.name, manifest["kind"], manifest["metadata"].get("namespace", ""), manifest["metadata"]["name"])
        target = found.get(key)
        if target is not None and "generation" in target["metadata"]:
            mine[f"{manifest['kind']}/{target['metadata']['name']}"] = target["metadata"]["generation"]
    return out


def _resource(manifest: dict[str, Any]) -> str:
    """The resource kubectl lists a manifest's kind under (group-qualified where a bare kind is ambiguous)."""
    return {"StatefulSet": "statefulsets.apps", "DaemonSet": "daemonsets.apps"}.get(manifest["kind"], manifest["kind"])


def openssl_tls_secret(name: str, namespace: str, hosts: list[str]) -> dict[str, Any]:
    """A CA and a server certificate signed by it, as a cluster admin would supply them."""
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)

        def run(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=flower-e2e-ca",
            "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={hosts[0]}", "-keyout", "tls.key", "-out", "tls.csr")
        (d / "ext").write_text("subjectAltName=" + ",".join(f"DNS:{h}" for h in hosts) + "\n")
        run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "ext", "-out", "tls.crt")  # fmt: skip
        data = {k: base64.b64encode((d / k).read_bytes()).decode() for k in ("tls.crt", "tls.key", "ca.crt")}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace}, "data": data}  # fmt: skip


# -- scenarios ------------------------------------------------------------------------------


def test_no_cluster_elects_a_scheduler_or_controller_manager(plane):
    # With leader election on, a lease renewal answered late by a loaded API server
    # made the scheduler exit for good (kwokctl restarts nothing). Without it, no
    # lease is ever written, and each cluster's one scheduler keeps scheduling.
    for cluster in plane.clusters:
        held = {
            lease["metadata"]["name"] for lease in cluster.get("leases.coordination.k8s.io", namespace="kube-system")
        }
        assert not held & {"kube-scheduler", "kube-controller-manager"}, (cluster.name, held)


def test_the_scale_harness_binds_a_new_claim_and_the_volume_controller_keeps_it(plane):
    # The scale benchmark's spokes stand in for hundreds of clusters' volume controllers with a ClaimBinder;
    # here it binds a claim on a real spoke, its controller manager running. A class no volume has, so
    # only the binder can bind it, and a wait after: the controller finds the binding whole and keeps it.
    spoke, namespace, name = plane.sites["site-c"], "default", "e2e-claim-binder"
    stopping = threading.Event()
    binder = ClaimBinder(spoke.reader, stopping, storage_class="made-on-demand")
    threading.Thread(target=binder.run, daemon=True).start()
    try:
        spoke.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": name, "namespace": namespace},
                     "spec": {"storageClassName": "made-on-demand", "accessModes": ["ReadWriteOnce"],
                              "resources": {"requests": {"storage": "1Mi"}}}})  # fmt: skip
        claim = wait_for(
            "the binder binds the claim",
            lambda: (c := spoke.get("pvc", name, namespace)) and c["status"].get("phase") == "Bound" and c,
            timeout=60,
        )
        volume = spoke.get("pv", claim["spec"]["volumeName"])
        assert volume["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"], volume["spec"]["claimRef"]
        assert volume["spec"]["storageClassName"] == "made-on-demand", volume["spec"]
        time.sleep(3 * POLL_SECONDS)  # the volume controller's look at both, by its watch
        assert spoke.get("pvc", name, namespace)["status"]["phase"] == "Bound"
        assert spoke.get("pv", volume["metadata"]["name"])["status"]["phase"] == "Bound"
        assert (binder.bound, binder.failures) == (1, [])
    finally:
        stopping.set()
        spoke.kubectl("delete", "pvc", name, "-n", namespace, "--ignore-not-found")
        # Its volume's hostPath deleter works under /tmp alone: the volume goes by hand, as an admin's would.
        for volume in spoke.get("pv"):
            if (volume["spec"].get("claimRef") or {}).get("name") == name:
                spoke.kubectl("delete", "pv", volume["metadata"]["name"], "--ignore-not-found")


def test_function_installed_by_the_package_manager(plane):
    hub = plane.hub
    function = hub.get("functions.pkg.crossplane.io", FUNCTION)
    assert condition(function, "Installed").get("status") == "True", function.get("status")
    assert condition(function, "Healthy").get("status") == "True", function.get("status")
    revision = next(r for r in hub.get("functionrevisions") if r["spec"]["desiredState"] == "Active")
    # The README's package, pulled from where the platform's ImageConfig points (the e2e's registry).
    readme = yaml.safe_load(plane.function_manifest.read_text())["spec"]["package"]
    assert revision["spec"]["image"] == f"{readme.rsplit(':', 1)[0]}:{RELEASE}"
    assert revision["status"]["resolvedImage"] == plane.function_image
    assert revision["status"]["endpoint"] == f"dns:///{FUNCTION}.{CROSSPLANE_NS}:9443"
    # Crossplane generated the TLS pair the function serves with.
    assert hub.get("secret", f"{FUNCTION}-tls-server", CROSSPLANE_NS)["data"]["tls.crt"]
    # The image the registry serves is the one hack/build_image.py describes.
    assert plane.image_config["User"] == build_image.CONFIG["User"]
    assert plane.image_config["Entrypoint"] == build_image.CONFIG["Entrypoint"]
    assert plane.processes["function"].alive()
    # The runtime config example's CPU limit (the e2e's one CPU) reached the function's container (Crossplane
    # merges the container of that name), and the function, which reads it from its cgroup, starts one worker
    # process per CPU of it: with one, none, and it composes in its own process.
    [wanted] = plane.function_runtime["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
    [container] = plane.function_pod()["containers"]
    assert container["name"] == wanted["name"]
    assert container["resources"] == wanted["resources"], container["resources"]
    limit = cpu_quantity(container["resources"]["limits"]["cpu"])
    # Without a cgroup this machine lets the harness write, nothing holds it to its limit: it sees every CPU.
    cores = min(len(os.sched_getaffinity(0)), math.ceil(limit) if plane.function_group else cpus.AUTO_CAP)
    server = plane.processes["function"].popen.pid
    wait_for("the function's workers", lambda: len(served.workers(server)) == (cores if cores > 1 else 0), timeout=60)
    # It read the limit itself, from its own cgroup (its first words since its last start).
    said = [
        json.loads(line) for line in plane.processes["function"].log.read_text().splitlines() if '"composing"' in line
    ]
    assert said, plane.processes["function"].tail()
    assert said[-1]["cpu_limit"] == (limit if plane.function_group else None), said[-1]


def test_api_installed_from_the_configuration_package(plane):
    hub = plane.hub
    configuration = hub.get("configurations.pkg.crossplane.io", "configuration-flower")
    for kind in ("Installed", "Healthy"):
        assert condition(configuration, kind).get("status") == "True", configuration.get("status")
    revision = next(r for r in hub.get("configurationrevisions.pkg.crossplane.io")
                    if r["spec"]["desiredState"] == "Active")  # fmt: skip
    assert revision["spec"]["image"].endswith(f"/configuration-flower:{RELEASE}")
    # Its dependencies resolved by the package manager, as apis/crossplane.yaml names them: the function
    # installed from the README, the provider installed by the package manager itself, each pulled from
    # the registry that stands in for theirs; both in the Lock.
    lock = {p["source"]: p for p in hub.get("locks.pkg.crossplane.io", "lock")["packages"]}
    for dependency in dependencies():
        package = plane.installed(dependency)
        assert package is not None, dependency
        assert package["status"]["resolvedPackage"].startswith(plane.mirrored[dependency["package"]] + ":")
        assert dependency["package"] in lock, sorted(lock)
    wanted = next(d for d in dependencies() if d["kind"] == "Provider")
    provider = plane.installed(wanted)
    assert provider["metadata"]["name"] == "crossplane-contrib-provider-kubernetes"
    # The range resolved to the release this plane runs, not to the newer one the registry also holds (_mirror).
    resolved = f"{plane.mirrored[wanted['package']]}:{plane.tools.provider.release}"
    assert provider["status"]["resolvedPackage"] == resolved, (wanted["version"], provider["status"])
    # With the examples' runtime: the ServiceAccount the ClusterRoleBinding names.
    deployment = next(d for d in hub.get("deployments", namespace=CROSSPLANE_NS)
                      if d["metadata"]["name"].startswith(provider["metadata"]["name"]))  # fmt: skip
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == PROVIDER_SERVICE_ACCOUNT
    # The package manager made the XRD and the Composition, from the files in apis/.
    for kind, name, path in [
        ("compositeresourcedefinitions", "xfederations.flower.crossplane.io", "apis/definition.yaml"),
        ("compositions", "xfederations.flower.crossplane.io", "apis/composition.yaml"),
        ("compositeresourcedefinitions", "xfederationclusters.flower.crossplane.io", "apis/cluster-definition.yaml"),
        ("compositions", "xfederationclusters.flower.crossplane.io", "apis/cluster-composition.yaml"),
        ("compositeresourcedefinitions", "xfederationclustergroups.flower.crossplane.io", "apis/group-definition.yaml"),
        ("compositions", "xfederationclustergroups.flower.crossplane.io", "apis/group-composition.yaml"),
        ("compositeresourcedefinitions", "xfederationruns.flower.crossplane.io", "apis/run-definition.yaml"),
        ("compositions", "xfederationruns.flower.crossplane.io", "apis/run-composition.yaml"),
    ]:
        live_obj = hub.get(kind, name)
        owners = {(o["kind"], o["name"]) for o in live_obj["metadata"].get("ownerReferences", [])}
        assert ("ConfigurationRevision", revision["metadata"]["name"]) in owners, (kind, owners)
        committed = yaml.safe_load((ROOT / path).read_text())
        if kind == "compositions":
            assert live_obj["spec"] == committed["spec"]
            assert live_obj["metadata"]["labels"].items() >= committed["metadata"]["labels"].items()
        else:
            schema = lambda xrd: xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # noqa: E731
            assert schema(live_obj) == schema(committed)


def test_image_holds_the_locked_dependencies(plane):
    site = next((plane.function_rootfs / "venv" / "fn" / "lib").glob("python3.*/site-packages"))
    installed = {}
    for dist in site.glob("*.dist-info"):
        name, version = dist.name[: -len(".dist-info")].rsplit("-", 1)
        installed[name.lower().replace("_", "-")] = version
    locked = dict(line.split("==") for line in (ROOT / "requirements.lock").read_text().split() if "==" in line)
    locked = {k.lower().replace("_", "-"): v for k, v in locked.items()}
    assert installed.pop("function-flower")
    assert installed, "no dependency in the image"
    assert {k: v for k, v in installed.items() if locked.get(k) != v} == {}
    # Test-only dependencies stay out of the image.
    assert "pytest" not in installed and "kubernetes-validate" not in installed
    assert not (plane.function_rootfs / "bin" / "sh").exists(), "the runtime image has a shell"


def test_invalid_examples_are_refused_at_admission(plane):
    for bad in INVALID:
        proc = plane.hub.apply(*load_all(bad), check=False)
        assert proc.returncode != 0, f"{bad.name} was admitted"
        assert expected_message(bad) in proc.stderr, f"{bad.name}: {proc.stderr}"
    assert plane.hub.get("xfederations.flower.crossplane.io") == []


def test_a_federation_moves_to_newer_flower_never_back_a_minor(plane):
    """The API server's transition rule on spec.version (function/api/spec.py NO_DOWNGRADE), on a live claim,
    by server-side dry runs: forward and across patches admitted, back a minor refused, saying why."""
    example = next(c for c in CLAIMS if c.name == "flower-141.yaml")
    claim = claim_of(example)
    name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    assert claim["spec"]["version"] == "1.41.0"
    plane.hub.kubectl("apply", "-f", str(example))

    def refusal(version: str) -> str:
        """What the API server says to the move, "" when it admits it."""
        patch = json.dumps({"spec": {"version": version}})
        try:
            plane.hub.kubectl("patch", "federation", name, "-n", namespace, "--type=merge", "-p", patch,
                              "--dry-run=server")  # fmt: skip
        except KubectlError as err:
            return err.stderr
        return ""

    for admitted in ("1.42.0", "1.41.3", "1.41.0-py3.11-ubuntu24.04", "v1.043.0"):
        assert refusal(admitted) == "", admitted
    for refused in ("1.40.0", "1.38.2", "v1.40.9"):
        assert "cannot move to an older Flower minor release" in refusal(refused), refused


@NEWEST_MINOR
def test_function_only_errors_show_in_synced_and_compose_nothing(plane):
    # A Kubernetes-typed field the XRD leaves open: only the function checks it.
    claim = claim_of(next(c for c in CLAIMS if c.name == "quickstart.yaml"))
    claim["metadata"] = {"name": "bad-mount", "namespace": "default"}
    claim["spec"]["supernodes"]["pools"][0]["volumeMounts"] = [{"name": "data"}]
    plane.hub.apply(claim)

    def synced_false():
        claim = get_claim(plane, "bad-mount", "default")
        if not (claim and claim["spec"].get("resourceRef")):
            return None
        cond = condition(composite_of(plane, claim), "Synced")
        return cond if cond.get("status") == "False" else None

    cond = wait_for("the fatal result in the composite's Synced", synced_false, timeout=120, interval=2)
    assert cond["message"].endswith(
        "returned a fatal result: invalid Federation: spec.supernodes.pools[0].volumeMounts[0]: "
        "'mountPath' is a required property"
    ), cond["message"]
    composite = composite_of(plane, get_claim(plane, "bad-mount", "default"))
    time.sleep(20)  # a poll interval: still nothing composed
    assert objects_of(plane, composite["metadata"]["name"]) == []
    assert condition(get_claim(plane, "bad-mount", "default"), "Ready").get("status") == "False"
    plane.hub.kubectl("delete", "federation", "bad-mount", "-n", "default", "--wait=true", timeout=120)


def label_nodes_for(plane: ControlPlane, paths: list[pathlib.Path]) -> None:
    """Label the fake nodes as a cluster admin would for the examples' pools:
    every node gets a label only one value of is asked for; values of a key
    asked with several (pool a, pool b) go round the nodes."""
    values: dict[str, set[str]] = {}
    for path in paths:
        for pool in claim_of(path)["spec"]["supernodes"]["pools"]:
            selector = ((pool.get("podTemplate") or {}).get("spec") or {}).get("nodeSelector") or {}
            for key, value in selector.items():
                values.setdefault(key, set()).add(value)
    for cluster in (plane.hub, plane.spoke):
        nodes = sorted(n["metadata"]["name"] for n in cluster.get("nodes"))
        for i, node in enumerate(nodes):
            labels = [f"{k}={sorted(v)[i % len(v)]}" for k, v in sorted(values.items())]
            cluster.kubectl("label", "node", node, "--overwrite", *labels)


def label_site(plane: ControlPlane, site: str, labels: dict[str, str | None]) -> None:
    """Label a site's ProviderConfig as a platform team would; None removes a label."""
    changes = [f"{k}-" if v is None else f"{k}={v}" for k, v in sorted(labels.items())]
    plane.hub.kubectl("label", "providerconfigs.kubernetes.crossplane.io", site, "--overwrite", *changes)


def test_every_example_becomes_ready(plane):
    hub = plane.hub
    # What the examples expect a cluster admin to have made: nodes labelled for
    # the pools' selectors, the claims' namespaces in every cluster (pools
    # without createNamespace land in theirs), the Secret tls-secret.yaml names,
    # (persistence-auth.yaml's too), the shared data set volumes.yaml mounts,
    # production.yaml's pull Secret, and the CA Secret a spoke's platform team put in
    # place (tls-cert-manager-multicluster.yaml's pool us). The control plane
    # already has cert-manager with the ClusterIssuer flower-ca.
    label_nodes_for(plane, CLAIMS)
    # Pools that follow clusters by label: two of the three sites carry each one's labels.
    for path in CLAIMS:
        for pool in claim_of(path)["spec"]["supernodes"]["pools"]:
            if "clusterSelector" in pool:
                for site in SITES[:2]:
                    label_site(plane, site, pool["clusterSelector"]["matchLabels"])
    for cluster in (hub, plane.spoke):
        for namespace, level in sorted(POD_SECURITY.items()):
            labels = {f"pod-security.kubernetes.io/{mode}": level for mode in POD_SECURITY_MODES}
            cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}})
    hub.apply(openssl_tls_secret("superlink-tls", "default", ["federation-tls-superlink.default.svc"]))
    hub.apply(
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
         "metadata": {"name": "registry-credentials", "namespace": "ml-platform"},
         "stringData": {".dockerconfigjson": json.dumps({"auths": {"registry.example.com": {"auth": "ZTI6ZTI="}}})}},
    )  # fmt: skip
    plane.spoke.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": CA_ISSUER, "namespace": "flower"},
                       "data": {"ca.crt": plane.ca_certificate()}})  # fmt: skip
    hub.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "training-data-pvc", "namespace": "default"},
               "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                        "resources": {"requests": {"storage": "10Gi"}}}})  # fmt: skip
    for path in CLAIMS:
        hub.kubectl("apply", "-f", str(path))
    for path in CLAIMS:
        claim = claim_of(path)
        name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
        live_claim = wait_ready(plane, name, namespace)
        check_status(plane, path, live_claim)


QUICKSTART = CLAIMS[0].parent / "quickstart.yaml"
# What the API server adds to what was applied, which a manifest to apply does not carry.
SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "ownerReferences")


def as_applied(obj: dict[str, Any]) -> dict[str, Any]:
    """A live object as a manifest: what it holds, less its status and what the API server keeps of it."""
    manifest = {k: v for k, v in obj.items() if k != "status"}
    manifest["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in SERVER_FIELDS}
    return manifest


def test_a_tenant_who_may_read_claims_alone_sees_why_on_the_claim(plane, tmp_path):
    """The function's conditions reach the claim, where a tenant with rights on claims only reads them.

    From the tenant's seat: a ServiceAccount whose Role lets it read Federation claims in their
    namespace and nothing else; the API server refuses it the composite.
    """
    hub = plane.hub
    claim = claim_of(QUICKSTART)
    name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    rights = [{"apiGroups": ["flower.crossplane.io"], "resources": ["federations"], "verbs": ["get", "list", "watch"]}]
    hub.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant", "namespace": namespace}})
    hub.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "tenant", "namespace": namespace}, "rules": rights})  # fmt: skip
    hub.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "tenant", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
               "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}]})  # fmt: skip
    tenant = as_token(hub, hub.kubectl("create", "token", "tenant", "-n", namespace).strip(), tmp_path)
    composite = tenant.kubectl("auth", "can-i", "get", "xfederations.flower.crossplane.io", check=False)
    assert composite.strip() == "no", composite

    def conditions() -> dict[str, str] | None:
        out = tenant.kubectl("get", "federations.flower.crossplane.io", name, "-n", namespace, "-o", "json")
        found = {c["type"]: c["status"] for c in (json.loads(out).get("status") or {}).get("conditions") or []}
        return found if {"SuperLinkReady", "SuperNodesReady"} <= set(found) else None

    seen = wait_for("the function's conditions on the claim, read by the tenant", conditions, timeout=240)
    assert seen["SuperLinkReady"] == "True", seen


# -- FederationRuns: a Flower run as a Kubernetes object (function/composition/runs.py) ----------------

RUNS_GROUP = "flower.crossplane.io"
# A FederationRun's author: runs and their bundles in their namespace, and nothing else.
RUN_AUTHOR_RIGHTS = [
    {"apiGroups": [RUNS_GROUP], "resources": ["federationruns"], "verbs": ["create", "get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]},
]
# What a run's status takes to move: the run's call polls every 15 s, the Federation's every 60 s, and
# provider-kubernetes observes a Ready Object's ConfigMap every minute.
RUN_TIMEOUT = 240
# Any bytes do as a bundle here (no runner runs on KWOK); not UTF-8, so kubectl stores them as binaryData.
FAKE_BUNDLE = b"PK\x03\x04\xff\xfe not a real Flower App Bundle \x00\x01\x02"


def account_with(hub: Cluster, name: str, namespace: str, rules: list[dict[str, Any]], work: pathlib.Path) -> Cluster:
    """A ServiceAccount granted rules in namespace by a Role (none when rules is empty); the cluster as it sees it."""
    hub.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}})
    if rules:
        hub.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": name, "namespace": namespace}, "rules": rules},
                  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": name, "namespace": namespace},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                   "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})  # fmt: skip
    return as_token(hub, hub.kubectl("create", "token", name, "-n", namespace).strip(), work / name)


def federation_run(name: str, namespace: str, federation: str, app: dict[str, Any], **fields: Any) -> str:
    """A FederationRun as its author writes it: its app's source, and any other fields of its spec."""
    return yaml.safe_dump({
        "apiVersion": "flower.crossplane.io/v1alpha1", "kind": "FederationRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"federation": federation, "app": app, **fields},
    })  # fmt: skip


def bundled_run(name: str, namespace: str, federation: str, bundle: str) -> str:
    """A FederationRun of a bundle in a ConfigMap, two rounds, ten minutes at most."""
    return federation_run(name, namespace, federation, {"configMap": {"name": bundle}},
                          runConfig={"num-server-rounds": "2"}, deadlineSeconds=600)  # fmt: skip


def submit_run(author: Cluster, name: str, namespace: str, federation: str, work: pathlib.Path) -> None:
    """The author's two steps: the bundle as a ConfigMap, then the run naming it."""
    fab = work / f"{name}.fab"
    fab.write_bytes(FAKE_BUNDLE)
    author.kubectl("create", "configmap", f"{name}-app", "-n", namespace, f"--from-file=app.fab={fab}")
    author.kubectl("create", "-f", "-", stdin=bundled_run(name, namespace, federation, f"{name}-app"))


def run_of(cluster: Cluster, name: str, namespace: str) -> dict[str, Any]:
    """A FederationRun as `kubectl get -o json` shows it to whoever holds cluster's credentials."""
    return json.loads(cluster.kubectl("get", f"federationruns.{RUNS_GROUP}", name, "-n", namespace, "-o", "json"))


def wanted_runs(hub: Cluster, federation: str, namespace: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The Federation's runs list beside its SuperLink: each run by name, and the bundles it holds."""
    live_cm = hub.get("configmap", f"{names.superlink(federation)}-runs", namespace) or {}
    listed = json.loads((live_cm.get("data") or {}).get("runs.json") or '{"runs": []}')["runs"]
    return {r["name"]: r for r in listed}, live_cm.get("binaryData") or {}


# What kubectl says when the API server's answer never came (its connection cut under load): no
# verdict on the request, which is sent again. Once seen in CI: "...: unexpected EOF".
UNANSWERED = ("unexpected EOF", "connection reset by peer", "connection refused", "http2: client connection lost")
UNANSWERED_TRIES = 3


def refused_as(cluster: Cluster, *args: str, stdin: str | None = None) -> str:
    """The API server's refusal of a kubectl command; fails if the command was allowed.

    Only an answer is judged: a request the server never answered is sent again, a few times.
    """
    for attempt in range(UNANSWERED_TRIES):
        try:
            out = cluster.kubectl(*args, stdin=stdin)
        except KubectlError as err:
            if any(words in err.stderr for words in UNANSWERED) and attempt + 1 < UNANSWERED_TRIES:
                time.sleep(2)
                continue
            assert "Forbidden" in err.stderr or "forbidden" in err.stderr, err.stderr
            return err.stderr
        msg = f"allowed: kubectl {' '.join(args)}: {out}"
        raise AssertionError(msg)
    msg = "unreachable: the last try returns or raises"
    raise AssertionError(msg)


def test_a_tenant_runs_flower_on_the_quickstart_through_a_federation_run(plane, tmp_path):
    """From a run author's seat: with rights on FederationRuns and ConfigMaps in their namespace alone, they
    apply a bundle and a FederationRun naming the quick start's Federation and read its status; acting as
    the SuperLink's runner (its ServiceAccount's token), the report of the run reaches the run's status
    and `kubectl get federation`. From the attacker's seat: that token writes no other ConfigMap, the
    SuperNodes' account writes no report, an account without rights on runs creates none, and a run naming
    a Federation of another namespace reaches nothing. Deleting the run takes it off the runs list."""
    hub = plane.hub
    claim = claim_of(QUICKSTART)
    fed, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    hub.kubectl("apply", "-f", str(QUICKSTART))  # as test_every_example_becomes_ready left it, or on its own
    wait_ready(plane, fed, namespace)
    author = account_with(hub, "run-author", namespace, RUN_AUTHOR_RIGHTS, tmp_path)
    run = "first-run"
    submit_run(author, run, namespace, fed, tmp_path)

    # Pending, saying why, until the runner reports the run; listed beside the SuperLink with its bundle.
    pending = wait_for("the run Pending with a reason", lambda: _if(
        lambda s: s.get("phase") == "Pending" and "runner" in (s.get("reason") or ""),
        run_of(author, run, namespace).get("status") or {}), timeout=RUN_TIMEOUT)  # fmt: skip
    assert pending["reason"] == "waiting for the SuperLink's runner to take the run", pending
    listed, bundles = wait_for("the run on the Federation's runs list",
                               lambda: _if(lambda w: run in w[0], wanted_runs(hub, fed, namespace)),
                               timeout=RUN_TIMEOUT)  # fmt: skip
    composite = hub.get(f"xfederationruns.{RUNS_GROUP}", run_of(hub, run, namespace)["spec"]["resourceRef"]["name"])
    assert listed[run]["uid"] == composite["metadata"]["uid"], listed[run]
    # Typed as Flower reads a run config: "2" is 2.
    assert listed[run]["runConfig"] == {"num-server-rounds": 2} and listed[run]["deadlineSeconds"] == 600
    assert base64.b64decode(bundles[listed[run]["app"]]) == FAKE_BUNDLE, sorted(bundles)

    # The runner's seat: the SuperLink's account reports the run, by the uid the runs list gives.
    superlink_account = names.superlink(fed)
    runner, patch = report_completed(hub, fed, namespace, run, listed[run]["uid"], tmp_path / "runner")
    report = f"{superlink_account}-run-status"
    # The attacker's seat: the same token on any other ConfigMap, or making one; the SuperNodes' on the report.
    refused_as(runner, "patch", "configmap", f"{superlink_account}-runs", "-n", namespace, "--type=merge", "-p", patch)
    refused_as(runner, "patch", "configmap", f"{run}-app", "-n", namespace, "--type=merge", "-p", patch)
    refused_as(runner, "create", "configmap", "planted", "-n", namespace, "--from-literal=runs={}")
    pool = as_token(hub, hub.kubectl("create", "token", f"{fed}-flower", "-n", namespace).strip(), tmp_path / "pool")
    refused_as(pool, "patch", "configmap", report, "-n", namespace, "--type=merge", "-p", patch)

    # The author reads Flower's word on the run, from the API server.
    # The claim takes its composite's status and conditions in separate writes: wait for both.
    done = wait_for("the run Completed on its status, Succeeded", lambda: _if(
        lambda r: (r.get("status") or {}).get("phase") == "Completed" and condition(r, "Succeeded").get("status")
        == "True", run_of(author, run, namespace)), timeout=RUN_TIMEOUT)  # fmt: skip
    assert done["status"]["runId"] == "4242", done["status"]
    # A run composes nothing: it is Ready because the function says so, once Flower has run it.
    wait_for("the completed run Ready", lambda: condition(run_of(author, run, namespace), "Ready").get("status")
             == "True", timeout=60)  # fmt: skip
    wait_for("the run in LATEST-RUN", lambda: columns(plane, fed, namespace).get("LATEST-RUN") ==
             f"{run} (Completed)", timeout=RUN_TIMEOUT)  # fmt: skip
    # Flower has the run: its bundle no longer travels (its key stays, empty: see runner.wanted).
    wait_for("the bundle dropped from the runs list", lambda: _if(
        lambda w: run in w[0] and w[0][run]["app"] is None and not any(w[1].values()),
        wanted_runs(hub, fed, namespace)), timeout=RUN_TIMEOUT)  # fmt: skip

    # No rights on runs, no run: the API server refuses it.
    bystander = account_with(hub, "bystander", namespace, [], tmp_path)
    refused_as(bystander, "create", "-f", "-", stdin=bundled_run("stolen", namespace, fed, f"{run}-app"))
    # A run naming a Federation of another namespace (its author's namespace has none by that name).
    elsewhere = "run-elsewhere"
    hub.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": elsewhere}})
    other = account_with(hub, "run-author", elsewhere, RUN_AUTHOR_RIGHTS, tmp_path / elsewhere)
    submit_run(other, "reaching", elsewhere, fed, tmp_path)
    stuck = wait_for("the run in another namespace Pending, saying why", lambda: _if(
        lambda s: s.get("phase") == "Pending" and "no Federation" in (s.get("reason") or ""),
        run_of(other, "reaching", elsewhere).get("status") or {}), timeout=RUN_TIMEOUT)  # fmt: skip
    assert stuck["reason"] == f"no Federation {fed!r} in namespace {elsewhere!r}", stuck
    assert "reaching" not in wanted_runs(hub, fed, namespace)[0]

    # Deleted by its author: off the runs list within a reconcile or two of the Federation.
    author.kubectl("delete", f"federationruns.{RUNS_GROUP}", run, "-n", namespace, "--wait=true", timeout=120)
    wait_for("the run off the runs list", lambda: run not in wanted_runs(hub, fed, namespace)[0], timeout=RUN_TIMEOUT)
    assert "reaching" not in wanted_runs(hub, fed, namespace)[0]
    other.kubectl("delete", f"federationruns.{RUNS_GROUP}", "reaching", "-n", elsewhere, "--wait=true", timeout=120)
    hub.kubectl("delete", "namespace", elsewhere, "--wait=false")


def report_completed(hub: Cluster, fed: str, namespace: str, run: str, uid: str,
                     work: pathlib.Path) -> tuple[Cluster, str]:  # fmt: skip
    """The runner's seat (no pod runs on KWOK): with the SuperLink's token, report run (by the uid the runs list
    gives) as Flower's finished run 4242 on the report ConfigMap. The runner's view of the hub, and the patch."""
    account = names.superlink(fed)
    runner = as_token(hub, hub.kubectl("create", "token", account, "-n", namespace).strip(), work)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entry = {"uid": uid, "runId": "4242", "phase": "Completed", "flowerStatus": "finished:completed",
             "startedAt": now, "finishedAt": now}  # fmt: skip
    patch = json.dumps({"data": {"runs": json.dumps({run: entry})}})
    runner.kubectl("patch", "configmap", f"{account}-run-status", "-n", namespace, "--type=merge", "-p", patch)
    return runner, patch


def flower_python(claim: dict[str, Any]) -> tuple[str, pathlib.Path]:
    """The Flower release a claim's SuperLink runs, and the Python of its venv (FLWR_VENVS): what its CLI is."""
    version = claim["spec"]["superlink"]["image"].rsplit(":", 1)[1]
    python = real_flower.venv_python(version)
    need(python is not None, f"a venv of Flower {version} (FLWR_VENVS; `make flower-venv-newest`)")
    assert python is not None
    return version, python


def tenant_roles() -> dict[str, list[dict[str, Any]]]:
    """The rules of each Role examples/v2/tenant.yaml grants a team, by the Role's name."""
    return {d["metadata"]["name"]: d["rules"] for d in load_all(V2_TENANT) if d["kind"] == "Role"}


def test_the_readme_tenant_path_runs_as_written(plane, tmp_path):
    """README "Install on your cluster", the tenants' blocks, each line as written in a shell (the platform's ran
    when the plane was installed): as an account holding only tenant.yaml's federation-author Role, the quick
    start's Federation applied and waited Ready; as one holding only its federation-runner Role, Flower's own
    `flwr build` of examples/app, the bundle's ConfigMap, examples/runs/smoke.yaml and `kubectl wait` for the
    run Succeeded. KWOK runs no pod: between the apply and the wait the test plays the SuperLink's runner."""
    hub = plane.hub
    claim = claim_of(QUICKSTART)
    fed, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    _, python = flower_python(claim)
    roles = tenant_roles()
    author = account_with(hub, "readme-author", namespace, roles["federation-author"], tmp_path)
    run_as_written(author, "federation", tmp_path / "author")
    assert condition(get_claim(plane, fed, namespace), "Ready").get("status") == "True"

    runner = account_with(hub, "readme-runner", namespace, roles["federation-runner"], tmp_path)
    *submit, wait = readme_steps("tenant")
    assert wait.startswith("kubectl wait federationrun/"), wait
    [smoke] = load_all(ROOT / "examples" / "runs" / "smoke.yaml")
    run, bundle_map = smoke["metadata"]["name"], smoke["spec"]["app"]["configMap"]["name"]
    assert wait.split()[2] == f"federationrun/{run}", wait
    work = readme_folder(tmp_path / "runner-work")
    for line in submit:
        runner.shell(line, work, [python.parent])
    listed = wait_for(f"run {run} on the Federation's runs list, with its bundle", lambda: _if(
        lambda entry: entry and entry.get("app"), wanted_runs(hub, fed, namespace)[0].get(run)),
        timeout=RUN_TIMEOUT)  # fmt: skip
    # The bundle Flower's CLI built, as the runs list carries it to the runner.
    bundle = base64.b64decode(wanted_runs(hub, fed, namespace)[1][listed["app"]])
    with zipfile.ZipFile(io.BytesIO(bundle)) as fab:
        assert "pyproject.toml" in fab.namelist(), fab.namelist()
    report_completed(hub, fed, namespace, run, listed["uid"], tmp_path / "superlink")
    runner.shell(wait, work)
    assert run_of(runner, run, namespace)["status"]["phase"] == "Completed"
    runner.kubectl("delete", f"federationruns.{RUNS_GROUP}", run, "-n", namespace, "--wait=true", timeout=120)
    runner.kubectl("delete", "configmap", bundle_map, "-n", namespace)


def image_run(name: str, namespace: str, federation: str, image: str, *, also_configmap: bool = False) -> str:
    """A FederationRun whose app is an image, as its author writes it (with a ConfigMap too, if asked)."""
    app: dict[str, Any] = {"image": {"reference": image}}
    if also_configmap:
        app["configMap"] = {"name": f"{name}-app"}
    return federation_run(name, namespace, federation, app)


def run_bundler(cluster: Cluster, token: str, namespace: str, target: str, app: pathlib.Path, work: pathlib.Path,
                python: pathlib.Path) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The bundler Job's container as it runs in the app's image: the program's archive from the function's
    ConfigMap, `python ARCHIVE bundle ...` with the image's Python and flwr, the Job's token and namespace."""
    host, port, credentials = api_credentials(cluster, token, work)
    archive = work / identity.PROGRAM_FILE
    archive.write_bytes(base64.b64decode(identity.PROGRAM_ARCHIVE))
    args = [f"--app={app}", f"--configmap={target}", f"--key={bundler.BUNDLE_KEY}", f"--work={work / 'scratch'}",
            f"--kube-credentials={credentials}"]  # fmt: skip
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
           "POD_NAMESPACE": namespace, "PATH": f"{python.parent}:{os.environ['PATH']}"}  # fmt: skip
    return subprocess.run([str(python), str(archive), "bundle", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


def runner_fetches(hub: Cluster, fed: str, namespace: str, work: pathlib.Path) -> dict[str, Any]:
    """The runner program's fetch step (run_program.fetch_apps) at the real API server with the SuperLink's
    token, over the runs list as the kubelet would write it into the runner's volume: each run by name."""
    listed = work / "wanted"
    listed.mkdir(parents=True)
    data = hub.get("configmap", f"{names.superlink(fed)}-runs", namespace)["data"]
    (listed / run_program.WANTED_FILE).write_text(data[run_program.WANTED_FILE])
    token = hub.kubectl("create", "token", names.superlink(fed), "-n", namespace).strip()
    host, port, credentials = api_credentials(hub, token, work)
    wanted = run_program.fetch_apps(run_program.read_wanted(listed), {}, flwr_control.KubeApi(host, port, credentials),
                                    namespace, work / "fetched") or []  # fmt: skip
    return {w.name: w for w in wanted}


def _read_as(cluster: Cluster, configmap: str, namespace: str) -> dict[str, Any] | None:
    """A ConfigMap as the holder of cluster's token reads it; None while refused (its Role not there yet)."""
    try:
        return json.loads(cluster.kubectl("get", "configmap", configmap, "-n", namespace, "-o", "json"))
    except KubectlError:
        return None


def run_composite_of(hub: Cluster, author: Cluster, name: str, namespace: str) -> dict[str, Any]:
    """A FederationRun claim's composite, once Crossplane has bound the claim to one and made it (the claim
    may name its composite a moment before the composite exists)."""

    def composite() -> dict[str, Any] | None:
        ref = run_of(author, name, namespace)["spec"].get("resourceRef")
        return hub.get(f"xfederationruns.{RUNS_GROUP}", ref["name"]) if ref else None

    found: dict[str, Any] = wait_for(f"run {name}'s composite", composite, timeout=RUN_TIMEOUT)
    return found


def image_runs_refused(hub: Cluster, author: Cluster, fed: str, namespace: str) -> None:
    """A run names one source of its app (the XRD's rule, at the API server); an image of a registry the
    platform's policy does not name is refused on the run, naming the field."""
    with pytest.raises(KubectlError) as both:
        author.kubectl("create", "-f", "-", stdin=image_run("both", namespace, fed, "registry.example.com/ml/a:1",
                                                            also_configmap=True))  # fmt: skip
    assert ONE_SOURCE in both.value.stderr, both.value.stderr
    author.kubectl("create", "-f", "-", stdin=image_run("elsewhere", namespace, fed, "ghcr.io/someone/app:1"))
    composite = run_composite_of(hub, author, "elsewhere", namespace)
    refusal = wait_for("the refusal on the run's composite", lambda: _if(
        lambda c: c.get("status") == "False" and "runImages" in c.get("message", ""),
        condition(hub.get(f"xfederationruns.{RUNS_GROUP}", composite["metadata"]["name"]), "Synced")),
        timeout=RUN_TIMEOUT)  # fmt: skip
    assert "spec.app.image.reference" in refusal["message"], refusal


def bundled_as_the_job(hub: Cluster, fed: str, namespace: str, target: str, python: pathlib.Path,
                       work: pathlib.Path) -> bytes:  # fmt: skip
    """The Job's seat: the real program and Flower's `flwr build` of examples/app, with the Job's token, fill
    the run's ConfigMap; that token writes no other ConfigMap, makes none and reads no Secret. The bundle."""
    app = work / "app"
    shutil.copytree(real_flower.APP, app, ignore=shutil.ignore_patterns("__pycache__"))
    # Its ServiceAccount is an Object of its own, applied in any order beside the Job.
    wait_for(f"ServiceAccount {bundler.account(fed)}", lambda: hub.get("serviceaccounts", bundler.account(fed),
                                                                        namespace), timeout=RUN_TIMEOUT)  # fmt: skip
    token = hub.kubectl("create", "token", bundler.account(fed), "-n", namespace).strip()
    # Its Role may come a moment after the Job (Objects apply in any order): the Job retries a failed pod.
    tries: list[subprocess.CompletedProcess[str]] = []
    wait_for("the bundle written with the Job's token", lambda: tries.append(
        run_bundler(hub, token, namespace, target, app, work / "bundler", python)) or tries[-1].returncode == 0,
        timeout=120, interval=5)  # fmt: skip
    made = base64.b64decode(hub.get("configmap", target, namespace)["binaryData"][bundler.BUNDLE_KEY])
    with zipfile.ZipFile(io.BytesIO(made)) as fab:
        assert "pyproject.toml" in fab.namelist(), fab.namelist()
    as_job = as_token(hub, token, work / "job")
    patch = json.dumps({"data": {"planted": "yes"}})
    for other in (f"{names.superlink(fed)}-runs", f"{names.superlink(fed)}-run-status"):
        refused_as(as_job, "patch", "configmap", other, "-n", namespace, "--type=merge", "-p", patch)
    refused_as(as_job, "create", "configmap", "planted", "-n", namespace, "--from-literal=a=b")
    refused_as(as_job, "get", "secrets", "-n", namespace)
    return made


def test_a_run_from_an_image_is_bundled_by_its_job_and_read_by_the_runner_alone(plane, tmp_path):
    """From a run author's seat: a run names one source of its app (the API server says so), an image the
    platform's policy does not admit is refused on the run, and one it admits gets a Job beside the
    SuperLink. From the Job's seat (its ServiceAccount's token, the real program and Flower's own `flwr
    build` of examples/app): the bundle lands in the run's ConfigMap, and that token writes nothing else.
    From the runner's seat: the SuperLink's token reads that bundle and no tenant's ConfigMap. Once Flower
    has the run, its Job, ConfigMap and the bundler's rights go."""
    hub = plane.hub
    claim = claim_of(QUICKSTART)
    fed, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    version, python = flower_python(claim)
    hub.kubectl("apply", "-f", str(QUICKSTART))
    wait_ready(plane, fed, namespace)
    author = account_with(hub, "image-run-author", namespace, RUN_AUTHOR_RIGHTS, tmp_path)

    image_runs_refused(hub, author, fed, namespace)

    image = f"registry.example.com/ml/serverapp:{version}"
    run = "from-image"
    author.kubectl("create", "-f", "-", stdin=image_run(run, namespace, fed, image))
    target = bundler.name(fed, read_runs.run(run_composite_of(hub, author, run, namespace)))
    wait_for("the run Pending on its Job", lambda: _if(
        lambda s: f"Job {namespace}/{target}" in (s.get("reason") or ""),
        run_of(author, run, namespace).get("status") or {}), timeout=RUN_TIMEOUT)  # fmt: skip
    job = wait_for(f"Job {target}", lambda: hub.get("jobs.batch", target, namespace), timeout=RUN_TIMEOUT)
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == image and pod["serviceAccountName"] == bundler.account(fed), pod
    # The runs list and the ConfigMap are Objects of their own, applied in any order beside the Job.
    listed, _ = wait_for("the run on the runs list", lambda: _if(lambda w: run in w[0] and "elsewhere" in w[0],
                                                                 wanted_runs(hub, fed, namespace)),
                         timeout=RUN_TIMEOUT)  # fmt: skip
    assert listed[run]["appConfigMap"] == target and listed[run]["app"] is None, listed[run]
    assert "appConfigMap" not in listed["elsewhere"], "a refused image is bundled by none"
    wait_for("its ConfigMap, created empty for the Job to fill", lambda: hub.get("configmap", target, namespace),
             timeout=RUN_TIMEOUT)  # fmt: skip

    made = bundled_as_the_job(hub, fed, namespace, target, python, tmp_path)

    # The runner's seat: the SuperLink's token reads the bundle, and no tenant's ConfigMap.
    runner = as_token(hub, hub.kubectl("create", "token", names.superlink(fed), "-n", namespace).strip(),
                      tmp_path / "runner")  # fmt: skip
    read_back = wait_for("the bundle read with the runner's token", lambda: _read_as(runner, target, namespace),
                         timeout=120, interval=5)  # fmt: skip
    assert base64.b64decode(read_back["binaryData"][bundler.BUNDLE_KEY]) == made
    # And the runner's own fetch step, with that token, from the runs list as the kubelet would mount it.
    fetched = runner_fetches(hub, fed, namespace, tmp_path / "runner-program")
    assert fetched[run].bundle is not None and fetched[run].bundle.read_bytes() == made, fetched[run]
    author.kubectl("create", "configmap", "tenant-notes", "-n", namespace, "--from-literal=a=b")
    refused_as(runner, "get", "configmap", "tenant-notes", "-n", namespace)

    # Flower has the run (the runner reports its ID): its Job, ConfigMap and the bundler's rights go.
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entry = {"uid": listed[run]["uid"], "runId": "4343", "phase": "Running", "flowerStatus": "running",
             "startedAt": now}  # fmt: skip
    runner.kubectl("patch", "configmap", f"{names.superlink(fed)}-run-status", "-n", namespace, "--type=merge",
                   "-p", json.dumps({"data": {"runs": json.dumps({run: entry})}}))  # fmt: skip
    wait_for("the run Running", lambda: (run_of(author, run, namespace).get("status") or {}).get("phase")
             == "Running", timeout=RUN_TIMEOUT)  # fmt: skip
    wait_for("its Job, ConfigMap and the bundler's Role gone", lambda: not any(
        hub.get(kind, name, namespace) for kind, name in (("jobs.batch", target), ("configmap", target),
                                                          ("roles.rbac.authorization.k8s.io", bundler.account(fed))))
             , timeout=RUN_TIMEOUT)  # fmt: skip
    for name in (run, "elsewhere"):
        author.kubectl("delete", f"federationruns.{RUNS_GROUP}", name, "-n", namespace, "--wait=true", timeout=120)
    hub.kubectl("delete", "configmap", "tenant-notes", "-n", namespace)


@NEWEST_MINOR
def test_the_quickstart_completes_a_flwr_run(plane, tmp_path):
    """README step 5, then docs/operations.md's smoke test, on what Crossplane applied: the quick start's objects,
    read back from the cluster, run as real Flower processes (the pod runner is the kubelet KWOK's pods lack),
    and `flwr run` of examples/app through the port-forward the Federation's status names completes."""
    # Ready, as test_every_example_becomes_ready left it; waited for, so a failure there (or
    # Ready read False for a moment, see SETTLE_SECONDS) is not reported twice.
    claim = wait_ready(plane, *(claim_of(QUICKSTART)["metadata"][k] for k in ("name", "namespace")))
    version, python = flower_python(claim)
    release = real_flower.Release(version, python.parent)
    composite = composite_of(plane, claim)
    applied = {o["metadata"]["name"]: live(plane, o) for o in objects_of(plane, composite["metadata"]["name"])}
    assert all(applied.values()), [name for name, obj in applied.items() if not obj]
    manifests = [as_applied(obj) for obj in applied.values() if obj]
    # The walk, as a user sees it (pytest -s shows it): the README's check, then what the docs run.
    name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    walk = [f"$ kubectl get federation {name}", plane.hub.kubectl("get", "federation", name, "-n", namespace)]
    # `kubectl -n default port-forward pod/my-federation-superlink-0 9093:9093`, as the status says.
    forward = claim["status"]["endpoints"]["portForward"].split()
    pod_namespace = forward[forward.index("-n") + 1] if "-n" in forward else "default"
    pod = forward[forward.index("port-forward") + 1].removeprefix("pod/")
    local, remote = forward[-1].split(":")
    # The same port here as there, the SuperLink's Control API: what the README's flwr configuration names.
    assert local == remote and int(remote) == CONTROL_PORT, forward
    with PodRunner(tmp_path / "cluster", real_flower.images(release.bin)) as runner:
        runner.start(manifests)
        address = f"127.0.0.1:{runner.port_forward(pod_namespace, pod, int(remote))}"
        cli = real_flower.LocalCli.at(release, tmp_path, address, None)  # no TLS: the quick start's
        cli.wait_online(claim["status"]["desiredSupernodes"], runner)
        run = cli("run", ".", "k8s", "--stream", timeout=real_flower.RUN_TIMEOUT)
        walk += [f"$ {' '.join(forward)}", "$ cat ~/.flwr/config.toml", (cli.home / "config.toml").read_text(),
                 "$ flwr run examples/app k8s --stream", run.stdout, run.stderr]  # fmt: skip
        print("\n".join(walk))  # noqa: T201 - the walk's transcript, for whoever runs it with -s
        out = f"exit {run.returncode}\n{run.stdout}\n{run.stderr}\n{runner.logs()}"
        # examples/app: two rounds of +1 on every SuperNode, averaged.
        assert "SMOKE-RESULT rounds=2 model=[2.0, 2.0, 2.0]" in run.stdout, out


def test_pod_security_admission_refuses_a_privileged_pod(plane):
    """The judge of the examples' pods is on: in every cluster, a labelled namespace refuses one."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "privileged", "namespace": "flower"},
           "spec": {"containers": [{"name": "c", "image": "flwr/supernode:1.25.0",
                                    "securityContext": {"privileged": True}}]}}  # fmt: skip
    for cluster in (plane.hub, plane.spoke):
        try:
            cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(pod))
        except subprocess.CalledProcessError as refused:
            assert 'violates PodSecurity "restricted:latest": privileged' in refused.stderr, refused.stderr
        else:
            msg = f"{cluster.name}: a privileged pod was admitted in a restricted namespace"
            raise AssertionError(msg)


def as_token(cluster: Cluster, token: str, work: pathlib.Path) -> Cluster:
    """The cluster as the holder of this token alone sees it: its kubeconfig has no client certificate."""
    config = yaml.safe_load(cluster.kubeconfig_text())["clusters"][0]["cluster"]
    work.mkdir(parents=True, exist_ok=True)
    kubeconfig = work / "token.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "token",
        "clusters": [{"name": cluster.name, "cluster": config}],
        "contexts": [{"name": "token", "context": {"cluster": cluster.name, "user": "token"}}],
        "users": [{"name": "token", "user": {"token": token}}],
    }))  # fmt: skip
    kubeconfig.chmod(0o600)
    return Cluster(cluster.name, kubeconfig, cluster.kubectl_bin)


def test_the_provider_token_is_refused_what_its_role_does_not_grant(plane, tmp_path):
    """From the seat of whoever holds provider-kubernetes' token (examples/install/provider-kubernetes.yaml, the
    identity every Federation's Objects are applied with): it may compose what a Federation needs, and the API
    server refuses it the rest: cluster-wide grants, rights it does not hold granted through a Role or a binding,
    pods of its own, exec into a running one, the nodes."""
    hub = plane.hub
    thief = as_token(hub, hub.kubectl("create", "token", PROVIDER_SERVICE_ACCOUNT, "-n", CROSSPLANE_NS).strip(),
                     tmp_path)  # fmt: skip
    # The token works: what Federations compose is allowed (so each refusal below is RBAC's).
    allowed = thief.kubectl("auth", "can-i", "create", "statefulsets.apps", "-n", "flower", check=False)
    assert allowed.strip() == "yes", allowed
    admin = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}
    subject = [{"kind": "ServiceAccount", "name": PROVIDER_SERVICE_ACCOUNT, "namespace": CROSSPLANE_NS}]
    attempts = {
        "a ClusterRoleBinding to cluster-admin": {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "stolen"}, "roleRef": admin, "subjects": subject},
        "a RoleBinding to cluster-admin": {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "stolen", "namespace": "kube-system"}, "roleRef": admin, "subjects": subject},
        "a Role granting exec, which it does not hold": {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "stolen", "namespace": "flower"},
            "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]},
        "a Pod": {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stolen", "namespace": "flower"},
            "spec": {"containers": [{"name": "c", "image": "flwr/supernode:1.25.0"}]}},
    }  # fmt: skip
    for what, document in attempts.items():
        refused = thief.apply(document, check=False)
        assert refused.returncode != 0, f"{what} was admitted: {refused.stdout}"
        assert "forbidden" in refused.stderr, (what, refused.stderr)
    pod = hub.get("pods")[0]["metadata"]  # every namespace's: the examples' pods are there by now
    for what, args in {"exec into a pod": ["exec", "-n", pod["namespace"], pod["name"], "--", "true"],
                       "the nodes": ["get", "nodes"]}.items():  # fmt: skip
        proc = subprocess.run([thief.kubectl_bin, f"--kubeconfig={thief.kubeconfig}", *args],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert proc.returncode != 0, f"{what} was allowed: {proc.stdout}"
        assert "forbidden" in proc.stderr, (what, proc.stderr)
    assert hub.get("clusterrolebinding", "stolen") is None


def check_pod_security(cluster: Cluster, namespace: str, path: pathlib.Path) -> None:
    """A pool's pods were created under Pod Security admission: restricted but for the AMD example."""
    labels = cluster.get("namespace", namespace)["metadata"].get("labels") or {}
    want = "privileged" if path.name == "gpu-mountall.yaml" else "restricted"
    assert labels.get("pod-security.kubernetes.io/enforce") == want, (path.name, namespace, labels)


def check_endpoints(
    plane: ControlPlane, path: pathlib.Path, spec: dict[str, Any], status: dict[str, Any], superlink: dict[str, Any]
) -> None:
    """The SuperLink's Service and pod, where the endpoints say: the Fleet API alone on the Service,
    the Control API on the SuperLink pod's loopback, where the port-forward command leads."""
    service_host, _, port = status["endpoints"]["fleet"].rpartition(":")
    service_name, service_ns = service_host.split(".")[:2]
    service = plane.hub.get("service", service_name, service_ns)
    names = [p["name"] for p in service["spec"]["ports"]]
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]][:1] == [("fleet", int(port))], path.name
    # The Control port only where the spec opens it (node authentication's registrar dials the loopback).
    opened = (spec.get("superlink") or {}).get("inClusterControlAPI", False)
    assert ("control" in names) == opened, (path.name, names)
    assert status["endpoints"]["superlinkService"] == "127.0.0.1:9093", path.name
    namespace, pod_name = superlink["metadata"]["namespace"], f"{superlink['metadata']['name']}-0"
    forward = f"kubectl -n {namespace} port-forward pod/{pod_name} 9093:9093"
    assert status["endpoints"]["portForward"] == forward, path.name
    assert plane.hub.get("pod", pod_name, namespace), path.name


def not_true(plane: ControlPlane, path: pathlib.Path, composite: dict[str, Any], kinds: list[str]) -> str:
    """Why a composite's conditions are not True, with what it was judged from, as seen now.

    The composite's conditions in full, each workload Object's generation and
    observed status, the live workload's and its pods' readiness, and the
    nodes': enough to tell a stale observation from a pod that stopped being ready.
    """
    lines = [f"{path.name}: {', '.join(kinds)} not True"]
    lines += [f"  condition {json.dumps(c, sort_keys=True)}" for c in composite["status"]["conditions"]]
    for obj in objects_of(plane, composite["metadata"]["name"]):
        manifest = obj["spec"]["forProvider"]["manifest"]
        if manifest["kind"] not in ("StatefulSet", "DaemonSet"):
            continue
        seen = ((obj.get("status") or {}).get("atProvider") or {}).get("manifest") or {}
        lines.append(
            f"  Object {obj['metadata']['name']} generation {obj['metadata'].get('generation')}, "
            f"conditions {json.dumps((obj.get('status') or {}).get('conditions'), sort_keys=True)}, "
            f"observed generation {(seen.get('metadata') or {}).get('generation')} "
            f"status {json.dumps(seen.get('status'), sort_keys=True)}"
        )
        workload = live(plane, obj)
        if workload is None:
            continue
        lines.append(
            f"  live {workload['metadata']['name']} generation {workload['metadata'].get('generation')} "
            f"status {json.dumps(workload.get('status'), sort_keys=True)}"
        )
        cluster = cluster_for(plane, obj["spec"]["providerConfigRef"]["name"])
        selector = ",".join(f"{k}={v}" for k, v in sorted(workload["spec"]["selector"]["matchLabels"].items()))
        for pod in cluster.get("pods", namespace=workload["metadata"]["namespace"], selector=selector) or []:
            lines.append(f"    pod {pod['metadata']['name']} conditions {json.dumps(pod['status'].get('conditions'))}")
    for cluster in (plane.hub, plane.spoke):
        for node in cluster.get("nodes") or []:
            ready = json.dumps(condition(node, "Ready"))
            lines.append(f"  {cluster.name} node {node['metadata']['name']} Ready {ready}")
    return "\n".join(lines)


# How long a composite's conditions may take to read True again once its claim is Ready. Crossplane
# applies a composite's status half-way through each reconcile with the conditions it read when the
# reconcile began, then writes the new ones when it ends; on a busy control plane that first copy
# can be older than the last write, and Ready reads False for a moment (docs/operations.md,
# Troubleshooting). A condition still not True after this is a failure.
SETTLE_SECONDS = 30


def check_composite_conditions(plane: ControlPlane, path: pathlib.Path, composite: dict[str, Any]) -> None:
    """Crossplane's and the function's own conditions on the composite (claims show Crossplane's) all True."""
    kinds = ("Ready", "Synced", "SuperLinkReady", "SuperNodesReady", "ClustersReachable")

    def failing(c: dict[str, Any]) -> list[str]:
        return [k for k in kinds if condition(c, k).get("status") != "True"]

    name = composite["metadata"]["name"]
    deadline = time.monotonic() + SETTLE_SECONDS
    while failing(composite) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        composite = plane.hub.get("xfederations.flower.crossplane.io", name)
    assert not failing(composite), not_true(plane, path, composite, failing(composite))


def settled_columns(plane: ControlPlane, name: str, namespace: str) -> dict[str, str]:
    """The claim's columns once SYNCED and READY read True, or as they are after SETTLE_SECONDS.

    A claim copies its composite's conditions, so the composite's stale half-way
    status (see SETTLE_SECONDS) shows in its READY column too, for a moment.
    """
    deadline = time.monotonic() + SETTLE_SECONDS
    cols = columns(plane, name, namespace)
    while (cols["SYNCED"], cols["READY"]) != ("True", "True") and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        cols = columns(plane, name, namespace)
    return cols


def check_status(plane: ControlPlane, path: pathlib.Path, claim: dict[str, Any]) -> None:
    """The claim's status and columns agree with its spec and with the live workloads."""
    spec = claim_of(path)["spec"]
    name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    status = claim["status"]
    composite = composite_of(plane, claim)
    live_workloads = workloads(plane, composite["metadata"]["name"])
    pools = {p["name"]: p for p in status["pools"]}
    # A pool of the spec, or each cluster a selector pool stands for.
    expected = []
    for pool in spec["supernodes"]["pools"]:
        if "clusterSelector" in pool:
            members = [p["name"] for p in status["pools"] if p.get("selector") == pool["name"]]
            assert members, (path.name, pool["name"], status["pools"])
            expected += [(member, pool) for member in members]
        else:
            expected.append((pool["name"], pool))
    assert sorted(pools) == sorted(n for n, _ in expected), path.name
    total = 0
    for pool_name, pool in expected:
        observed = pools[pool_name]
        workload = live_workloads[f"{name}-supernode-{pool_name}"]
        assert workload["kind"] == spec["mode"] == observed["kind"]
        if spec["mode"] == "StatefulSet":
            assert observed["desired"] == pool["replicas"] == workload["status"]["readyReplicas"], path.name
        else:
            assert observed["desired"] == workload["status"]["desiredNumberScheduled"] > 0, path.name
            assert workload["status"]["numberReady"] == observed["desired"], path.name
        assert observed["ready"] == observed["desired"]
        provider_config = observed["providerConfig"]
        cluster = cluster_for(plane, provider_config)
        assert cluster.get(workload["kind"].lower() + "s.apps", workload["metadata"]["name"], observed["namespace"])
        check_pod_security(cluster, observed["namespace"], path)
        total += observed["desired"]
    assert status["clusters"] == len({p["providerConfig"] for p in status["pools"]}), path.name
    assert status["supernodes"] == f"{total}/{total}"
    assert (status["readySupernodes"], status["desiredSupernodes"]) == (total, total)
    superlink = live_workloads[f"{name}-superlink"]
    assert superlink["status"]["readyReplicas"] == 1
    check_endpoints(plane, path, spec, status, superlink)
    for kind in ("Ready", "Synced"):
        assert condition(claim, kind).get("status") == "True", (path.name, kind, claim["status"]["conditions"])
    check_composite_conditions(plane, path, composite)
    # With node authentication every SuperNode makes its own key: each ready one has it registered.
    authenticated = (spec.get("nodeAuthentication") or {}).get("enabled", False)
    assert status.get("registeredSupernodes") == (total if authenticated else None), path.name
    registration = condition(composite, "SuperNodesRegistered")
    assert registration.get("status") == ("True" if authenticated else None), (path.name, composite["status"])
    cols = settled_columns(plane, name, namespace)
    # kubectl leaves an integer column blank when the field is unset.
    assert cols["REGISTERED"] == (str(total) if authenticated else ""), (path.name, cols)
    assert cols["CLUSTERS"] == str(status["clusters"]), (path.name, cols)
    # The SuperLink's release, as the function resolved it: its image's tag, else spec.version.
    tag = re.match(r"\d+\.\d+\.\d+", ((spec.get("superlink") or {}).get("image") or "").rpartition(":")[2])
    assert cols["VERSION"] == status["version"] == (tag.group() if tag else spec["version"]), (path.name, cols)
    assert (cols["SYNCED"], cols["READY"]) == ("True", "True"), not_true(
        plane, path, composite_of(plane, claim), [k for k in ("SYNCED", "READY") if cols[k] != "True"]
    )
    assert (cols["MODE"], cols["ISOLATION"], cols["SUPERNODES"]) == (
        spec["mode"],
        spec["isolationMode"],
        f"{total}/{total}",
    )
    check_warnings(plane, path, name, namespace)


# client-go's event spam filter lets one more event per object through every 300 s, once 25 have been.
EVENT_REFILL_SECONDS = 330


def check_warnings(plane: ControlPlane, path: pathlib.Path, name: str, namespace: str) -> None:
    """An exposed Fleet API is warned about on the claim, where its user looks (`kubectl describe`), and
    nowhere else: Crossplane records the function's warning results as events."""

    def warned() -> list[str]:
        return [
            e["message"]
            for e in plane.hub.get("events", namespace=namespace)
            if e["type"] == "Warning"
            and (e["involvedObject"].get("kind"), e["involvedObject"].get("name")) == ("Federation", name)
        ]

    claimed = parse(claim_of(path)["spec"])
    expected = [*superlink.exposure_warnings(claimed), *exposure.warnings(claimed)]
    # Crossplane records the warning at every reconcile, but its event recorder drops what its queue (1,000) has
    # no room for and lets 25 warnings per object through, then one per 5 minutes: on a loaded machine a claim
    # went 120 s without one (a fresh-clone run, both planes' functions at two workers). A liveness bound.
    for message in expected:
        wait_for(f"{path.name}: the event {message!r} on the claim", lambda m=message: any(m in w for w in warned()),
                 timeout=EVENT_REFILL_SECONDS)  # fmt: skip
    if not expected:
        assert not [w for w in warned() if "Fleet API" in w or "every address" in w], path.name


def pod_token(cluster: Cluster, account: str, namespace: str, pod: str) -> str:
    """A token of account bound to pod, as the kubelet projects it into the pod's identity container."""
    bound = ["--bound-object-kind=Pod", f"--bound-object-name={pod}"]
    return cluster.kubectl("create", "token", account, "-n", namespace, *bound).strip()


def publish_key(
    cluster: Cluster, token: str, namespace: str, pod: dict[str, Any], claim: str | None, work: pathlib.Path
) -> subprocess.CompletedProcess[str]:
    """The identity program's publish mode, run as a SuperNode pod's identity container runs it.

    The same program, arguments and credentials (a token of a ServiceAccount, the
    cluster's CA), at the API server as seen from the host instead of the pod.
    """
    return identity_program_run(cluster, token, namespace, pod, claim, work, "publish")


def api_credentials(cluster: Cluster, token: str, work: pathlib.Path) -> tuple[str, str, pathlib.Path]:
    """The API server's host and port as seen from the host, and a folder laid out as the pods' projected token."""
    config = yaml.safe_load(cluster.kubeconfig_text())["clusters"][0]["cluster"]
    host, port = config["server"].removeprefix("https://").rsplit(":", 1)
    credentials = work / "credentials"
    credentials.mkdir(parents=True, exist_ok=True)
    (credentials / "token").write_text(token)
    (credentials / "ca.crt").write_bytes(base64.b64decode(config["certificate-authority-data"]))
    return host, port, credentials


def identity_program_run(
    cluster: Cluster,
    token: str,
    namespace: str,
    pod: dict[str, Any],
    claim: str | None,
    work: pathlib.Path,
    mode: str,
    *extra: str,
) -> subprocess.CompletedProcess[str]:
    """The identity program in a SuperNode pod's mode (publish, rekey), with the pod's arguments and credentials."""
    host, port, credentials = api_credentials(cluster, token, work)
    keys = work / "keys"
    keys.mkdir(exist_ok=True)
    pod_labels = pod["metadata"]["labels"]
    labels = identity.publication_labels(pod_labels["app.kubernetes.io/instance"], pod_labels[names.POOL_LABEL])
    args = [f"--work={work}", f"--key-dir={keys}", f"--kube-credentials={credentials}"]
    args += [f"--label={k}={v}" for k, v in sorted(labels.items())]
    args += [f"--owner-claim={claim}"] if claim else []
    meta = pod["metadata"]
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
           "POD_NAME": meta["name"], "POD_NAMESPACE": namespace, "POD_UID": meta["uid"]}  # fmt: skip
    return subprocess.run(
        [sys.executable, str(ROOT / "function" / "programs" / "identity_program.py"), mode, *args, *extra],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def authorized_keys(cluster: Cluster, name: str, namespace: str) -> str | None:
    live = cluster.get("configmap", published_keys.authorized_keys_name(name), namespace)
    return None if live is None else (live.get("data") or {}).get(published_keys.AUTHORIZED_KEYS, "")


def test_supernode_keys_reach_the_superlink_through_kubernetes(plane, tmp_path):
    """A SuperNode's key reaches the SuperLink's side only as Kubernetes' RBAC allows.

    The real identity program publishes a key with a token of the pool's
    ServiceAccount (Role and binding composed by the function); from the
    attacker's seat, that token publishes nothing in another namespace, and
    another account's publishes nothing in the pool's. provider-kubernetes'
    collection observes the published key and Crossplane carries it to the
    ConfigMap beside the SuperLink; deleting the publication withdraws it.
    """
    hub = plane.hub
    claim = claim_of(next(p for p in CLAIMS if p.stem == "persistence-auth"))
    name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    account = f"{name}-flower"
    pod_name = f"{names.pool(name, 'default')}-0"
    pod = wait_for(f"pod {pod_name}", lambda: hub.get("pod", pod_name, namespace))
    claim_name = f"{identity.IDENTITY_VOLUME}-{pod_name}"
    pvc = wait_for(f"claim {claim_name}", lambda: hub.get("persistentvolumeclaim", claim_name, namespace))
    token = pod_token(hub, account, namespace, pod_name)

    # The attacker's seat: the pool's token in another namespace, another account's token in the pool's.
    hub.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "stranger", "namespace": namespace}})
    stranger = hub.kubectl("create", "token", "stranger", "-n", namespace).strip()
    for seat, who, where in [("elsewhere", token, "flower"), ("stranger", stranger, namespace)]:
        proc = publish_key(hub, who, where, pod, None, tmp_path / seat)
        assert proc.returncode == 1, (seat, proc.stdout, proc.stderr)
        assert "403" in proc.stdout, (seat, proc.stdout)
        key = (tmp_path / seat / "keys" / identity_program.PUBLIC_KEY).read_text().strip()
        leaked = hub.get("configmap", key_publications.configmap_name(pod["metadata"]["uid"], key), where)
        assert leaked is None, seat
    # Create is all the pool's account may do with ConfigMaps: it reads no one's.
    can = hub.kubectl(
        "auth",
        "can-i",
        "get",
        "configmaps",
        "-n",
        namespace,
        f"--as=system:serviceaccount:{namespace}:{account}",
        check=False,
    )
    assert can.strip() == "no", can
    check_publications_narrowed_to_the_pods_own(hub, name, namespace, token, tmp_path / "planter")

    # The pool's own account, in its namespace: published, owned by the claim that holds the key.
    proc = publish_key(hub, token, namespace, pod, claim_name, tmp_path / "pool")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    public_key = (tmp_path / "pool" / "keys" / identity_program.PUBLIC_KEY).read_text().strip()
    configmap = key_publications.configmap_name(pvc["metadata"]["uid"], public_key)
    published = hub.get("configmap", configmap, namespace)
    assert published["data"][key_publications.PUBLIC_KEY_FIELD] == public_key
    assert published["metadata"]["ownerReferences"][0]["kind"] == "PersistentVolumeClaim"
    assert published["immutable"] is True
    # Published again (a restarted pod): already there, which is success.
    again = publish_key(hub, token, namespace, pod, claim_name, tmp_path / "pool")
    assert again.returncode == 0, (again.stdout, again.stderr)

    # Carried: the namespace's keys gatherer lists it, then the SuperLink's authorized keys.
    with gatherer_running(hub, name, namespace, tmp_path):
        check_carried(hub, name, namespace, public_key, claim_name, configmap)


def check_carried(hub: Cluster, name: str, namespace: str, public_key: str, claim_name: str, configmap: str) -> None:
    """The published key in the SuperLink's list, and out of it once its publication is deleted."""
    wait_for("the key in the SuperLink's authorized keys",
             lambda: public_key in (authorized_keys(hub, name, namespace) or ""), timeout=240)  # fmt: skip
    line = next(x for x in authorized_keys(hub, name, namespace).splitlines() if public_key in x)
    # Published by the publish mode, before any registration: no node ID.
    assert line.split()[2:] == [f"default/{namespace}/PersistentVolumeClaim/{claim_name}", "-"], line
    # The pods may reach their API server through the NetworkPolicy: at the endpoints it publishes.
    rule = netpol.kube_api_egress(hub.get("endpointslice", "kubernetes", "default"))
    assert rule is not None
    wait_for("the API server admitted by the SuperNodes' NetworkPolicy",
             lambda: rule in hub.get("networkpolicy", f"{name}-supernode", namespace)["spec"]["egress"])  # fmt: skip

    # The claim goes with the StatefulSet (its pool or cluster removed), and the publication with the claim:
    # the real StatefulSet controller makes the workload the claim's owner, as the retention policy asks.
    def owned_by_the_workload() -> bool:
        live_claim = hub.get("persistentvolumeclaim", claim_name, namespace) or {}
        owners = (live_claim.get("metadata") or {}).get("ownerReferences") or []
        return any(o["kind"] == "StatefulSet" and o["name"] == names.pool(name, "default") for o in owners)

    wait_for("the StatefulSet owning its identity claim", owned_by_the_workload)
    # Withdrawn with its publication (as when Kubernetes deletes it with the claim).
    hub.kubectl("delete", "configmap", configmap, "-n", namespace)
    # An empty list is "" (no key left); None is no ConfigMap, which says nothing.
    wait_for("the key gone from the SuperLink's authorized keys",
             lambda: (keys := authorized_keys(hub, name, namespace)) is not None and public_key not in keys,
             timeout=240)  # fmt: skip


def check_publications_narrowed_to_the_pods_own(
    hub: Cluster, name: str, namespace: str, token: str, work: pathlib.Path
) -> None:
    """From the seat of pod 0 of the pool, with its own token: the API server creates its publication, nothing else.

    RBAC cannot narrow a create by name; the admission policy the function composes
    in the pool's cluster does (identity.publication_policy). Each attempt is a dry
    run: admission judges it, nothing is stored.
    """
    host, port, credentials = api_credentials(hub, token, work)
    pod_api = flwr_control.KubeApi(host, port, credentials)
    own, other = (f"{identity.IDENTITY_VOLUME}-{names.pool(name, 'default')}-{i}" for i in (0, 1))
    claims = {c: hub.get("persistentvolumeclaim", c, namespace)["metadata"]["uid"] for c in (own, other)}
    labels = identity.publication_labels(name, "default")
    key = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBP0="

    def publication(claim: str, **label: str) -> dict[str, Any]:
        owner = key_publications.Owner("PersistentVolumeClaim", claim, claims[claim])
        return key_publications.key_configmap(owner, namespace, {**labels, **label}, key)

    def listing(configmap: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": configmap, "namespace": namespace},
                "data": {identity_program.RETIRED_FIELD: "0123456789abcdef victim\n"}}  # fmt: skip

    def create(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return pod_api.call("POST", f"/api/v1/namespaces/{namespace}/configmaps?dryRun=All", body)

    planted = {
        "the retired-keys report its pool's pods read": listing(identity.retired_keys_name(name)),
        "a shard of the SuperLink's key list, not made yet": listing(identity.shard_name(name, "07")),
        "the gatherer's list of keys": listing(key_gatherer.name(name, namespace, "default", namespace)),
        "a key published for another pod's claim": publication(other),
        "a key published for another Federation": publication(own, **{names.INSTANCE_LABEL: "another"}),
    }
    first = next(iter(planted.values()))
    wait_for("the publication policy in force", lambda: create(first)[0] == 403, timeout=60)
    for what, body in planted.items():
        status, answer = create(body)
        assert status == 403, (what, status, answer)
        assert "ValidatingAdmissionPolicy" in answer.get("message", ""), (what, answer)
    # The test can fail: the pod's own publication passes the same door.
    status, answer = create(publication(own))
    assert status == 201, (status, answer)


@contextlib.contextmanager
def gatherer_running(cluster: Cluster, federation: str, namespace: str, work: pathlib.Path) -> Iterator[
    tuple[str, pathlib.Path]
]:  # fmt: skip
    """The keys gatherer the function composed in cluster's namespace, run as its pod would run it.

    The e2e's pods do not run: the test plays the pod, with the real program, its
    Deployment's arguments and a token of its ServiceAccount bound to its pod.
    Yields its list's name and the credentials it runs with.
    """
    selector = f"app.kubernetes.io/name={key_gatherer.NAME},{names.INSTANCE_LABEL}={federation}"
    deployment = wait_for("the keys gatherer's Deployment", lambda: next(
        iter(cluster.get("deployments", namespace=namespace, selector=selector) or []), None),
        timeout=READY_TIMEOUT)  # fmt: skip
    pods = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
    pod = wait_for("the keys gatherer's pod, admitted", lambda: next(
        iter(cluster.get("pods", namespace=namespace, selector=pods) or []), None), timeout=READY_TIMEOUT)  # fmt: skip
    template = deployment["spec"]["template"]["spec"]
    token = pod_token(cluster, template["serviceAccountName"], namespace, pod["metadata"]["name"])
    host, port, credentials = api_credentials(cluster, token, work / "gatherer")
    args = [a for a in template["containers"][0]["args"] if not a.startswith("--kube-credentials=")]
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    program = ROOT / "function" / "programs" / "gather_program.py"
    log = work / "gatherer.log"
    with log.open("w") as out:
        running = subprocess.Popen([sys.executable, str(program), *args, f"--kube-credentials={credentials}"],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        yield deployment["metadata"]["name"], credentials
    finally:
        running.kill()
        running.wait()
        print(log.read_text())  # noqa: T201 - shown when the test fails


def test_a_pool_namespaces_keys_are_gathered_by_its_gatherer_alone(plane, tmp_path):
    """The keys gatherer the function composes, through the real API server.

    Its Deployment is admitted in the pool's namespace (restricted Pod Security),
    and the real program, with a token of its own ServiceAccount bound to its pod,
    lists the pool's publication within seconds of the pool's token making it,
    and drops it when it is deleted. A ConfigMap of a publication's form that no
    pod owns is not listed. From the attacker's seat: the pool's token can
    neither write the list nor make one of its name; the gatherer's can change
    no other ConfigMap, create none, delete its own list or read a Secret.
    """
    hub = plane.hub
    claim = claim_of(next(p for p in CLAIMS if p.stem == "persistence-auth"))
    name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    pool_pod = wait_for("the pool's pod 1", lambda: hub.get("pod", f"{names.pool(name, 'default')}-1", namespace))
    claim_name = f"{identity.IDENTITY_VOLUME}-{pool_pod['metadata']['name']}"
    with gatherer_running(hub, name, namespace, tmp_path) as (gatherer, credentials):
        assert gatherer == key_gatherer.name(name, namespace, "default", namespace)
        check_gathered(hub, name, namespace, gatherer, pool_pod=pool_pod, claim_name=claim_name, work=tmp_path,
                       gatherer_credentials=credentials)  # fmt: skip


def check_gathered(  # noqa: PLR0913 - the scenario's seats, each its own value
    hub: Cluster, name: str, namespace: str, gatherer: str, *, pool_pod: dict[str, Any], claim_name: str,
    work: pathlib.Path, gatherer_credentials: pathlib.Path,
) -> None:  # fmt: skip
    """The list, as the pool publishes and withdraws; then what each seat may not do."""

    def listed() -> str:
        live = hub.get("configmap", gatherer, namespace) or {}
        return (live.get("data") or {}).get(gather_program.GATHERED_FIELD, "")

    # A publication's form, made by someone else and owned by no pod: Kubernetes never vouched for it.
    stray_key = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBQ1="
    stray = key_publications.key_configmap(key_publications.Owner("Pod", "nobody", "0000"), namespace,
                                           identity.publication_labels(name, "default"), stray_key)  # fmt: skip
    del stray["metadata"]["ownerReferences"]
    hub.apply(stray)
    pool_token = pod_token(hub, f"{name}-flower", namespace, pool_pod["metadata"]["name"])
    proc = publish_key(hub, pool_token, namespace, pool_pod, claim_name, work / "pool")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    public_key = (work / "pool" / "keys" / identity_program.PUBLIC_KEY).read_text().strip()
    line = f"{public_key} {namespace}/PersistentVolumeClaim/{claim_name}"
    wait_for("the pool's key in the gathered list", lambda: line in listed().splitlines(), timeout=60)
    assert stray_key not in listed()
    data = (hub.get("configmap", gatherer, namespace) or {}).get("data") or {}
    lines = data[gather_program.GATHERED_FIELD].splitlines()
    assert data.get(gather_program.COUNT_FIELD) == str(len(lines)), "its count, by which its Object is Ready"

    host, port, pool_credentials = api_credentials(hub, pool_token, work / "pool-seat")
    pool_api = flwr_control.KubeApi(host, port, pool_credentials)
    gatherer_api = flwr_control.KubeApi(host, port, gatherer_credentials)
    forged = {"data": {gather_program.GATHERED_FIELD: f"{stray_key} {namespace}/Pod/nobody\n"}}
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    made_first = identity.configmap(gatherer, namespace, {}, data=forged["data"])
    attempts = {
        "the pool writes the list": (pool_api, "PATCH", f"{configmaps}/{gatherer}", forged),
        "the pool makes a list of its name": (pool_api, "POST", f"{configmaps}?dryRun=All", made_first),
        "the gatherer writes the SuperLink's key list": (
            gatherer_api, "PATCH", f"{configmaps}/{published_keys.authorized_keys_name(name)}", forged),
        "the gatherer makes a ConfigMap": (gatherer_api, "POST", f"{configmaps}?dryRun=All", made_first),
        "the gatherer deletes its list": (gatherer_api, "DELETE", f"{configmaps}/{gatherer}?dryRun=All", None),
        "the gatherer reads a Secret": (gatherer_api, "GET", f"/api/v1/namespaces/{namespace}/secrets", None),
    }  # fmt: skip
    for what, (api, method, where, body) in attempts.items():
        kind = "application/merge-patch+json" if method == "PATCH" else "application/json"
        status, answer = api.call(method, where, body, kind)
        assert status == 403, (what, status, answer)
    assert line in listed().splitlines(), "nothing the seats tried changed the list"

    # Withdrawn: the publication deleted (as Kubernetes does with its claim), the line goes.
    claim_uid = hub.get("persistentvolumeclaim", claim_name, namespace)["metadata"]["uid"]
    hub.kubectl("delete", "configmap", key_publications.configmap_name(claim_uid, public_key), "-n", namespace)
    wait_for("the key gone from the gathered list", lambda: public_key not in listed(), timeout=60)
    hub.kubectl("delete", "configmap", stray["metadata"]["name"], "-n", namespace)


@NEWEST_MINOR
def test_retired_keys_go_back_to_their_pods_which_replace_them(plane, tmp_path):
    """The registrar's report of retired keys, through the real API server, provider and Crossplane.

    The registrar's own code writes the report with a token of the SuperLink's
    ServiceAccount, which may patch that one ConfigMap and nothing else (from
    the attacker's seat: neither another account's token nor the one the
    SuperNode pods beside it run as may write it, and the SuperLink's may not
    touch the list of keys). Crossplane never overwrites the report,
    carries it to the pool's namespace, and the rekey mode, with the pool's
    token, makes and publishes a new key for the pod it names. An empty report
    withdraws the copy. (The e2e's pods do not run: the test plays the registrar.)
    """
    hub = plane.hub
    claim = claim_of(next(p for p in CLAIMS if p.stem == "persistence-auth"))
    name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    report_name, copy_name = identity.registrations_name(name), identity.retired_keys_name(name)
    wait_for("the registrar's report, created empty", lambda: hub.get("configmap", report_name, namespace))
    pod_name = f"{names.pool(name, 'default')}-1"
    pod = wait_for(f"pod {pod_name}", lambda: hub.get("pod", pod_name, namespace))
    claim_name = f"{identity.IDENTITY_VOLUME}-{pod_name}"
    wait_for(f"claim {claim_name}", lambda: hub.get("persistentvolumeclaim", claim_name, namespace))
    token = pod_token(hub, f"{name}-flower", namespace, pod_name)
    registrar = hub.kubectl("create", "token", f"{name}-superlink", "-n", namespace).strip()

    def api(seat: str, who: str) -> flwr_control.KubeApi:
        host, port, credentials = api_credentials(hub, who, tmp_path / seat)
        return flwr_control.KubeApi(host, port, credentials)

    # The attacker's seat: neither another account's token nor a SuperNode pod's writes a report;
    # the SuperLink's writes no key list.
    hub.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "stranger", "namespace": namespace}})
    stranger = hub.kubectl("create", "token", "stranger", "-n", namespace).strip()
    done, said = identity_program.report(api("stranger", stranger), namespace, report_name, "forged\n")
    assert not done and "403" in said, said
    done, said = identity_program.report(api("supernode", token), namespace, report_name, "forged\n")
    assert not done and "403" in said, said
    keys_list = published_keys.authorized_keys_name(name)
    done, said = identity_program.report(api("registrar", registrar), namespace, keys_list, "forged\n")
    assert not done and "403" in said, said

    # A pod's key, published; then retired and reported by the registrar's code, as the registrar does.
    seat = tmp_path / "pod"
    published = identity_program_run(hub, token, namespace, pod, claim_name, seat, "publish")
    assert published.returncode == 0, (published.stdout, published.stderr)
    old_key = (seat / "keys" / identity_program.PUBLIC_KEY).read_text().strip()
    digest = identity_program.key_digest(old_key)
    holder = f"default/{namespace}/PersistentVolumeClaim/{claim_name}"
    done, said = identity_program.report(api("registrar", registrar), namespace, report_name, f"{digest} {holder}\n")
    assert done, said

    # Carried to the pool's namespace; the report itself is left as the registrar wrote it.
    def carried() -> str | None:
        copy = hub.get("configmap", copy_name, namespace)
        return ((copy or {}).get("data") or {}).get(identity_program.RETIRED_FIELD)

    assert wait_for("the retired key in the pool's namespace", carried, timeout=240) == f"{digest}\n"
    live_report = hub.get("configmap", report_name, namespace)
    assert live_report["data"][identity_program.RETIRED_FIELD] == f"{digest} {holder}\n", "Crossplane overwrote it"

    # The pod's rekey sidecar, once: a new key pair, published beside the old one with the pool's token.
    retired_file = tmp_path / "retired"
    retired_file.write_text(carried() or "")
    rekeyed = identity_program_run(hub, token, namespace, pod, claim_name, seat, "rekey",
                                   f"--retired={retired_file}", "--once", "--retry=2")  # fmt: skip
    assert rekeyed.returncode == 0, (rekeyed.stdout, rekeyed.stderr)
    new_key = (seat / "keys" / identity_program.PUBLIC_KEY).read_text().strip()
    assert new_key != old_key, rekeyed.stdout
    pvc = hub.get("persistentvolumeclaim", claim_name, namespace)
    publication = hub.get("configmap", key_publications.configmap_name(pvc["metadata"]["uid"], new_key), namespace)
    assert publication["data"][key_publications.PUBLIC_KEY_FIELD] == new_key

    # Nothing retired any more: the copy goes.
    done, said = identity_program.report(api("registrar", registrar), namespace, report_name, "")
    assert done, said
    wait_for("the retired keys' copy withdrawn", lambda: hub.get("configmap", copy_name, namespace) is None,
             timeout=240)  # fmt: skip


def test_remote_pools_land_in_the_spoke(plane):
    claim = get_claim(plane, "federation-multicluster", "flower")
    composite = composite_of(plane, claim)
    in_spoke = [o for o in objects_of(plane, composite["metadata"]["name"])
                if o["spec"]["providerConfigRef"]["name"].startswith("spoke")]  # fmt: skip
    kinds = sorted({o["spec"]["forProvider"]["manifest"]["kind"] for o in in_spoke})
    assert kinds == ["Namespace", "NetworkPolicy", "ServiceAccount", "StatefulSet"], kinds
    for obj in in_spoke:
        assert live(plane, obj) is not None, obj["spec"]["forProvider"]["manifest"]["metadata"]
    assert plane.spoke.get("namespace", "flower-clients")
    # The remote pools dial the load balancer's address, which the status reports.
    external = claim["status"]["endpoints"]["external"]
    spoke_sets = plane.spoke.get("statefulsets.apps", namespace="flower-clients")
    args = [a for s in spoke_sets for c in s["spec"]["template"]["spec"]["containers"] for a in c.get("args", [])]
    assert f"--superlink={external}" in args, (external, args)


def test_cert_manager_issues_the_superlink_certificate(plane):
    # The Certificate the function composed is issued by the flower-ca
    # ClusterIssuer for the Service names and the load balancer's address;
    # pool eu trusts a CA Secret composed in the spoke from the issued one
    # (the CA only), pool us the CA Secret its platform team put there.
    hub, name = plane.hub, "federation-tls-multicluster"
    claim = get_claim(plane, name, "flower")
    external_host = claim["status"]["endpoints"]["external"].rpartition(":")[0]
    certificate = hub.get("certificates.cert-manager.io", f"{name}-superlink-tls", "flower")
    assert condition(certificate, "Ready").get("status") == "True", certificate.get("status")
    issued = hub.get("secret", f"{name}-superlink-tls", "flower")
    assert issued["data"]["ca.crt"] == plane.ca_certificate()
    sans = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName"], check=True, capture_output=True,
                          text=True, input=base64.b64decode(issued["data"]["tls.crt"]).decode()).stdout  # fmt: skip
    assert f"IP Address:{external_host}" in sans and f"DNS:{name}-superlink.flower.svc" in sans, sans
    # Flower 1.41: the SuperExec sidecar dials the SuperLink over TLS at localhost.
    assert "DNS:localhost" in sans and "IP Address:127.0.0.1" in sans, sans
    copied = plane.spoke.get("secret", f"{name}-superlink-ca", "flower")
    assert copied["data"] == {"ca.crt": plane.ca_certificate()}  # never the key
    trusted = {}
    for pool in ("eu", "us"):
        workload = plane.spoke.get("statefulsets.apps", f"{name}-supernode-{pool}", "flower")
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        trusted[pool] = volumes["tls"]["secret"]["secretName"]
    assert trusted == {"eu": f"{name}-superlink-ca", "us": CA_ISSUER}


def test_tls_ca_copied_to_the_spoke_and_nodeport_address(plane):
    # Hub + spoke with TLS from a Secret: the spoke pool trusts the CA read
    # through required resources; the address comes from a NodePort Service.
    hub = plane.hub
    hub.apply(openssl_tls_secret("edge-tls", "flower", ["federation-edge-tls-superlink.flower.svc", "198.51.100.10"]))
    claim = {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "Federation",
        "metadata": {"name": "federation-edge-tls", "namespace": "flower"},
        "spec": {
            "mode": "StatefulSet",
            "isolationMode": "subprocess",
            "tls": {"secretName": "edge-tls"},
            "superlink": {"image": "flwr/superlink:1.25.0", "providerConfigRef": {"name": "hub"},
                          "service": {"type": "NodePort", "nodeAddress": "198.51.100.10"}},
            "supernodes": {"image": "flwr/supernode:1.25.0", "pools": [
                {"name": "edge", "replicas": 2, "providerConfigRef": {"name": "spoke-edge"},
                 "namespace": "flower-edge", "createNamespace": True}]},
        },
    }  # fmt: skip
    hub.apply(claim)
    live_claim = wait_ready(plane, "federation-edge-tls", "flower")
    assert condition(composite_of(plane, live_claim), "TLSReady").get("status") == "True"
    service = hub.get("service", "federation-edge-tls-superlink", "flower")
    node_port = next(p["nodePort"] for p in service["spec"]["ports"] if p["port"] == 9092)
    assert live_claim["status"]["endpoints"]["external"] == f"198.51.100.10:{node_port}"
    copied = plane.spoke.get("secret", "federation-edge-tls-superlink-ca", "flower-edge")
    source = hub.get("secret", "edge-tls", "flower")
    assert copied["data"] == {"ca.crt": source["data"]["ca.crt"]}  # the CA only, never the key
    pool = plane.spoke.get("statefulsets.apps", "federation-edge-tls-supernode-edge", "flower-edge")
    args = pool["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--superlink=198.51.100.10:{node_port}" in args, args
    assert any(a.startswith("--root-certificates") for a in args), args


def patch_moves_one_workload(
    plane: ControlPlane, name: str, namespace: str, patch: list[dict[str, Any]], workload: str
) -> dict[str, Any]:
    """Apply a JSON patch to a claim; exactly `workload` (and the Object that
    holds it) move by one generation, nothing else in any cluster moves.
    Returns the live workload afterwards."""
    composite = composite_of(plane, get_claim(plane, name, namespace))["metadata"]["name"]
    before = generations(plane, composite)
    plane.hub.kubectl("patch", "federation", name, "-n", namespace, "--type=json", "-p", json.dumps(patch))
    wait_for(f"{workload} changed", lambda: generations(plane, composite).get(workload) == before[workload] + 1,
             timeout=READY_TIMEOUT, interval=2)  # fmt: skip
    wait_ready(plane, name, namespace)
    after = generations(plane, composite)
    moved = {k: after.get(k, 0) - v for k, v in before.items() if after.get(k) != v}
    assert {k: v for k, v in moved.items() if not k.startswith("Object/")} == {workload: 1}, moved
    assert sorted(v for k, v in moved.items() if k.startswith("Object/")) == [1], moved
    kind, workload_name = workload.split("/")
    return plane.hub.get(f"{kind.lower()}s.apps", workload_name, namespace)


@NEWEST_MINOR
def test_scale_moves_one_generation(plane):
    name, namespace = "federation-nvidia", "default"
    pool = get_claim(plane, name, namespace)["spec"]["supernodes"]["pools"][0]
    patch = [{"op": "replace", "path": "/spec/supernodes/pools/0/replicas", "value": pool["replicas"] + 1}]
    live_set = patch_moves_one_workload(plane, name, namespace, patch, f"StatefulSet/{name}-supernode-{pool['name']}")
    assert live_set["spec"]["replicas"] == pool["replicas"] + 1


@NEWEST_MINOR
def test_image_change_moves_one_generation(plane):
    name, namespace = "federation-nvidia", "default"
    pool = get_claim(plane, name, namespace)["spec"]["supernodes"]["pools"][0]
    image = "flwr/supernode:1.25.1"
    patch = [{"op": "replace", "path": "/spec/supernodes/pools/0/images", "value": {"supernode": image}}]
    live_set = patch_moves_one_workload(plane, name, namespace, patch, f"StatefulSet/{name}-supernode-{pool['name']}")
    assert live_set["spec"]["template"]["spec"]["containers"][0]["image"] == image


@NEWEST_MINOR
def test_a_flower_upgrade_rolls_the_superlink_and_each_pool_once(plane):
    """spec.version 1.41.0 to 1.42.0 on a live Federation (persistence on): the SuperLink's and the pool's
    StatefulSets move by one generation each, to the new release's images, with their Objects; nothing
    else moves, and it is Ready again. What the pods then do is tests/real/test_real_upgrade.py's."""
    claim = claim_of(next(c for c in CLAIMS if c.name == "flower-141.yaml"))
    name, namespace = "flower-rolled", claim["metadata"]["namespace"]
    claim["metadata"]["name"] = name
    plane.hub.apply(claim)
    wait_ready(plane, name, namespace)
    composite = composite_of(plane, get_claim(plane, name, namespace))["metadata"]["name"]
    before = generations(plane, composite)
    workloads_ = [f"StatefulSet/{name}-superlink", f"StatefulSet/{name}-supernode-default"]
    patch = json.dumps({"spec": {"version": "1.42.0"}})
    plane.hub.kubectl("patch", "federation", name, "-n", namespace, "--type=merge", "-p", patch)
    wait_for("both workloads rolled", lambda: all(generations(plane, composite).get(w) == before[w] + 1
                                                  for w in workloads_), timeout=READY_TIMEOUT, interval=2)  # fmt: skip
    wait_ready(plane, name, namespace)
    after = generations(plane, composite)
    moved = {k: after.get(k, 0) - v for k, v in before.items() if after.get(k) != v}
    assert {k: v for k, v in moved.items() if not k.startswith("Object/")} == dict.fromkeys(workloads_, 1), moved
    assert sorted(v for k, v in moved.items() if k.startswith("Object/")) == [1, 1], moved
    for workload in workloads_:
        pod = plane.hub.get("statefulsets.apps", workload.split("/")[1], namespace)["spec"]["template"]["spec"]
        images = {c["image"] for c in [*pod["containers"], *pod.get("initContainers", [])] if "flwr/" in c["image"]}
        assert images and all(i.endswith(":1.42.0") for i in images), images
    plane.hub.kubectl("delete", "federation", name, "-n", namespace, "--wait=true", timeout=300)


def test_removing_a_pool_deletes_what_it_alone_used(plane):
    name, namespace = "federation-nvidia", "default"
    claim = get_claim(plane, name, namespace)
    composite = composite_of(plane, claim)["metadata"]["name"]
    pools = claim["spec"]["supernodes"]["pools"]
    removed = pools[-1]["name"]
    before = {o["metadata"]["name"]: o for o in objects_of(plane, composite)}
    theirs = {n for n, o in before.items()
              if removed in json.dumps(o["spec"]["forProvider"]["manifest"]["metadata"].get("labels", {}))}  # fmt: skip
    assert theirs, "the pool to remove has no Objects"
    patch = [{"op": "remove", "path": f"/spec/supernodes/pools/{len(pools) - 1}"}]
    plane.hub.kubectl("patch", "federation", name, "-n", namespace, "--type=json", "-p", json.dumps(patch))
    wait_for(f"pool {removed}'s workload deleted",
             lambda: plane.hub.get("statefulsets.apps", f"{name}-supernode-{removed}", namespace) is None,
             timeout=READY_TIMEOUT, interval=2)  # fmt: skip
    after = {o["metadata"]["name"] for o in objects_of(plane, composite)}
    assert not (theirs & after), theirs & after
    assert after == set(before) - theirs
    wait_ready(plane, name, namespace)


@NEWEST_MINOR
def test_function_restart_while_reconciling_deletes_nothing(plane):
    name, namespace = "my-federation", "default"
    composite = composite_of(plane, get_claim(plane, name, namespace))["metadata"]["name"]
    objects_before = {o["metadata"]["name"] for o in objects_of(plane, composite)}
    plane.processes["function"].stop(sig=9)
    patch = [{"op": "replace", "path": "/spec/supernodes/pools/0/replicas", "value": 3}]
    plane.hub.kubectl("patch", "federation", name, "-n", namespace, "--type=json", "-p", json.dumps(patch))
    # Three poll intervals without the function: Crossplane cannot compose,
    # so nothing changes and, above all, nothing is deleted.
    for _ in range(15):
        time.sleep(3)
        assert {o["metadata"]["name"] for o in objects_of(plane, composite)} == objects_before
        assert all(w for w in workloads(plane, composite).values())
    assert plane.hub.get("statefulsets.apps", f"{name}-supernode-default", namespace)["spec"]["replicas"] == 2
    plane.start_function()
    wait_for("the scale-up after the restart", lambda: _if(
        lambda c: ready(c) and c["status"].get("supernodes") == "3/3", get_claim(plane, name, namespace)),
        timeout=READY_TIMEOUT, interval=2)  # fmt: skip
    assert plane.hub.get("statefulsets.apps", f"{name}-supernode-default", namespace)["spec"]["replicas"] == 3
    assert {o["metadata"]["name"] for o in objects_of(plane, composite)} == objects_before


@NEWEST_MINOR
def test_workload_deleted_by_hand_comes_back(plane):
    name, namespace = "my-federation", "default"
    workload = f"{name}-superlink"
    old = plane.hub.get("statefulsets.apps", workload, namespace)
    plane.hub.kubectl("delete", "statefulset", workload, "-n", namespace, "--wait=true", timeout=120)
    back = wait_for(
        f"{workload} recreated",
        lambda: _if(lambda s: s and s["metadata"]["uid"] != old["metadata"]["uid"],
                    plane.hub.get("statefulsets.apps", workload, namespace)),
        timeout=READY_TIMEOUT, interval=2,
    )  # fmt: skip
    assert back["spec"]["template"] == old["spec"]["template"]
    wait_ready(plane, name, namespace)


def test_no_generation_moves_while_idle(plane):
    # Two idle minutes, looked at every 15 seconds: Crossplane reconciles every
    # Federation at the function's response TTL (60 s; with realtime
    # compositions it does not poll XRs) and on its Objects' events, and the
    # provider polls every Object once a minute. Any change would roll pods
    # for nothing.
    composites = [o["metadata"]["name"] for o in plane.hub.get("xfederations.flower.crossplane.io")]
    before = generations_of(plane, composites)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(15)
        now = generations_of(plane, composites)
        assert now == before, {c: {k for k in before[c] if now[c].get(k) != before[c][k]} for c in composites}


FLEET = CLAIMS[0].parent / "multicluster-selector.yaml"


def fleet_state(plane: ControlPlane) -> tuple[dict[str, Any], dict[str, int]]:
    """The fleet Federation's claim and the generations of everything it composed."""
    claim = get_claim(plane, "federation-fleet", "flower")
    assert claim is not None
    return claim, generations(plane, composite_of(plane, claim)["metadata"]["name"])


def fleet_workload(plane: ControlPlane, site: str) -> dict[str, Any] | None:
    return plane.sites[site].get("statefulsets.apps", f"federation-fleet-supernode-gpu-{site}", "flower-sites")


@NEWEST_MINOR
def test_clusters_join_and_leave_by_label(plane):
    labels = claim_of(FLEET)["spec"]["supernodes"]["pools"][0]["clusterSelector"]["matchLabels"]
    claim, before = fleet_state(plane)
    assert sorted(p["providerConfig"] for p in claim["status"]["pools"]) == ["site-a", "site-b"]
    assert fleet_workload(plane, "site-c") is None

    # Labelling site-c's ProviderConfig brings a pool up in that cluster, and moves nothing else.
    label_site(plane, "site-c", labels)
    joined = wait_for("a pool in site-c", lambda: _if(lambda w: w and w["status"].get("readyReplicas") == 2,
                                                       fleet_workload(plane, "site-c")),
                      timeout=READY_TIMEOUT, interval=3)  # fmt: skip
    assert joined["metadata"]["annotations"]["flower.flwr.ai/cluster-index"] == "2"

    def three_clusters_ready() -> bool:
        claim = fleet_state(plane)[0]
        return claim["status"].get("clusters") == 3 and ready(claim)

    wait_for("three clusters in status", three_clusters_ready, timeout=READY_TIMEOUT, interval=3)
    claim, after = fleet_state(plane)
    assert {k: after.get(k) for k in before} == before, {k for k in before if after.get(k) != before[k]}
    added = sorted(k for k in after if k not in before)
    assert "StatefulSet/federation-fleet-supernode-gpu-site-c" in added, added
    assert all("site-c" in k or k.startswith("Object/") for k in added), added
    assert columns(plane, "federation-fleet", "flower")["CLUSTERS"] == "3"

    # Taking the label off site-a deletes its pool there; site-b and site-c keep theirs unchanged.
    label_site(plane, "site-a", dict.fromkeys(labels))
    wait_for("site-a's pool deleted", lambda: fleet_workload(plane, "site-a") is None,
             timeout=READY_TIMEOUT, interval=3)  # fmt: skip

    def site_a_gone() -> bool:
        """site-a's FederationCluster and every Object it composed there, deleted (not only terminating)."""
        parts = [c for c in plane.hub.get("xfederationclusters.flower.crossplane.io")
                 if c["spec"]["providerConfigRef"]["name"] == "site-a"]  # fmt: skip
        there = [o for o in plane.hub.get("objects.kubernetes.crossplane.io")
                 if o["spec"]["providerConfigRef"]["name"] == "site-a"]  # fmt: skip
        return not parts and not there

    wait_for("site-a's FederationCluster and its Objects gone", site_a_gone, timeout=READY_TIMEOUT, interval=3)
    wait_for("two clusters in status", lambda: fleet_state(plane)[0]["status"].get("clusters") == 2,
             timeout=READY_TIMEOUT, interval=3)  # fmt: skip
    claim, left = fleet_state(plane)
    kept = {k: v for k, v in after.items() if "site-a" not in k and k.startswith(("StatefulSet/", "NetworkPolicy/"))}
    assert {k: left.get(k) for k in kept} == kept, {k for k in kept if left.get(k) != kept[k]}
    assert not [k for k in left if "site-a" in k], left
    assert [(p["providerConfig"], p["clusterIndex"]) for p in claim["status"]["pools"]] == [
        ("site-b", 1),
        ("site-c", 2),
    ]
    assert plane.spoke.get("namespace", "flower-sites") is None or (
        plane.spoke.get("namespace", "flower-sites")["status"].get("phase") == "Terminating"
    )


@NEWEST_MINOR
def test_a_spoke_key_reaches_the_superlink_through_its_clusters_group(plane, tmp_path):
    """A remote cluster's key comes to the SuperLink's side in its group's shard, never through the Federation.

    The real identity program publishes a key in a site with the token of the pool's ServiceAccount there;
    the site's keys gatherer lists it and provider-kubernetes observes the list from that site; the site's
    FederationCluster alone reads it and reports it;
    its group lists it in its shard beside the SuperLink, which the SuperLink's pod mounts with every other
    shard; the Federation's own list names the shard. Deleting the publication withdraws the key.
    """
    hub, site = plane.hub, plane.sites["site-b"]
    name, namespace, pools = "federation-keys", "flower", "flower-keys"
    labels = {"flower.flwr.ai/keys-e2e": "yes"}
    hub.apply(openssl_tls_secret("keys-tls", namespace, [f"{name}-superlink.{namespace}.svc", "198.51.100.20"]))
    label_site(plane, "site-b", labels)
    pool = {"name": "gpu", "replicas": 1, "clusterSelector": {"matchLabels": labels}, "namespace": pools,
            "createNamespace": True}  # fmt: skip
    hub.apply({
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "Federation",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "mode": "StatefulSet", "isolationMode": "subprocess", "version": "1.41.0",
            "providerConfigRef": {"name": "hub"}, "tls": {"secretName": "keys-tls"},
            "nodeAuthentication": {"enabled": True, "identityVolume": {"storageClassName": "standard"}},
            "superlink": {"externalAddress": "198.51.100.20:9092"},
            "networkPolicy": {"fleetCIDRs": ["198.51.100.0/24"]},
            "supernodes": {"pools": [pool]},
        },
    })  # fmt: skip
    pod_name = f"{names.pool(name, 'gpu-site-b')}-0"
    pod = wait_for(f"pod {pod_name} in site-b", lambda: site.get("pod", pod_name, pools), timeout=READY_TIMEOUT)
    claim_name = f"{identity.IDENTITY_VOLUME}-{pod_name}"
    pvc = wait_for(f"claim {claim_name}", lambda: site.get("persistentvolumeclaim", claim_name, pools))
    account = pod["spec"]["serviceAccountName"]
    token = pod_token(site, account, pools, pod_name)
    # The pool's Role in the site comes with the pod's other Objects, in any order: until it is there the
    # publisher is refused and exits, and the kubelet starts it again (seen on a loaded CI: refused once).
    tries: list[subprocess.CompletedProcess[str]] = []
    published = wait_for("the key published with the pool's token", lambda: tries.append(
        publish_key(site, token, pools, pod, claim_name, tmp_path)) or tries[-1].returncode == 0,
        timeout=120, interval=5)  # fmt: skip
    assert published, (tries[-1].stdout, tries[-1].stderr)
    public_key = (tmp_path / "keys" / identity_program.PUBLIC_KEY).read_text().strip()
    holder = f"site-b/{pools}/PersistentVolumeClaim/{claim_name}"
    assert site.get("configmap", key_publications.configmap_name(pvc["metadata"]["uid"], public_key), pools)

    shard = published_keys.shard_id(read.group_resource(read.cluster_resource(ProviderConfigRef(name="site-b"),
                                                                              namespaced=False)))  # fmt: skip

    def listed_in_shard() -> str:
        live = hub.get("configmap", identity.shard_name(name, shard), namespace) or {}
        return (live.get("data") or {}).get(published_keys.AUTHORIZED_KEYS, "")

    with gatherer_running(site, name, pools, tmp_path):
        check_sharded(hub, site, name, namespace, pools=pools, public_key=public_key, holder=holder, pvc=pvc,
                      listed_in_shard=listed_in_shard)  # fmt: skip
    delete_keys_federation(plane, name, namespace, labels)


def check_sharded(  # noqa: PLR0913 - the scenario's places and what it looks for, each its own value
    hub: Cluster, site: Cluster, name: str, namespace: str, *, pools: str, public_key: str, holder: str,
    pvc: dict[str, Any], listed_in_shard: Any,
) -> None:  # fmt: skip
    """The site's key in its group's shard beside the SuperLink, never in the Federation's own list; then gone."""
    shard = published_keys.shard_id(read.group_resource(read.cluster_resource(ProviderConfigRef(name="site-b"),
                                                                              namespaced=False)))  # fmt: skip
    wait_for("the key in its group's shard beside the SuperLink", lambda: public_key in listed_in_shard(),
             timeout=READY_TIMEOUT, interval=3)  # fmt: skip
    assert f"{public_key} {holder} -\n" in listed_in_shard()
    # Not through the Federation: its own list holds no remote key, and names the shard.
    own = hub.get("configmap", published_keys.authorized_keys_name(name), namespace)["data"]
    assert public_key not in own[published_keys.AUTHORIZED_KEYS]
    assert identity.shard_file(shard) in own[published_keys.SHARDS_FIELD].split()
    part = next(c for c in hub.get("xfederationclusters.flower.crossplane.io")
                if c["spec"]["federation"] == name and c["spec"]["providerConfigRef"]["name"] == "site-b")  # fmt: skip
    assert f"{public_key} {holder} -" in part["status"]["publishedKeys"]
    # The SuperLink mounts every shard a group may write, so joins and leaves never roll it.
    superlink_pod = hub.get("statefulsets.apps", f"{name}-superlink", namespace)["spec"]["template"]["spec"]
    volume = next(v for v in superlink_pod["volumes"] if v["name"] == identity.AUTHORIZED_KEYS_VOLUME)
    assert len(volume["projected"]["sources"]) == 1 + identity.SHARDS

    # Withdrawn with its publication (as when Kubernetes deletes it with the claim).
    site.kubectl(
        "delete", "configmap", key_publications.configmap_name(pvc["metadata"]["uid"], public_key), "-n", pools
    )
    wait_for("the key gone from the shard", lambda: public_key not in listed_in_shard(),
             timeout=READY_TIMEOUT, interval=3)  # fmt: skip


def delete_keys_federation(plane: ControlPlane, name: str, namespace: str, labels: dict[str, str]) -> None:
    """The scenario's Federation deleted, with everything it composed, and the site's labels taken off."""
    hub = plane.hub
    # Gone before the next test, which holds every Federation still there to its generations.
    hub.kubectl("delete", "federation", name, "-n", namespace, "--wait=true", timeout=300)
    kinds = ",".join(
        f"{k}.flower.crossplane.io" for k in ("xfederations", "xfederationclusters", "xfederationclustergroups")
    )
    wait_for("its composite, groups and FederationClusters gone",
             lambda: not [c for c in hub.get(kinds)
                          if c["metadata"].get("labels", {}).get("crossplane.io/claim-name") == name
                          or c["spec"].get("federation") == name],
             timeout=READY_TIMEOUT, interval=3)  # fmt: skip
    label_site(plane, "site-b", dict.fromkeys(labels))


def configuration_release(plane: ControlPlane, tmp: pathlib.Path, tag: str) -> str:
    """The claim flavor's next release, as a maintainer would cut one: a new
    optional field in the XRD, a new release label on the Composition. Built
    and pushed as `make package` builds the committed one; its reference."""
    root = tmp / "apis"
    root.mkdir()
    for name in ("crossplane.yaml", "definition.yaml", "composition.yaml", "cluster-definition.yaml",
                 "cluster-composition.yaml", "group-definition.yaml", "group-composition.yaml",
                 "run-definition.yaml", "run-composition.yaml"):  # fmt: skip
        (root / name).write_bytes((ROOT / "apis" / name).read_bytes())
    definition = yaml.safe_load((root / "definition.yaml").read_text())
    spec = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["description"] = {
        "type": "string",
        "maxLength": 256,
        "description": "What the federation is for (added in this release).",
    }
    (root / "definition.yaml").write_text(yaml.safe_dump(definition, sort_keys=False))
    composition = yaml.safe_load((root / "composition.yaml").read_text())
    composition["metadata"]["labels"]["flower.crossplane.io/release"] = tag
    (root / "composition.yaml").write_text(yaml.safe_dump(composition, sort_keys=False))
    xpkg = tmp / "configuration-flower.xpkg"
    subprocess.run([plane.tools.crank, "xpkg", "build", f"--package-root={root}", "-o", str(xpkg)],
                   check=True, capture_output=True, text=True)  # fmt: skip
    plane.push(xpkg, "configuration-flower", tag)
    # Named as the platform names the first (examples/install/configuration.yaml): the mirror serves it.
    repository = yaml.safe_load(plane.configuration_manifest.read_text())["spec"]["package"].rsplit(":", 1)[0]
    return f"{repository}:{tag}"


def revision_of(plane: ControlPlane, claim: dict[str, Any]) -> str:
    """The CompositionRevision the claim's composite runs."""
    return composite_of(plane, claim)["spec"]["compositionRevisionRef"]["name"]


def composition_revision(plane: ControlPlane, release: str) -> dict[str, Any]:
    selector = (
        f"flower.crossplane.io/release={release},crossplane.io/composition-name=xfederations.flower.crossplane.io"
    )
    revisions = plane.hub.get("compositionrevisions", selector=selector)
    assert len(revisions) == 1, revisions
    return revisions[0]


def test_configuration_upgrade_keeps_federations_and_rolls_composition_revisions(plane, tmp_path):
    hub = plane.hub
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c
              for c in hub.get("federations.flower.crossplane.io", namespace="")}  # fmt: skip
    assert len(claims) > 1
    old = composition_revision(plane, RELEASE)["metadata"]["name"]
    assert {revision_of(plane, c) for c in claims.values()} == {old}
    # One team pins its Federation to the revision it runs; the rest follow releases.
    pinned = ("default", "my-federation")
    hub.kubectl("patch", "federation", pinned[1], "-n", pinned[0], "--type=merge",
                "-p", json.dumps({"spec": {"compositionUpdatePolicy": "Manual"}}))  # fmt: skip
    wait_for("the pin on the composite", lambda: composite_of(plane, get_claim(plane, pinned[1], pinned[0]))["spec"]
             .get("compositionUpdatePolicy") == "Manual", timeout=60, interval=2)  # fmt: skip
    composites = [composite_of(plane, c)["metadata"]["name"] for c in claims.values()]
    before = generations_of(plane, composites)

    ref = configuration_release(plane, tmp_path, "v0.2.0")
    plane.install_configuration("configuration-flower", ref)
    new = composition_revision(plane, "v0.2.0")["metadata"]["name"]
    assert new != old

    # The new optional field is served, once Crossplane has rewritten the CRD: the
    # package manager reports the Configuration healthy before that (seen on a loaded CI).
    def served_fields() -> dict[str, Any]:
        crd = hub.get("crd", "federations.flower.crossplane.io")
        return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]

    wait_for("the new field in the claim's CRD", lambda: "description" in served_fields(), timeout=120, interval=2)
    # Every Federation but the pinned one moves to the new revision, and stays Ready.
    followers = [k for k in claims if k != pinned]
    wait_for("the followers on the new revision",
             lambda: all(revision_of(plane, get_claim(plane, name, ns)) == new for ns, name in followers),
             timeout=180, interval=3)  # fmt: skip
    assert revision_of(plane, get_claim(plane, pinned[1], pinned[0])) == old
    for ns, name in claims:
        wait_ready(plane, name, ns)
    # The same function output: nothing rolled.
    time.sleep(30)  # two of Crossplane's 15 s polls on the new revision
    now = generations_of(plane, composites)
    assert now == before, {c: {k for k in before[c] if now[c].get(k) != before[c][k]} for c in composites}
    # The pinned team rolls when it chooses: name the revision, or follow again.
    hub.kubectl("patch", "federation", pinned[1], "-n", pinned[0], "--type=merge",
                "-p", json.dumps({"spec": {"compositionRevisionRef": {"name": new}}}))  # fmt: skip
    wait_for("the pinned Federation on the revision it named", lambda: revision_of(
        plane, get_claim(plane, pinned[1], pinned[0])) == new, timeout=120, interval=3)  # fmt: skip
    wait_ready(plane, pinned[1], pinned[0])


def test_deleting_claims_leaves_nothing(plane):
    hub, spoke = plane.hub, plane.spoke
    hub.kubectl("delete", "federations.flower.crossplane.io", "--all-namespaces", "--all", "--wait=true", timeout=300)
    wait_for(
        "every composite gone", lambda: hub.get("xfederations.flower.crossplane.io") == [], timeout=300, interval=3
    )
    wait_for("every Object gone", lambda: hub.get("objects.kubernetes.crossplane.io") == [], timeout=300, interval=3)
    for cluster in plane.clusters:
        for resource in ("statefulsets.apps", "daemonsets.apps", "networkpolicies.networking.k8s.io"):
            assert cluster.get(resource) == [], (cluster.name, resource)
        flower = [s for s in cluster.get("services") if "superlink" in s["metadata"]["name"]]
        assert flower == [], (cluster.name, flower)
        accounts = [a for a in cluster.get("serviceaccounts") if a["metadata"]["name"].endswith("-flower")]
        assert accounts == [], (cluster.name, accounts)
    gone = [(spoke, "flower-clients"), (spoke, "flower-edge"), *((c, "flower-sites") for c in plane.sites.values())]
    for cluster, ns in gone:
        wait_for(f"namespace {ns} gone from {cluster.name}",
                 lambda c=cluster, ns=ns: c.get("namespace", ns) is None or
                 c.get("namespace", ns)["status"].get("phase") == "Terminating", timeout=120)  # fmt: skip


@NEWEST_MINOR
def test_v2_namespaced_federation(plane, tmp_path):
    # The v2 flavor defines the same CRD name, so its package replaces the
    # claim flavor's: uninstalling a Configuration removes its XRD and Composition.
    hub = plane.hub
    hub.kubectl("delete", "configurations.pkg.crossplane.io", "configuration-flower", "--wait=true", timeout=180)
    wait_for("the v1 API gone", lambda: hub.get("crd", "federations.flower.crossplane.io") is None and
             hub.get("crd", "xfederations.flower.crossplane.io") is None and
             hub.get("compositions") == [], timeout=180, interval=2)  # fmt: skip
    ref = plane.push(CONFIGURATION_V2, "configuration-flower-v2", RELEASE)
    plane.install_configuration("configuration-flower-v2", ref)
    assert hub.get("compositeresourcedefinitions", "federations.flower.crossplane.io")["spec"]["scope"] == "Namespaced"
    federation = load_all(V2_EXAMPLE)[0]
    namespace = federation["metadata"]["namespace"]
    for cluster in (hub, plane.spoke):  # the example's partner pool has no createNamespace
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # examples/v2/providerconfigs.yaml as it is: the team's ProviderConfig lives in the Federation's
    # namespace and acts with the provider's own identity; the partner's is cluster-wide.
    configs = plane.v2_provider_configs(V2_PROVIDER_CONFIGS)
    assert {c["metadata"].get("namespace") for c in configs if c["kind"] == "ProviderConfig"} == {namespace}
    hub.apply(*configs)
    # From here the platform allows one pod field beyond the defaults, which the Federation uses.
    hub.apply(platform_policy(V2_POLICY))
    check_a_greedy_federation_is_refused(plane, federation)
    federation["spec"]["supernodes"]["pools"][0]["podTemplate"] = V2_POD_TEMPLATE
    hub.apply(federation)
    name = federation["metadata"]["name"]

    def federation_ready():
        live_fed = hub.get("federations.flower.crossplane.io", name, namespace)
        return live_fed if ready(live_fed) else None

    live_fed = wait_for(f"Federation {namespace}/{name} Ready", federation_ready, timeout=READY_TIMEOUT, interval=2)
    total = sum(p["replicas"] for p in federation["spec"]["supernodes"]["pools"])
    assert live_fed["status"]["supernodes"] == f"{total}/{total}"
    objects = hub.get("objects.kubernetes.m.crossplane.io", namespace=namespace)
    assert objects and all(o["apiVersion"] == "kubernetes.m.crossplane.io/v1alpha1" for o in objects)
    partner = plane.spoke.get("statefulsets.apps", f"{name}-supernode-partner", namespace)
    assert partner["spec"]["replicas"] == 2 and partner["spec"]["ordinals"]["start"] == 2
    home = hub.get("statefulsets.apps", f"{name}-supernode-default", namespace)
    assert home["status"]["readyReplicas"] == 2
    # The selector pool's one cluster (partner-cluster carries its label) is composed by a FederationCluster.
    parts = hub.get("federationclusters.flower.crossplane.io", namespace=namespace)
    assert [p["spec"]["providerConfigRef"] for p in parts] == [{"kind": "ClusterProviderConfig",
                                                               "name": "partner-cluster"}]  # fmt: skip
    assert ready(parts[0]), parts[0].get("status")
    sites = [s for s in plane.spoke.get("statefulsets.apps", namespace=namespace)
             if s["metadata"].get("annotations", {}).get("flower.flwr.ai/selected-by") == "sites"]  # fmt: skip
    assert [s["status"].get("readyReplicas") for s in sites] == [1]
    check_a_tenant_writes_federations_not_their_parts(plane, federation, parts[0])
    check_tightening_the_policy_deletes_nothing(plane, federation)
    check_a_namespaced_run_reaches_its_federation(plane, federation, tmp_path)
    hub.kubectl("delete", "federations.flower.crossplane.io", name, "-n", namespace, "--wait=true", timeout=300)
    wait_for("the v2 Objects gone", lambda: hub.get("objects.kubernetes.m.crossplane.io") == [], timeout=300)
    assert plane.spoke.get("statefulsets.apps", f"{name}-supernode-partner", namespace) is None


# -- tenancy: the platform's policy (function/api/policy.py) -------------------------------------


def synced_false(plane: ControlPlane, name: str, namespace: str, *words: str) -> str | None:
    """The Federation's Synced message once it is False and names every word; else None."""
    live = plane.hub.get("federations.flower.crossplane.io", name, namespace)
    synced = condition(live, "Synced")
    message = synced.get("message") or ""
    return message if synced.get("status") == "False" and all(w in message for w in words) else None


def check_a_greedy_federation_is_refused(plane: ControlPlane, federation: dict[str, Any]) -> None:
    """From a tenant's seat: a Federation in their namespace asking for the host's process namespace and
    a pool in kube-system of the partner cluster. Under the default policy Crossplane says why in
    Synced, and nothing is composed: no Object, nothing in the spoke's kube-system."""
    hub, namespace = plane.hub, federation["metadata"]["namespace"]
    greedy = json.loads(json.dumps(federation))
    greedy["metadata"]["name"] = "greedy"
    pools = greedy["spec"]["supernodes"]["pools"]
    pools[0]["podTemplate"] = {"spec": {"hostPID": True}}
    pools[1]["namespace"] = "kube-system"
    hub.apply(greedy)
    message = wait_for("the greedy Federation refused, naming both fields",
                       lambda: synced_false(plane, "greedy", namespace, "pools[0].podTemplate.spec.hostPID",
                                            "pools[1].namespace", "kube-system"), timeout=180, interval=2)  # fmt: skip
    assert "refused by the platform's policy" in message, message
    objects = hub.get(
        "objects.kubernetes.m.crossplane.io", namespace=namespace, selector="crossplane.io/composite=greedy"
    )
    assert objects == [], [o["metadata"]["name"] for o in objects]
    assert (
        plane.spoke.get("statefulsets.apps", namespace="kube-system", selector="app.kubernetes.io/instance=greedy")
        == []
    )
    hub.kubectl("delete", "federations.flower.crossplane.io", "greedy", "-n", namespace, "--wait=true", timeout=120)


def as_tenant(plane: ControlPlane, doc: dict[str, Any], *flags: str) -> str:
    """kubectl create -f doc as a member of team-a: the API server's answer, or its refusal's words."""
    try:
        return plane.hub.kubectl(*AS_TENANT, "create", *flags, "-f", "-", stdin=yaml.safe_dump(doc))
    except KubectlError as err:
        return f"refused: {err.stderr}"


def check_a_tenant_writes_federations_not_their_parts(
    plane: ControlPlane, federation: dict[str, Any], part: dict[str, Any]
) -> None:
    """From a tenant's seat, bound as examples/v2/tenant.yaml binds team-a: Federations are theirs to
    write, FederationClusters are not. And should a platform grant those too (Crossplane's aggregated
    edit role does), a FederationCluster written by hand gets nothing a Federation of theirs would not:
    one speaking for another namespace's Federation, or asking for the host's process namespace, is
    refused in its Synced and composes nothing."""
    hub, namespace = plane.hub, federation["metadata"]["namespace"]
    hub.apply(*load_all(V2_TENANT))
    theirs = {**federation, "metadata": {"name": "theirs", "namespace": namespace}}
    answer = as_tenant(plane, theirs, "--dry-run=server")
    assert answer.startswith("federation.flower.crossplane.io/theirs created"), answer
    forged = {"apiVersion": part["apiVersion"], "kind": part["kind"],
              "metadata": {"name": "forged", "namespace": namespace},
              "spec": {k: v for k, v in part["spec"].items() if k != "crossplane"}}  # fmt: skip
    answer = as_tenant(plane, forged)
    assert answer.startswith("refused") and "forbidden" in answer, answer
    group = hub.get("federationclustergroups.flower.crossplane.io", namespace=namespace)[0]
    forged_group = {"apiVersion": group["apiVersion"], "kind": group["kind"],
                    "metadata": {"name": "forged-group", "namespace": namespace},
                    "spec": {k: v for k, v in group["spec"].items() if k != "crossplane"}}  # fmt: skip
    answer = as_tenant(plane, forged_group)
    assert answer.startswith("refused") and "forbidden" in answer, answer
    # The platform's mistake: the tenant may write FederationClusters and their groups in their namespace.
    mistake = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "parts-by-mistake", "namespace": namespace},
        "rules": [
            {
                "apiGroups": ["flower.crossplane.io"],
                "resources": ["federationclusters", "federationclustergroups"],
                "verbs": ["*"],
            }
        ],
    }
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "parts-by-mistake", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "parts-by-mistake"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a"}]}  # fmt: skip
    hub.apply(mistake, binding)
    elsewhere = json.loads(json.dumps(forged))
    elsewhere["metadata"]["name"] = "forged-elsewhere"
    elsewhere["spec"]["namespace"] = "team-b"
    greedy = json.loads(json.dumps(forged))
    greedy["metadata"]["name"] = "forged-greedy"
    greedy["spec"]["federationSpec"]["supernodes"]["pools"][0]["podTemplate"] = {"spec": {"hostPID": True}}
    for doc, words in [
        (elsewhere, ("spec.namespace", namespace)),
        (greedy, ("hostPID", "refused by the platform's policy")),
    ]:
        answer = as_tenant(plane, doc)
        assert not answer.startswith("refused"), answer
        wait_for(f"{doc['metadata']['name']} refused, saying why", lambda doc=doc, words=words: _if(
            lambda c: c.get("status") == "False" and all(w in c.get("message", "") for w in words),
            condition(hub.get("federationclusters.flower.crossplane.io", doc["metadata"]["name"], namespace), "Synced"),
        ), timeout=180, interval=2)  # fmt: skip
        composed = hub.get("objects.kubernetes.m.crossplane.io", namespace=namespace,
                           selector=f"crossplane.io/composite={doc['metadata']['name']}")  # fmt: skip
        assert composed == [], [o["metadata"]["name"] for o in composed]
        hub.kubectl("delete", "federationclusters.flower.crossplane.io", doc["metadata"]["name"], "-n", namespace,
                    "--wait=true", timeout=120)  # fmt: skip
    check_a_forged_group_gets_nothing(plane, forged_group)
    hub.kubectl("delete", "rolebinding,role", "parts-by-mistake", "-n", namespace)


def check_a_forged_group_gets_nothing(plane: ControlPlane, forged: dict[str, Any]) -> None:
    """A group written by hand by a tenant granted groups by mistake: one speaking for another namespace's
    Federation is refused in its Synced; one whose pools ask for the host's process namespace composes a
    FederationCluster that the platform's policy refuses. Neither composes an Object."""
    hub, namespace = plane.hub, forged["metadata"]["namespace"]
    elsewhere = json.loads(json.dumps(forged))
    elsewhere["metadata"]["name"] = "forged-group-elsewhere"
    elsewhere["spec"]["namespace"] = "team-b"
    greedy = json.loads(json.dumps(forged))
    greedy["metadata"]["name"] = "forged-group-greedy"
    greedy["spec"]["federationSpec"]["supernodes"]["pools"][0]["podTemplate"] = {"spec": {"hostPID": True}}
    for doc in (elsewhere, greedy):
        answer = as_tenant(plane, doc)
        assert not answer.startswith("refused"), answer
    wait_for("the group for another namespace refused, saying why", lambda: _if(
        lambda c: c.get("status") == "False" and "spec.namespace" in c.get("message", ""),
        condition(hub.get("federationclustergroups.flower.crossplane.io", elsewhere["metadata"]["name"], namespace),
                  "Synced"),
    ), timeout=180, interval=2)  # fmt: skip

    def greedy_parts() -> list[dict[str, Any]]:
        return [p for p in hub.get("federationclusters.flower.crossplane.io", namespace=namespace)
                if any(o.get("name") == greedy["metadata"]["name"]
                       for o in p["metadata"].get("ownerReferences") or [])]  # fmt: skip

    def greedy_part_refused() -> bool:
        parts = greedy_parts()
        return bool(parts) and all(
            condition(p, "Synced").get("status") == "False"
            and "refused by the platform's policy" in condition(p, "Synced").get("message", "")
            for p in parts
        )

    wait_for("the greedy group's FederationCluster refused by the policy", greedy_part_refused,
             timeout=180, interval=2)  # fmt: skip
    # Whether Crossplane labels an Object with its own composite or the tree's root, neither is there.
    composites = {elsewhere["metadata"]["name"], greedy["metadata"]["name"],
                  *(p["metadata"]["name"] for p in greedy_parts())}  # fmt: skip
    composed = [o for o in hub.get("objects.kubernetes.m.crossplane.io", namespace=namespace)
                if o["metadata"].get("labels", {}).get("crossplane.io/composite") in composites]  # fmt: skip
    assert composed == [], [o["metadata"]["name"] for o in composed]
    for doc in (elsewhere, greedy):
        hub.kubectl("delete", "federationclustergroups.flower.crossplane.io", doc["metadata"]["name"], "-n",
                    namespace, "--wait=true", timeout=120)  # fmt: skip


def check_tightening_the_policy_deletes_nothing(plane: ControlPlane, federation: dict[str, Any]) -> None:
    """A running Federation the platform's new policy no longer admits keeps every Object and workload,
    and says so in Synced; loosened again, it is Synced and Ready once more."""
    hub, spoke = plane.hub, plane.spoke
    name, namespace = federation["metadata"]["name"], federation["metadata"]["namespace"]
    before = sorted(o["metadata"]["name"] for o in hub.get("objects.kubernetes.m.crossplane.io", namespace=namespace))
    # Tightened to the defaults: no pod field of the platform's in a podTemplate.
    hub.kubectl("delete", "environmentconfigs.apiextensions.crossplane.io", policy.PLATFORM_ENVIRONMENT_CONFIG)
    wait_for("the running Federation no longer admitted", lambda: synced_false(plane, name, namespace,
             "podTemplate.spec.automountServiceAccountToken"), timeout=180, interval=2)  # fmt: skip
    # A few reconciles later, nothing is gone: not an Object, not a workload in either cluster.
    time.sleep(20)
    after = sorted(o["metadata"]["name"] for o in hub.get("objects.kubernetes.m.crossplane.io", namespace=namespace))
    assert after == before
    assert hub.get("statefulsets.apps", f"{name}-supernode-default", namespace) is not None
    assert spoke.get("statefulsets.apps", f"{name}-supernode-partner", namespace) is not None
    hub.apply(platform_policy(V2_POLICY))
    wait_for(f"Federation {namespace}/{name} admitted again",
             lambda: _if(ready, hub.get("federations.flower.crossplane.io", name, namespace)),
             timeout=READY_TIMEOUT, interval=2)  # fmt: skip


def check_a_namespaced_run_reaches_its_federation(plane: ControlPlane, federation: dict[str, Any],
                                                  work: pathlib.Path) -> None:  # fmt: skip
    """From a run author's seat in the team's namespace: a namespaced FederationRun (no claim) reaches the runs
    list of a v2 Federation of theirs, and the runner's report (its SuperLink account's token) reaches the run.
    The example's Flower (1.25) has no runner, so a Federation at a release that has one, of one small pool;
    it need not be Ready, only composed."""
    hub, namespace = plane.hub, federation["metadata"]["namespace"]
    assert hub.get("compositeresourcedefinitions", f"federationruns.{RUNS_GROUP}")["spec"]["scope"] == "Namespaced"
    runs_fed = json.loads(json.dumps(federation))
    runs_fed["metadata"] = {"name": "team-runs", "namespace": namespace}
    for part in ("superlink", "supernodes"):
        image = runs_fed["spec"][part]["image"]
        runs_fed["spec"][part]["image"] = f"{image.rsplit(':', 1)[0]}:1.42.0"
    runs_fed["spec"]["supernodes"]["pools"] = [{**runs_fed["spec"]["supernodes"]["pools"][0], "replicas": 1}]
    hub.apply(runs_fed)
    author = account_with(hub, "run-author", namespace, RUN_AUTHOR_RIGHTS, work)
    submit_run(author, "team-run", namespace, "team-runs", work)
    listed, bundles = wait_for("the namespaced run on its Federation's runs list", lambda: _if(
        lambda w: "team-run" in w[0], wanted_runs(hub, "team-runs", namespace)), timeout=RUN_TIMEOUT)  # fmt: skip
    assert listed["team-run"]["uid"] == run_of(hub, "team-run", namespace)["metadata"]["uid"], listed
    assert base64.b64decode(bundles[listed["team-run"]["app"]]) == FAKE_BUNDLE, sorted(bundles)
    pending = wait_for("the namespaced run Pending, waiting for the runner", lambda: _if(
        lambda s: "runner" in (s.get("reason") or ""), run_of(author, "team-run", namespace).get("status") or {}),
        timeout=RUN_TIMEOUT)  # fmt: skip
    assert pending["phase"] == "Pending", pending
    # The runner's seat: the report, found by the labels the function set on its namespaced Object, reaches
    # the run; a v2 run composes nothing and is Ready while Flower runs it.
    account = names.superlink("team-runs")
    runner = as_token(hub, hub.kubectl("create", "token", account, "-n", namespace).strip(), work / "runner")
    entry = {"uid": listed["team-run"]["uid"], "runId": "7", "phase": "Running", "flowerStatus": "running"}
    runner.kubectl("patch", "configmap", f"{account}-run-status", "-n", namespace, "--type=merge",
                   "-p", json.dumps({"data": {"runs": json.dumps({"team-run": entry})}}))  # fmt: skip
    running = wait_for("the namespaced run Running and Ready", lambda: _if(
        lambda r: (r.get("status") or {}).get("phase") == "Running" and condition(r, "Ready").get("status") == "True",
        run_of(author, "team-run", namespace)), timeout=RUN_TIMEOUT)  # fmt: skip
    assert running["status"]["runId"] == "7", running["status"]
    author.kubectl("delete", f"federationruns.{RUNS_GROUP}", "team-run", "-n", namespace, "--wait=true", timeout=120)
    hub.kubectl("delete", "federations.flower.crossplane.io", "team-runs", "-n", namespace, "--wait=true",
                timeout=300)  # fmt: skip
