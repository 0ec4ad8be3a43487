"""Every container the function renders starts with arguments its Flower release's own CLI accepts.

Each container is parsed by the parsers of the release its image names (the
SuperLink's for untagged sidecar images), in that release's virtualenv
(tests/flower/<release>.txt); a release without one is parsed by the
virtualenv of a release with the same dialect (1.24 by 1.25's).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest
import yaml

from function.builders import fleet_proxy, key_gatherer
from function.federation import read
from function.releases import flower
from function.serving import render
from support.peers import CLAIMS, EXAMPLES, ROOT, load_all, need, policy_for

BINARY = {
    "superlink": "flower-superlink",
    "supernode": "flower-supernode",
    "superexec-serverapp": "flower-superexec",
    "superexec-clientapp": "flower-superexec",
}


VENVS = pathlib.Path(os.environ.get("FLWR_VENVS") or ROOT / ".cache" / "flwr")
RELEASES = sorted(flower.Release.parse(p.stem) for p in (ROOT / "tests" / "flower").glob("*.txt"))


def containers():
    """(example, workload, container, release) of every container every example renders."""
    for example in [*CLAIMS, EXAMPLES / "xr.yaml"]:
        xr = load_all(example)[0]
        docs, _ = render.render(xr, [], policy=policy_for(example))
        superlink = read.federation(xr).flower.superlink
        for doc in (d for d in docs[1:] if d["kind"] == "Object"):
            manifest = doc["spec"]["forProvider"]["manifest"]
            template = (manifest.get("spec") or {}).get("template")
            if not template:
                continue
            for c in template["spec"]["containers"]:
                if c["name"] == fleet_proxy.CONTAINER:
                    continue  # nginx, which reads its own configuration (tests/builders/test_fleet_proxy.py)
                if c["name"] == key_gatherer.CONTAINER:
                    continue  # a program of ours, which parses its own (tests/builders/test_key_gatherer.py)
                release = flower.release_of_image(c["image"]) or superlink
                yield example.stem, manifest["metadata"]["name"], c, release


def venv_for(release):
    """The Python of the release's virtualenv, or of the tested release with its dialect."""
    same = [r for r in RELEASES if r == release] or [
        r for r in RELEASES if flower.dialect(r) == flower.dialect(release)
    ]
    assert same, f"no Flower virtualenv parses Flower {release}: add tests/flower/<release>.txt"
    python = VENVS / str(same[0]) / "bin" / "python"
    need(os.access(python, os.X_OK), f"Flower {same[0]}'s virtualenv ({python}; `make unit`)")
    return str(python)


