"""The scale benchmark (benchmarks/e2e_clusters.py) at its smallest size, on this control plane, so it cannot rot.

Two ProviderConfigs over two spokes, a Federation of one SuperNode in each, node authentication
and TLS on, each SuperNode's key published as its identity container would: the run must end
with every SuperNode Ready and every key listed beside the SuperLink, and print the goal's line
(docs/operations.md, Large federations). The figures themselves mean nothing at this size, and
beside the other scenarios' leftovers; the 100-cluster runs are measured on a control plane of
their own. One plane is enough (the oldest minor's lane has room): the harness is what is tested.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from controlplane import ControlPlane, wait_for
from support import benchmarks

pytestmark = pytest.mark.oldest_minor

# Every figure a number: the run got to the end of each stage it measures.
GOALS_LINE = re.compile(
    r"^scale: clusters=2 supernodes=2 auth=on ready_s=\d+ keys_registered_s=\d+ "
    r"control_plane_cpu_s=\d+ hub_writes_per_object=\d+\.\d$",
    re.MULTILINE,
)


def _volumes_for_identity_claims(bench: Any) -> dict[str, list[dict[str, Any]]]:
    """A volume bound ahead to each identity claim the run's StatefulSets will make, by spoke.

    The spokes' shared volumes may be taken by the scenarios before this one; a volume whose
    claimRef names a claim is bound to that claim alone, as an admin reserves one.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for site, manifests in bench.spoke_manifests(bench.SMOKE_CLUSTERS, bench.SMOKE_REPLICAS).items():
        for sts in (m for m in manifests if m["kind"] == "StatefulSet"):
            for template in sts["spec"].get("volumeClaimTemplates", []):
                for ordinal in range(sts["spec"]["replicas"]):
                    claim = f"{template['metadata']['name']}-{sts['metadata']['name']}-{ordinal}"
                    out.setdefault(site, []).append({
                        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv-scale-{claim}"},
                        "spec": {"capacity": {"storage": "50Gi"}, "accessModes": ["ReadWriteOnce"],
                                 "storageClassName": template["spec"].get("storageClassName") or "",
                                 "persistentVolumeReclaimPolicy": "Retain",
                                 "hostPath": {"path": f"/var/lib/e2e/pv-scale-{claim}"},
                                 "claimRef": {"namespace": bench.NAMESPACE, "name": claim}},
                    })  # fmt: skip
    return out


def test_the_scale_benchmark_at_its_smallest_size_gets_to_the_end_and_prints_the_goals_line(
    plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = benchmarks.load("e2e_clusters")
    volumes = _volumes_for_identity_claims(bench)
    assert sum(map(len, volumes.values())) == bench.SMOKE_CLUSTERS * bench.SMOKE_REPLICAS, volumes
    for site, pvs in volumes.items():
        plane.sites[site].apply(*pvs)
    try:
        # Ten minutes: a key waits for the provider's poll of its collection (a minute here), then its
        # FederationCluster and its group are woken by watch (or the group's one-minute TTL).
        code = bench.run(plane, bench.SMOKE_CLUSTERS, bench.SMOKE_REPLICAS, 600, keys=True, idle_seconds=0)
        out = capsys.readouterr().out
        assert code == 0, out
        assert GOALS_LINE.search(out), out
    finally:
        plane.hub.kubectl("delete", "federations.flower.crossplane.io", bench.NAME, "-n", bench.NAMESPACE,
                          "--ignore-not-found", "--wait=false", check=False)  # fmt: skip
        wait_for(
            "the scale Federation's composites gone",
            lambda: not plane.hub.get("xfederations.flower.crossplane.io", selector=f"{bench.CLAIM_NAME}={bench.NAME}"),
            timeout=300,
        )
        for config in bench.provider_configs(bench.SMOKE_CLUSTERS):
            plane.hub.kubectl("delete", "providerconfigs.kubernetes.crossplane.io", config["metadata"]["name"],
                              "--ignore-not-found", "--wait=false", check=False)  # fmt: skip
