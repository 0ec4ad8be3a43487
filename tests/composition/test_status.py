"""Status from observed state: each scenario through `function render --observed`
and `crank render --observed-resources`, asserting the XR status, conditions and
every resource's readiness."""

from __future__ import annotations

import copy
import dataclasses
import pathlib
import subprocess
from typing import Any

import jsonschema
import pydantic
import pytest
import yaml

from function.api.status_model import FederationStatus
from function.serving import render
from support.peers import EXAMPLES, ROOT, load_all

STS_EXAMPLE = EXAMPLES / "claims" / "gpu-nvidia.yaml"  # pools cpu-only (4) and nvidia-gpus (2)
DS_EXAMPLE = EXAMPLES / "claims" / "multipools.yaml"  # DaemonSet pools pool-a and pool-b
AUTH_EXAMPLE = EXAMPLES / "claims" / "persistence-auth.yaml"  # node authentication, pool default (2)
CERT_EXAMPLE = EXAMPLES / "claims" / "production.yaml"  # cert-manager, node authentication, pool gpu (4)


def sts_status(replicas, ready, updated=None, generation=1, observed=1):
    status = {"observedGeneration": observed, "replicas": replicas}
    if ready:
        status["readyReplicas"] = ready
    rolled = updated if updated is not None else replicas
    if rolled:
        status["updatedReplicas"] = rolled
    return generation, status


def ds_status(scheduled, ready, updated=None):
    status = {
        "observedGeneration": 1,
        "desiredNumberScheduled": scheduled,
        "numberReady": ready,
        "currentNumberScheduled": scheduled,
        "numberMisscheduled": 0,
    }
    rolled = updated if updated is not None else scheduled
    if rolled:
        status["updatedNumberScheduled"] = rolled
    return 1, status


def observed_objects(example, live):
    """Observed Objects for example: resource name -> (generation, status) of the live object."""
    docs, _ = render.render(load_all(example)[0], [])
    out = []
    for doc in docs[1:]:
        name = doc["metadata"]["annotations"][render.COMPOSITION_RESOURCE_NAME]
        if doc["kind"] != "Object":
            continue  # a key collection: always ready, never judged
        if live and name.startswith(AUXILIARY) and name not in live:
            # Once anything exists, so do the plain objects (ServiceAccounts, policies).
            live = {**live, name: CREATED}
        if name not in live:
            continue
        generation, status = live[name]
        manifest = copy.deepcopy(doc["spec"]["forProvider"]["manifest"])
        manifest["metadata"]["generation"] = generation
        manifest["status"] = status
        out.append(
            {
                "apiVersion": doc["apiVersion"],
                "kind": "Object",
                "metadata": {
                    "name": f"{doc['metadata']['generateName']}{name}",
                    "annotations": doc["metadata"]["annotations"],
                },
                "spec": doc["spec"],
                "status": {"atProvider": {"manifest": manifest}},
            }
        )
    return out