def parse(flwr_python, items):
    proc = subprocess.run(
        [flwr_python, str(ROOT / "tests" / "support" / "flower_args.py")],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


def parse_all(found):
    """Parse each container's args with its release's parser; results in found's order."""
    results = [None] * len(found)
    for release in sorted({r for *_, r in found}):
        picked = [i for i, (*_, r) in enumerate(found) if r == release]
        items = [{"binary": BINARY[found[i][2]["name"]], "args": found[i][2]["args"]} for i in picked]
        for i, result in zip(picked, parse(venv_for(release), items), strict=True):
            results[i] = result
    return results


def test_flower_parses_every_container_command_line():
    found = list(containers())
    assert {c["name"] for _, _, c, _ in found} == set(BINARY)
    # The examples cover the releases whose goldens show what changes.
    assert {str(r) for *_, r in found} >= {"1.25.0", "1.29.0", "1.35.0", "1.37.0", "1.41.0"}
    results = parse_all(found)
    failures = [
        f"{example}/{workload}/{c['name']} (Flower {release}): {r['error']}"
        for (example, workload, c, release), r in zip(found, results, strict=True)
        if "error" in r
    ]
    assert failures == []
    by_name = {(e, w, c["name"]): r["ok"] for (e, w, c, _), r in zip(found, results, strict=True)}
    # Spot-check that Flower read what we meant, not just that it did not fail.
    supernode = by_name[("quickstart", "my-federation-supernode-default", "supernode")]
    assert supernode["superlink"] == "my-federation-superlink.default.svc:9092"
    assert supernode["insecure"] is True
    sidecar = by_name[("statefulset-process", "federation-process-supernode-default", "superexec-clientapp")]
    assert (sidecar["plugin_type"], sidecar["appio_api_address"]) == ("clientapp", "localhost:9094")
    superlink = by_name[("flower-141", "flower-141-superlink", "superlink")]
    assert (superlink["host"], superlink["port"], superlink["isolation"]) == ("127.0.0.1", 9093, "process")
    sidecar = by_name[("flower-141", "flower-141-superlink", "superexec-serverapp")]
    assert sidecar["runtime_api_address"] == "localhost:9093"
    superlink = by_name[("flower-135", "flower-135-superlink", "superlink")]
    assert (superlink["host"], superlink["port"], superlink["control_api_address"]) == (
        "127.0.0.1",
        9091,
        "127.0.0.1:9093",
    )


def load_all_text(text):
    return [d for d in yaml.safe_load_all(text) if d]


def at_release(example, release, isolation):
    """An example's Federation moved to another release and isolation mode."""
    text = (EXAMPLES / "claims" / example).read_text().replace("1.41.0", str(release))
    xr = load_all_text(text)[0]
    xr["spec"]["isolationMode"] = isolation
    if isolation == "subprocess":
        xr["spec"]["superlink"].pop("superexecImage", None)
        for pool in xr["spec"]["supernodes"]["pools"]:
            pool.get("images", {}).pop("superexecClientApp", None)
    return xr


@pytest.mark.parametrize("isolation", ["process", "subprocess"])
@pytest.mark.parametrize("release", RELEASES, ids=str)
def test_every_tested_release_parses_its_own_command_lines(release, isolation):
    docs, _ = render.render(at_release("flower-141.yaml", release, isolation), [])
    items = []
    for doc in docs[1:]:
        template = (doc["spec"]["forProvider"]["manifest"].get("spec") or {}).get("template")
        items += [
            {"binary": BINARY[c["name"]], "args": c["args"]}
            for c in (template or {"spec": {"containers": []}})["spec"]["containers"]
            if c["name"] != fleet_proxy.CONTAINER
        ]
    assert len(items) == (4 if isolation == "process" else 2)
    results = parse(venv_for(release), items)
    assert [r.get("error") for r in results] == [None] * len(items), (release, items, results)


@pytest.mark.parametrize("release", RELEASES, ids=str)
def test_each_release_refuses_another_dialects_flags(release):
    # The parsers really differ: each refuses a flag its release does not
    # have, so the test above can fail for a command line of the wrong release.
    foreign = "--storage-dir=/x" if not flower.dialect(release).storage_dir else "--host=127.0.0.1"
    result = parse(venv_for(release), [{"binary": "flower-superlink", "args": [foreign]}])[0]
    assert "error" in result, (release, foreign, result)


def test_flower_rejects_a_flag_it_does_not_know(flwr_python):
    # The check above can fail: an unknown flag is an error for Flower's parser.
    result = parse(flwr_python, [{"binary": "flower-supernode", "args": ["--superlink=x:1", "--no-such-flag"]}])[0]
    assert "unrecognized arguments: --no-such-flag" in result["error"]


# The containers that run apps, hence install their dependencies, in each isolation mode.
APP_RUNNERS = {"process": {"superexec-serverapp", "superexec-clientapp"}, "subprocess": {"superlink", "supernode"}}


@pytest.mark.parametrize("allow", [True, False], ids=["allowed", "denied"])
@pytest.mark.parametrize("isolation", ["process", "subprocess"])
@pytest.mark.parametrize("release", RELEASES, ids=str)
def test_flower_reads_whether_apps_may_install_dependencies(release, isolation, allow):
    # Flower's own parsers say what each process will do: install exactly
    # where spec.allowRuntimeDependencyInstallation says, in every release
    # from 1.29 (1.32 turned it on by default in the SuperLink).
    xr = at_release("flower-141.yaml", release, isolation)
    xr["spec"]["allowRuntimeDependencyInstallation"] = allow
    if flower.dialect(release).dependency_install == "absent":
        if allow:
            with pytest.raises(render.RenderError, match=r"spec.allowRuntimeDependencyInstallation: needs Flower 1.29"):
                render.render(xr, [])
        return
    docs, _ = render.render(xr, [])
    runners = [c for doc in docs[1:] for c in _containers(doc) if c["name"] in APP_RUNNERS[isolation]]
    assert {c["name"] for c in runners} == APP_RUNNERS[isolation]
    results = parse(venv_for(release), [{"binary": BINARY[c["name"]], "args": c["args"]} for c in runners])
    assert [r["ok"]["runtime_dependency_install"] for r in results] == [allow] * len(runners), (release, results)


def _containers(doc):
    template = (doc["spec"]["forProvider"]["manifest"].get("spec") or {}).get("template")
    return template["spec"]["containers"] if template else []
