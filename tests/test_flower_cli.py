"""Every container the function renders starts with arguments Flower's own CLI accepts."""

from __future__ import annotations

import json
import pathlib
import subprocess

from conftest import CLAIMS, EXAMPLES, load_all
from function import render

HERE = pathlib.Path(__file__).parent
BINARY = {
    "superlink": "flower-superlink",
    "supernode": "flower-supernode",
    "superexec-serverapp": "flower-superexec",
    "superexec-clientapp": "flower-superexec",
}


def containers():
    for example in [*CLAIMS, EXAMPLES / "xr.yaml"]:
        docs, _ = render.render(load_all(example)[0], [])
        for doc in docs[1:]:
            manifest = doc["spec"]["forProvider"]["manifest"]
            template = (manifest.get("spec") or {}).get("template")
            if not template:
                continue
            for c in template["spec"]["containers"]:
                yield example.stem, manifest["metadata"]["name"], c


def parse(flwr_python, items):
    proc = subprocess.run(
        [flwr_python, str(HERE / "flower_args.py")], input=json.dumps(items), capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout)


def test_flower_parses_every_container_command_line(flwr_python):
    found = list(containers())
    assert {c["name"] for _, _, c in found} == set(BINARY)
    results = parse(flwr_python, [{"binary": BINARY[c["name"]], "args": c["args"]} for _, _, c in found])
    failures = [
        f"{example}/{workload}/{c['name']}: {r['error']}"
        for (example, workload, c), r in zip(found, results, strict=True)
        if "error" in r
    ]
    assert failures == []
    by_name = {(e, w, c["name"]): r["ok"] for (e, w, c), r in zip(found, results, strict=True)}
    # Spot-check that Flower read what we meant, not just that it did not fail.
    supernode = by_name[("quickstart", "my-federation-supernode-default", "supernode")]
    assert supernode["superlink"] == "my-federation-superlink.default.svc:9092"
    assert supernode["insecure"] is True
    sidecar = by_name[("statefulset-process", "federation-process-supernode-default", "superexec-clientapp")]
    assert (sidecar["plugin_type"], sidecar["appio_api_address"]) == ("clientapp", "localhost:9094")


def test_flower_rejects_a_flag_it_does_not_know(flwr_python):
    # The check above can fail: an unknown flag is an error for Flower's parser.
    result = parse(flwr_python, [{"binary": "flower-supernode", "args": ["--superlink=x:1", "--no-such-flag"]}])[0]
    assert "unrecognized arguments: --no-such-flag" in result["error"]