SERVICE = (1, {"loadBalancer": {}})
CREATED = (1, {})
SUPERLINK_UP = {"superlink": sts_status(1, 1), "superlink-service": SERVICE}
AUXILIARY = (
    "serviceaccount-",
    "networkpolicy-",
    "identity-program-",
    "supernode-keys-",
    "superlink-authorized-keys",
    "superlink-fleet-proxy",  # from Flower 1.40: the Fleet-only proxy's configuration
    "superlink-registrations",
    "superlink-serviceaccount",
    "superlink-run",  # from Flower 1.26: the runner's list of runs, its report and its Role
)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Live objects of an example, and the status, readiness and warnings they must give."""

    name: str
    reason: str
    example: pathlib.Path
    # Composition resource name -> (generation, status) of the live object.
    live: dict[str, tuple[int, dict[str, Any]]]
    pools: list[tuple[str, int, int]]  # (name, desired, ready)
    supernodes: str
    conditions: dict[str, tuple[str, str]]  # type -> (status, message)
    unready: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)  # substrings of the function's warnings
    # Observed Objects the example itself does not compose.
    extra_observed: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # status.registeredSupernodes: None without node authentication.
    registered: int | None = None


def _removed_pool_object():
    """An Object of a pool the spec no longer has (renamed from old-pool)."""
    return {
        "apiVersion": "kubernetes.crossplane.io/v1alpha2",
        "kind": "Object",
        "metadata": {
            "name": "federation-nvidia-pool-old-pool",
            "annotations": {render.COMPOSITION_RESOURCE_NAME: "pool-old-pool"},
        },
        "spec": {"forProvider": {"manifest": {"apiVersion": "apps/v1", "kind": "StatefulSet"}}},
        "status": {"atProvider": {"manifest": {"status": {"readyReplicas": "garbage"}}}},
    }


REGISTRATION_PENDING = (
    "1/2 SuperNode keys registered (pools default 1/2): each SuperNode pod publishes its key in its "
    "supernode-identity init container, Crossplane carries it to federation-durable-superlink-authorized-keys, "
    "and the SuperLink's supernode-registrar registers it; until then the SuperNode is refused and restarts. "
    "Their logs say why"
)

NOT_ISSUED = {"type": "Ready", "status": "False", "reason": "DoesNotExist", "message": "Issuer flower-ca not found"}
PROD_UP = {**SUPERLINK_UP, "pool-gpu": sts_status(4, 4)}

SCENARIOS = [
    Scenario(
        name="certificate-not-issued",
        reason="cert-manager has not issued the SuperLink's certificate: not ready, and TLSReady says why "
        "in cert-manager's words (a Certificate was ready as soon as it was created)",
        example=CERT_EXAMPLE,
        live={**PROD_UP, "superlink-certificate": (1, {"conditions": [NOT_ISSUED]})},
        pools=[("gpu", 4, 4)],
        supernodes="4/4",
        conditions={
            "TLSReady": (
                "False",
                (
                    "Certificate ml-platform/federation-prod-superlink-tls: not issued: DoesNotExist: "
                    "Issuer flower-ca not found"
                ),
            )
        },
        unready=["superlink-certificate"],
        registered=4,
        warnings=[],
    ),
    Scenario(
        name="certificate-issued",
        reason="The certificate issued, everything ready",
        example=CERT_EXAMPLE,
        live={**PROD_UP, "superlink-certificate": (1, {"conditions": [{"type": "Ready", "status": "True"}]})},
        pools=[("gpu", 4, 4)],
        supernodes="4/4",
        conditions={"TLSReady": ("True", "the SuperLink's certificate is issued")},
        registered=4,
        warnings=[],
    ),
    Scenario(
        name="keys-pending",
        reason="Node authentication: a SuperNode whose key the SuperLink has not confirmed is not ready, and "
        "the registration condition says where it waits",
        example=AUTH_EXAMPLE,
        live={**SUPERLINK_UP, "pool-default": sts_status(2, 1)},
        pools=[("default", 2, 1)],
        supernodes="1/2",
        conditions={"SuperNodesRegistered": ("False", REGISTRATION_PENDING)},
        unready=["pool-default"],
        registered=1,
        warnings=[],
    ),
    Scenario(
        name="keys-registered",
        reason="Node authentication: every SuperNode ready, so every key registered",
        example=AUTH_EXAMPLE,
        live={**SUPERLINK_UP, "pool-default": sts_status(2, 2)},
        pools=[("default", 2, 2)],
        supernodes="2/2",
        conditions={
            "SuperNodesReady": ("True", "2/2 SuperNodes ready"),
            "SuperNodesRegistered": ("True", "2/2 SuperNode keys registered"),
        },
        registered=2,
        warnings=[],
    ),
    Scenario(
        name="nothing-created",
        reason="Nothing observed yet: every pool waits and every resource is unready",
        example=STS_EXAMPLE,
        live={},
        pools=[("cpu-only", 4, 0), ("nvidia-gpus", 2, 0)],
        supernodes="0/6",
        conditions={
            "SuperLinkReady": (
                "False",
                "SuperLink not ready: not created yet; SuperLink Service not ready: not created yet",
            ),
            "SuperNodesReady": (
                "False",
                "Pool cpu-only not ready: not created yet; Pool nvidia-gpus not ready: not created yet",
            ),
        },
        unready=[
            "networkpolicy-superlink",
            "networkpolicy-supernode-default-default",
            "pool-cpu-only",
            "pool-nvidia-gpus",
            "serviceaccount-default-default",
            "superlink",
            "superlink-service",
            "superlink-serviceaccount",
        ],
    ),
    Scenario(
        name="superlink-ready-pool-partly-ready",
        reason="A pool with fewer ready replicas than desired says how many",
        example=STS_EXAMPLE,
        live={
            **SUPERLINK_UP,
            "pool-cpu-only": sts_status(4, 4),
            "pool-nvidia-gpus": sts_status(2, 1),
        },
        pools=[("cpu-only", 4, 4), ("nvidia-gpus", 2, 1)],
        supernodes="5/6",
        conditions={
            "SuperLinkReady": ("True", "SuperLink is ready"),
            "SuperNodesReady": ("False", "Pool nvidia-gpus not fully ready (1/2)"),
        },
        unready=["pool-nvidia-gpus"],
    ),
    Scenario(
        name="everything-ready",
        reason="Every replica ready and rolled out: the XR is ready",
        example=STS_EXAMPLE,
        live={
            **SUPERLINK_UP,
            "pool-cpu-only": sts_status(4, 4),
            "pool-nvidia-gpus": sts_status(2, 2),
        },
        pools=[("cpu-only", 4, 4), ("nvidia-gpus", 2, 2)],
        supernodes="6/6",
        conditions={
            "SuperLinkReady": ("True", "SuperLink is ready"),
            "SuperNodesReady": ("True", "6/6 SuperNodes ready"),
        },
    ),
    Scenario(
        name="rolling-update",
        reason="All replicas ready but not all updated: not ready until the rollout ends",
        example=STS_EXAMPLE,
        live={
            **SUPERLINK_UP,
            "pool-cpu-only": sts_status(4, 4, updated=1, generation=2, observed=2),
            "pool-nvidia-gpus": sts_status(2, 2),
        },
        pools=[("cpu-only", 4, 4), ("nvidia-gpus", 2, 2)],
        supernodes="6/6",
        conditions={
            "SuperLinkReady": ("True", "SuperLink is ready"),
            "SuperNodesReady": ("False", "Pool cpu-only not ready: rolling update in progress (1/4 updated)"),
        },
        unready=["pool-cpu-only"],
    ),
    Scenario(
        name="daemonset-on-no-node",
        reason="A DaemonSet scheduled on no node is ready, with a warning to check its placement",
        example=DS_EXAMPLE,
        live={
            **SUPERLINK_UP,
            "pool-pool-a": ds_status(3, 3),
            "pool-pool-b": ds_status(0, 0),
        },
        pools=[("pool-a", 3, 3), ("pool-b", 0, 0)],
        supernodes="3/3",
        conditions={
            "SuperLinkReady": ("True", "SuperLink is ready"),
            "SuperNodesReady": ("True", "3/3 SuperNodes ready"),
        },
        warnings=["Pool pool-b: DaemonSet federation-multipools-supernode-pool-b is scheduled on no node"],
    ),
    Scenario(
        name="removed-pool-still-observed",
        reason="An observed Object of a pool the spec no longer has counts for nothing",
        example=STS_EXAMPLE,
        live={
            **SUPERLINK_UP,
            "pool-cpu-only": sts_status(4, 4),
            "pool-nvidia-gpus": sts_status(2, 2),
        },
        pools=[("cpu-only", 4, 4), ("nvidia-gpus", 2, 2)],
        supernodes="6/6",
        conditions={
            "SuperLinkReady": ("True", "SuperLink is ready"),
            "SuperNodesReady": ("True", "6/6 SuperNodes ready"),
        },
        extra_observed=[_removed_pool_object()],
    ),
    Scenario(
        name="garbled-status",
        reason="A status the function cannot read makes the condition Unknown, saying why",
        example=STS_EXAMPLE,
        live={
            **SUPERLINK_UP,
            "pool-cpu-only": (1, {"observedGeneration": 1, "readyReplicas": "lots"}),
            "pool-nvidia-gpus": sts_status(2, 2),
        },
        pools=[("cpu-only", 4, 0), ("nvidia-gpus", 2, 2)],
        supernodes="2/6",
        conditions={
            "SuperLinkReady": ("True", "SuperLink is ready"),
            "SuperNodesReady": (
                "Unknown",
                "Pool cpu-only: status unknown: status.readyReplicas is 'lots', not a count",
            ),
        },
        unready=["pool-cpu-only"],
    ),
]


def fixture_dir(tmp_path: pathlib.Path, scenario: Scenario) -> pathlib.Path:
    objects = observed_objects(scenario.example, scenario.live) + scenario.extra_observed
    out = tmp_path / scenario.name
    out.mkdir()
    (out / "observed.yaml").write_text(yaml.safe_dump_all(objects))
    return out


def check_xr(scenario, xr, results_messages):
    pools, conditions, unready, warnings = scenario.pools, scenario.conditions, scenario.unready, scenario.warnings
    status = xr["status"]
    assert [(p["name"], p["desired"], p["ready"]) for p in status["pools"]] == pools
    assert status["supernodes"] == scenario.supernodes
    assert status["readySupernodes"] == sum(p[2] for p in pools)
    assert status.get("registeredSupernodes") == scenario.registered
    if scenario.registered is None:
        assert "SuperNodesRegistered" not in {c["type"] for c in status["conditions"]}
    got = {c["type"]: (c["status"], c.get("message", "")) for c in status["conditions"]}
    for kind, expected in conditions.items():
        assert got[kind] == expected, kind
    if unready:
        assert got["Ready"] == ("False", f"Unready resources: {render._names(unready)}")
    else:
        assert got["Ready"] == ("True", "")
    for warning in warnings:
        assert any(warning in m for m in results_messages), results_messages
    if not warnings:
        assert results_messages == []


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_function_render_observed(scenario, tmp_path):
    text, warnings = render.render_file(str(scenario.example), str(fixture_dir(tmp_path, scenario)))
    docs = list(yaml.safe_load_all(text))
    check_xr(scenario, docs[0], warnings)
    # The desired resources depend on the spec alone, but for a keys list's readiness, which
    # follows its place's workloads as observed (so the provider polls it often while they change).
    plain, _ = render.render_file(str(scenario.example))
    assert polled_alike(docs[1:]) == polled_alike(list(yaml.safe_load_all(plain))[1:])


KEYS_LIST = "supernode-keys-gatherer-list-"


def polled_alike(objects: list[dict]) -> list[dict]:
    """The Objects, each keys list's readiness left out."""
    out = copy.deepcopy(objects)
    for obj in out:
        if obj["metadata"]["annotations"]["crossplane.io/composition-resource-name"].startswith(KEYS_LIST):
            del obj["spec"]["readiness"]
    return out


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_crank_render_observed(scenario, tmp_path, crank, functions_file):
    xr_file = tmp_path / "xr.yaml"
    xr_file.write_text(yaml.safe_dump(render.composite(load_all(scenario.example)[0])))
    proc = subprocess.run(
        [
            crank,
            "render",
            str(xr_file),
            str(ROOT / "apis" / "composition.yaml"),
            str(functions_file),
            f"--observed-resources={fixture_dir(tmp_path, scenario) / 'observed.yaml'}",
            "--include-function-results",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    results = [d["message"] for d in docs if d.get("kind") == "Result"]
    check_xr(scenario, docs[0], results)


def test_operations_guide_status_is_real_output():
    example = EXAMPLES / "claims" / "gpu-nvidia.yaml"
    observed = EXAMPLES / "observed" / "gpu-nvidia-partly-ready.yaml"
    text, _ = render.render_file(str(example), str(observed))
    xr_text = text.split("---\n")[1]
    guide = (ROOT / "docs" / "operations.md").read_text()
    assert f"```yaml\n{xr_text}...\n```" in guide
    xr = yaml.safe_load(xr_text)
    assert xr["status"]["supernodes"] == "5/6"


def test_render_output_feeds_back_as_observed(tmp_path):
    example = EXAMPLES / "claims" / "quickstart.yaml"
    text, _ = render.render_file(str(example))
    (tmp_path / "observed.yaml").write_text(text)
    again, _ = render.render_file(str(example), str(tmp_path))
    assert again.split("---\n")[2:] == text.split("---\n")[2:]
    xr = yaml.safe_load(again.split("---\n")[1])
    conditions = {c["type"]: c for c in xr["status"]["conditions"]}
    # Created but with no live state reported: still not ready, and said so.
    assert conditions["SuperNodesReady"]["message"] == "Pool default not ready: not created yet"


GOLDEN = ROOT / "tests" / "golden"
XRD_STATUS = {
    flavor: yaml.safe_load((ROOT / "apis" / path).read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"
    ]["status"]
    for flavor, path in {"v1": "definition.yaml", "v2": "v2/definition.yaml"}.items()
}


def function_status(golden: pathlib.Path) -> dict[str, Any]:
    """What the function wrote into a golden output's XR status: all of it but Crossplane's conditions."""
    status = dict(yaml.safe_load(golden.read_text().split("---\n")[1])["status"])
    status.pop("conditions")
    return status


@pytest.mark.parametrize("golden", sorted(GOLDEN.glob("*.yaml")), ids=lambda p: p.stem)
@pytest.mark.parametrize("flavor", sorted(XRD_STATUS))
def test_golden_status_fits_the_xrd_and_the_model(golden, flavor):
    status = function_status(golden)
    jsonschema.validate(status, XRD_STATUS[flavor])
    assert FederationStatus.model_validate(status).wire() == status


POOL = {"name": "p", "kind": "StatefulSet", "desired": 1, "ready": 0, "namespace": "n", "providerConfig": "default"}
STATUS = {
    "version": "1.41.0",
    "supernodes": "0/1",
    "readySupernodes": 0,
    "clusters": 1,
    "desiredSupernodes": 1,
    "endpoints": {"superlinkService": "127.0.0.1:9093", "portForward": "kubectl port-forward", "fleet": "s:9092"},
    "pools": [POOL],
}


@dataclasses.dataclass(frozen=True)
class SchemaCase:
    """A status the XRD's status schema must accept or refuse, and why."""

    name: str
    reason: str
    status: dict[str, Any]
    accepted: bool


SCHEMA_CASES = [
    SchemaCase(
        name="conditions-only",
        reason="Crossplane writes its conditions before the function has written anything, or when it fails",
        status={"conditions": [{"type": "Synced", "status": "False", "reason": "ReconcileError"}]},
        accepted=True,
    ),
    SchemaCase(
        name="everything",
        reason="observedGeneration and the external address are written once known",
        status={**STATUS, "observedGeneration": 3, "endpoints": {**STATUS["endpoints"], "external": "f:443"}},
        accepted=True,
    ),
    SchemaCase(
        name="supernodes-as-number",
        reason="The SUPERNODES column shows ready/desired, a string",
        status={**STATUS, "supernodes": 0},
        accepted=False,
    ),
    SchemaCase(
        name="pool-count-as-string",
        reason="Pool counts are integers, as the workloads report them",
        status={**STATUS, "pools": [{**POOL, "ready": "0"}]},
        accepted=False,
    ),
    SchemaCase(
        name="pools-as-object",
        reason="Pools are a list, in the spec's order",
        status={**STATUS, "pools": POOL},
        accepted=False,
    ),
]


@pytest.mark.parametrize("case", SCHEMA_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("flavor", sorted(XRD_STATUS))
def test_xrd_status_schema(case, flavor):
    errors = list(jsonschema.Draft7Validator(XRD_STATUS[flavor]).iter_errors(case.status))
    assert (errors == []) == case.accepted, (case.reason, [e.message for e in errors])


@dataclasses.dataclass(frozen=True)
class ModelCase:
    """A status the model must refuse, and why."""

    name: str
    reason: str
    status: dict[str, Any]


MODEL_CASES = [
    ModelCase(
        name="unknown-field",
        reason="A misspelt field in status.report fails in the tests, not silently on the cluster",
        status={**STATUS, "readySuperNodes": 0},
    ),
    ModelCase(
        name="missing-count",
        reason="status.report always writes the totals the SUPERNODES column and the guides rely on",
        status={k: v for k, v in STATUS.items() if k != "desiredSupernodes"},
    ),
    ModelCase(
        name="pool-without-namespace",
        reason="Every pool says where it runs",
        status={**STATUS, "pools": [{k: v for k, v in POOL.items() if k != "namespace"}]},
    ),
]


@pytest.mark.parametrize("case", MODEL_CASES, ids=lambda c: c.name)
def test_status_model_refuses(case):
    with pytest.raises(pydantic.ValidationError):
        FederationStatus.model_validate(case.status)


def test_unset_fields_stay_off_the_wire():
    # The XRD has no null type: an unknown generation or address is left out, not written as null.
    wire = FederationStatus.model_validate(STATUS).wire()
    assert wire == STATUS
    assert "observedGeneration" not in wire
    assert "external" not in wire["endpoints"]
