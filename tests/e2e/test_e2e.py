"""The product as users run it: the package installed by Crossplane, Federations
applied with kubectl, workloads asserted on live objects in every cluster.

The tests of one control plane run in file order and build on each other: the
examples applied by one are what the next changes, faults and finally deletes.
"""

from __future__ import annotations

import base64
import json
import pathlib
import subprocess
import time
from typing import Any

from peers import CLAIMS, INVALID, load_all

from controlplane import CROSSPLANE_NS, FUNCTION, Cluster, ControlPlane, condition, wait_for

# Examples whose certificate cert-manager issues: this control plane has no
# cert-manager, so their Certificate can never turn Ready.
NEEDS_CERT_MANAGER = {"production.yaml", "tls-cert-manager-multicluster.yaml"}
APPLIED = [c for c in CLAIMS if c.name not in NEEDS_CERT_MANAGER]
NAMESPACES = ["flower", "ml-platform"]
READY_TIMEOUT = 300
V2 = CLAIMS[0].parent.parent.parent / "apis" / "v2"
V2_EXAMPLE = CLAIMS[0].parent.parent / "v2" / "federation.yaml"


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
    return plane.spoke if provider_config.startswith("spoke") else plane.hub


def live(plane: ControlPlane, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object an Object manages, read from the cluster it targets."""
    manifest = obj["spec"]["forProvider"]["manifest"]
    cluster = cluster_for(plane, obj["spec"]["providerConfigRef"]["name"])
    resource = {"StatefulSet": "statefulsets.apps", "DaemonSet": "daemonsets.apps"}.get(manifest["kind"], manifest["kind"])
    return cluster.get(resource, manifest["metadata"]["name"], manifest["metadata"].get("namespace", ""))


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
    out = plane.hub.kubectl("get", "federation", name, "-n", namespace)
    header, row = out.splitlines()[:2]
    return dict(zip(header.split(), row.split(), strict=True))


def generations(plane: ControlPlane, composite_name: str) -> dict[str, int]:
    """metadata.generation of every Object and of every live object it manages."""
    out = {}
    for obj in objects_of(plane, composite_name):
        out[f"Object/{obj['metadata']['name']}"] = obj["metadata"]["generation"]
        target = live(plane, obj)
        if target is not None and "generation" in target["metadata"]:
            kind = obj["spec"]["forProvider"]["manifest"]["kind"]
            out[f"{kind}/{target['metadata']['name']}"] = target["metadata"]["generation"]
    return out


def openssl_tls_secret(name: str, namespace: str, hosts: list[str]) -> dict[str, Any]:
    """A CA and a server certificate signed by it, as a cluster admin would supply them."""
    import tempfile

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


def test_function_installed_by_the_package_manager(plane):
    hub = plane.hub
    function = hub.get("functions.pkg.crossplane.io", FUNCTION)
    assert condition(function, "Installed").get("status") == "True", function.get("status")
    assert condition(function, "Healthy").get("status") == "True", function.get("status")
    revision = next(r for r in hub.get("functionrevisions") if r["spec"]["desiredState"] == "Active")
    assert revision["spec"]["image"] == plane.function_image
    # Crossplane generated the TLS pair the function serves with.
    assert hub.get("secret", f"{FUNCTION}-tls-server", CROSSPLANE_NS)["data"]["tls.crt"]
    # The function runs from the image the registry serves, as its non-root user.
    status = pathlib.Path(f"/proc/{plane.processes['function'].popen.pid}/status")
    assert plane.processes["function"].alive()
    assert (plane.function_rootfs / "venv" / "fn" / "bin" / "function").exists()
    assert status.exists()
    assert plane.image_config["User"] == "nonroot:nonroot"


def test_invalid_examples_are_refused_at_admission(plane):
    for bad in INVALID:
        proc = plane.hub.apply(*load_all(bad), check=False)
        assert proc.returncode != 0, f"{bad.name} was admitted"
        assert expected_message(bad) in proc.stderr, f"{bad.name}: {proc.stderr}"
    assert plane.hub.get("xfederations.flower.crossplane.io") == []


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


def test_every_example_becomes_ready(plane):
    hub = plane.hub
    for namespace in NAMESPACES:
        hub.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    hub.apply(openssl_tls_secret("superlink-tls", "default", ["federation-tls-superlink.default.svc"]))
    for path in APPLIED:
        hub.kubectl("apply", "-f", str(path))
    for path in APPLIED:
        claim = claim_of(path)
        name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
        live_claim = wait_ready(plane, name, namespace)
        check_status(plane, path, live_claim)


def check_status(plane: ControlPlane, path: pathlib.Path, claim: dict[str, Any]) -> None:
    """The claim's status and columns agree with its spec and with the live workloads."""
    spec = claim_of(path)["spec"]
    name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    status = claim["status"]
    composite = composite_of(plane, claim)
    live_workloads = workloads(plane, composite["metadata"]["name"])
    pools = {p["name"]: p for p in status["pools"]}
    assert sorted(pools) == sorted(p["name"] for p in spec["supernodes"]["pools"]), path.name
    total = 0
    for pool in spec["supernodes"]["pools"]:
        observed = pools[pool["name"]]
        workload = live_workloads[f"{name}-supernode-{pool['name']}"]
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
        total += observed["desired"]
    assert status["supernodes"] == f"{total}/{total}"
    assert (status["readySupernodes"], status["desiredSupernodes"]) == (total, total)
    # The SuperLink and its Service, where the endpoint says.
    superlink = live_workloads[f"{name}-superlink"]
    assert superlink["status"]["readyReplicas"] == 1
    service_host, _, port = status["endpoints"]["superlinkService"].rpartition(":")
    service_name, service_ns = service_host.split(".")[:2]
    service = plane.hub.get("service", service_name, service_ns)
    assert int(port) in [p["port"] for p in service["spec"]["ports"]]
    for kind in ("Ready", "Synced"):
        assert condition(claim, kind).get("status") == "True", (path.name, kind, claim["status"]["conditions"])
    # The function's own conditions are on the composite (claims show Crossplane's).
    for kind in ("Ready", "Synced", "SuperLinkReady", "SuperNodesReady"):
        assert condition(composite, kind).get("status") == "True", (path.name, kind, composite["status"])
    cols = columns(plane, name, namespace)
    assert (cols["SYNCED"], cols["READY"]) == ("True", "True")
    assert (cols["MODE"], cols["ISOLATION"], cols["SUPERNODES"]) == (
        spec["mode"], spec["isolationMode"], f"{total}/{total}"
    )


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
    assert external in args, (external, args)


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
    node_port = next(p["nodePort"] for p in hub.get("service", "federation-edge-tls-superlink", "flower")["spec"]["ports"]
                     if p["port"] == 9092)  # fmt: skip
    assert live_claim["status"]["endpoints"]["external"] == f"198.51.100.10:{node_port}"
    copied = plane.spoke.get("secret", "federation-edge-tls-superlink-ca", "flower-edge")
    source = hub.get("secret", "edge-tls", "flower")
    assert copied["data"] == {"ca.crt": source["data"]["ca.crt"]}  # the CA only, never the key
    pool = plane.spoke.get("statefulsets.apps", "federation-edge-tls-supernode-edge", "flower-edge")
    args = pool["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"198.51.100.10:{node_port}" in args and "--root-certificates" in " ".join(args)


def test_scale_and_image_change_move_one_generation(plane):
    name, namespace = "federation-nvidia", "default"
    composite = composite_of(plane, get_claim(plane, name, namespace))["metadata"]["name"]
    before = generations(plane, composite)
    claim = get_claim(plane, name, namespace)
    pools = claim["spec"]["supernodes"]["pools"]
    target = pools[0]["name"]
    workload = f"StatefulSet/{name}-supernode-{target}"
    patch = [{"op": "replace", "path": "/spec/supernodes/pools/0/replicas", "value": pools[0]["replicas"] + 1}]
    plane.hub.kubectl("patch", "federation", name, "-n", namespace, "--type=json", "-p", json.dumps(patch))
    wait_for(f"{workload} scaled", lambda: generations(plane, composite).get(workload) == before[workload] + 1,
             timeout=READY_TIMEOUT, interval=2)  # fmt: skip
    wait_ready(plane, name, namespace)
    after = generations(plane, composite)
    moved = {k for k in before if after.get(k) != before[k]}
    assert {k for k in moved if not k.startswith("Object/")} == {workload}, moved
    live_set = plane.hub.get("statefulsets.apps", f"{name}-supernode-{target}", namespace)
    assert live_set["spec"]["replicas"] == pools[0]["replicas"] + 1

    image = "flwr/supernode:1.25.1"
    before = after
    patch = [{"op": "replace", "path": f"/spec/supernodes/pools/0/images", "value": {"supernode": image}}]
    plane.hub.kubectl("patch", "federation", name, "-n", namespace, "--type=json", "-p", json.dumps(patch))
    wait_for(f"{workload} new image", lambda: generations(plane, composite).get(workload) == before[workload] + 1,
             timeout=READY_TIMEOUT, interval=2)  # fmt: skip
    wait_ready(plane, name, namespace)
    after = generations(plane, composite)
    moved = {k for k in before if after.get(k) != before[k]}
    assert {k for k in moved if not k.startswith("Object/")} == {workload}, moved
    live_set = plane.hub.get("statefulsets.apps", f"{name}-supernode-{target}", namespace)
    assert live_set["spec"]["template"]["spec"]["containers"][0]["image"] == image


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


def test_function_restart_while_reconciling_deletes_nothing(plane):
    name, namespace = "my-federation", "default"
    composite = composite_of(plane, get_claim(plane, name, namespace))["metadata"]["name"]
    objects_before = {o["metadata"]["name"] for o in objects_of(plane, composite)}
    function = plane.processes["function"]
    patch = [{"op": "replace", "path": "/spec/supernodes/pools/0/replicas", "value": 3}]
    plane.hub.kubectl("patch", "federation", name, "-n", namespace, "--type=json", "-p", json.dumps(patch))
    function.stop(sig=9)
    # Crossplane keeps trying and fails while the function is down; nothing is deleted.
    for _ in range(10):
        time.sleep(3)
        assert {o["metadata"]["name"] for o in objects_of(plane, composite)} == objects_before
        assert all(w for w in workloads(plane, composite).values())
    plane.start_function()
    wait_for("the scale-up after the restart",
             lambda: plane.hub.get("statefulsets.apps", f"{name}-supernode-default", namespace)["spec"]["replicas"] == 3,
             timeout=READY_TIMEOUT, interval=2)  # fmt: skip
    claim = wait_ready(plane, name, namespace)
    assert claim["status"]["supernodes"] == "3/3"
    assert {o["metadata"]["name"] for o in objects_of(plane, composite)} == objects_before


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
    # Five idle minutes, polled every 15 seconds, as Crossplane and the provider
    # poll: any change would roll pods for nothing.
    composites = [o["metadata"]["name"] for o in plane.hub.get("xfederations.flower.crossplane.io")]
    before = {c: generations(plane, c) for c in composites}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(15)
        now = {c: generations(plane, c) for c in composites}
        assert now == before, {c: {k for k in before[c] if now[c].get(k) != before[c][k]} for c in composites}


def test_deleting_claims_leaves_nothing(plane):
    hub, spoke = plane.hub, plane.spoke
    hub.kubectl("delete", "federations.flower.crossplane.io", "--all-namespaces", "--all", "--wait=true", timeout=300)
    wait_for("every composite gone", lambda: hub.get("xfederations.flower.crossplane.io") == [], timeout=300, interval=3)
    wait_for("every Object gone", lambda: hub.get("objects.kubernetes.crossplane.io") == [], timeout=300, interval=3)
    for cluster in (hub, spoke):
        for resource in ("statefulsets.apps", "daemonsets.apps", "networkpolicies.networking.k8s.io"):
            assert cluster.get(resource) == [], (cluster.name, resource)
        flower = [s for s in cluster.get("services") if "superlink" in s["metadata"]["name"]]
        assert flower == [], (cluster.name, flower)
        accounts = [a for a in cluster.get("serviceaccounts") if a["metadata"]["name"].endswith("-flower")]
        assert accounts == [], (cluster.name, accounts)
    for ns in ("flower-clients", "flower-edge"):
        wait_for(f"namespace {ns} gone", lambda ns=ns: spoke.get("namespace", ns) is None or
                 spoke.get("namespace", ns)["status"].get("phase") == "Terminating", timeout=120)  # fmt: skip



def test_v2_namespaced_federation(plane):
    # The v2 flavor defines the same CRD name, so it replaces the v1 API here.
    hub = plane.hub
    hub.kubectl("delete", "-f", str(plane.composition), "-f", str(plane.xrd), "--wait=true", timeout=180)
    wait_for("the v1 CRDs gone", lambda: hub.get("crd", "federations.flower.crossplane.io") is None and
             hub.get("crd", "xfederations.flower.crossplane.io") is None, timeout=180, interval=2)  # fmt: skip
    hub.kubectl("apply", "-f", str(V2 / "definition.yaml"), "-f", str(V2 / "composition.yaml"))
    wait_for("the v2 XRD Established", lambda: condition(
        hub.get("compositeresourcedefinitions", "federations.flower.crossplane.io"), "Established"
    ).get("status") == "True", timeout=180, interval=2)  # fmt: skip
    federation = load_all(V2_EXAMPLE)[0]
    namespace = federation["metadata"]["namespace"]
    for cluster in (hub, plane.spoke):  # the example's partner pool has no createNamespace
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # examples/v2/providerconfigs.yaml's names; credentials from kubeconfig Secrets,
    # as provider-kubernetes runs outside the clusters here.
    hub.apply(*plane.v2_provider_configs(namespace))
    hub.kubectl("apply", "-f", str(V2_EXAMPLE))
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
    hub.kubectl("delete", "-f", str(V2_EXAMPLE), "--wait=true", timeout=300)
    wait_for("the v2 Objects gone", lambda: hub.get("objects.kubernetes.m.crossplane.io") == [], timeout=300)
    assert plane.spoke.get("statefulsets.apps", f"{name}-supernode-partner", namespace) is None
