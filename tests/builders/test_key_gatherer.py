"""The keys gatherer's objects: what its account may do, what its pod runs and mounts, how they are named."""

from __future__ import annotations

import pytest

from function.api.spec import FederationSpec
from function.builders import identity, key_gatherer, pods
from function.programs import gather_program, key_publications
from support.helpers import BASE, spec

AUTH = FederationSpec.model_validate(
    spec(BASE, tls={"secretName": "superlink-tls"}, nodeAuthentication={"enabled": True})
)
IMAGE = "flwr/supernode:1.25.0"


def made(pools: tuple[str, ...] = ("default",)) -> dict[str, dict]:
    out = key_gatherer.manifests("fed", "team-a", "Cluster/site-a", "flower", IMAGE, pools, AUTH)
    return {m["kind"]: m for m in out}


def test_the_gatherer_may_patch_its_list_alone_and_only_read_the_namespaces_configmaps() -> None:
    objects = made()
    name = objects["ConfigMap"]["metadata"]["name"]
    assert objects["Role"]["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"], "resourceNames": [name]},
    ]
    assert objects["RoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "flower"}]
    assert objects["ServiceAccount"]["automountServiceAccountToken"] is False


def test_no_pool_pod_can_make_the_list_before_the_function_does() -> None:
    # The admission policy lets a pool's account create only flwr-key-<owner uid>-...: never this name.
    name = made()["ConfigMap"]["metadata"]["name"]
    assert not name.startswith(key_publications.CONFIGMAP_PREFIX)
    assert key_gatherer.name("flwr-key-x", "team-a", "c", "flower").startswith(key_publications.CONFIGMAP_PREFIX)
    rules = " ".join(r["expression"] for r in identity.publication_policy("p", "fed", "flower", {}, claims=True)
                     ["spec"]["validations"])  # fmt: skip
    assert "startsWith('flwr-key-' + object.metadata.ownerReferences[0].uid + '-')" in rules


def test_the_gatherers_pod_runs_the_program_hardened_and_alone_holds_its_token() -> None:
    deployment = made(("b", "a"))["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", f"{identity.PROGRAM_DIR}/{identity.PROGRAM_FILE}"]
    assert container["args"][0] == "gather"
    assert container["args"][-2:] == ["--pool=a", "--pool=b"], "sorted: the same pools, the same bytes"
    assert f"--configmap={deployment['metadata']['name']}" in container["args"]
    assert container["securityContext"] == pods.CONTAINER_SECURITY
    assert container["resources"] == {"requests": pods.HELPER_REQUESTS[key_gatherer.CONTAINER]}
    assert pod["serviceAccountName"] == deployment["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False
    assert {v["name"] for v in pod["volumes"]} >= {identity.KUBE_VOLUME, identity.PROGRAM_VOLUME}
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["template"]["metadata"]["labels"] == selector


@pytest.mark.parametrize(
    ("other", "reason"),
    [
        (("fed", "team-b", "Cluster/site-a", "flower"), "a claim of the same name in another namespace"),
        (("fed", "team-a", "Cluster/site-b", "flower"), "another cluster (two ProviderConfigs may name one)"),
        (("fed", "team-a", "Cluster/site-a", "edge"), "another pool namespace"),
    ],
)
def test_each_place_has_a_gatherer_of_its_own(other: tuple[str, str, str, str], reason: str) -> None:
    assert key_gatherer.name("fed", "team-a", "Cluster/site-a", "flower") != key_gatherer.name(*other), reason
    assert len(key_gatherer.name("f" * 63, *other[1:])) <= 63


def test_the_program_reads_the_arguments_the_builder_writes() -> None:
    (container,) = made(("b", "a"))["Deployment"]["spec"]["template"]["spec"]["containers"]
    args = gather_program.arguments(container["args"])
    assert (args.namespace, args.pool, args.pool_label) == ("flower", ["a", "b"], "flower.flwr.ai/pool")
    assert args.configmap == made()["ConfigMap"]["metadata"]["name"]
    assert sorted(args.label) == ["app.kubernetes.io/instance=fed", f"{identity.KEY_LABEL}=true"]
