"""The daemonless image build and the Dockerfile make the same layout.

hack/build_image.py builds the image CI tests and the package embeds; the
Dockerfile is for users with Docker. What the image is (base, venv path,
install step, user, entrypoint, port, working directory) must agree.
"""

from __future__ import annotations

import json
import shlex

from support.peers import ROOT, hack_module

build_image = hack_module("build_image")


def dockerfile_stages() -> list[dict[str, list[str]]]:
    """Each stage's instructions (continuations joined), keyed by instruction."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages: list[dict[str, list[str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append({})
        stages[-1].setdefault(instruction.upper(), []).append(" ".join(rest.split()))
    return stages


def test_both_build_debian_12_python():
    build, runtime = dockerfile_stages()
    assert build["FROM"][0].split()[-3] == "debian:12-slim"
    assert runtime["FROM"][0].split()[0] == "gcr.io/distroless/python3-debian12"
    assert build_image.SUITE == "bookworm"  # Debian 12
    assert "libpython3.11-stdlib" in build_image.PACKAGES


def test_same_venv_and_install_step():
    build, runtime = dockerfile_stages()
    run = " ".join(build["RUN"])
    assert f"python3 -m venv {build_image.VENV}" in run
    assert f"{build_image.VENV}/bin/pip install -c requirements.lock /whl/*.whl" in run
    assert runtime["COPY"] == [f"--from=build {build_image.VENV} {build_image.VENV}"]


def test_same_runtime_config():
    _, runtime = dockerfile_stages()
    config = build_image.CONFIG
    assert runtime["USER"] == [config["User"]]
    assert json.loads(runtime["ENTRYPOINT"][0]) == config["Entrypoint"]
    assert [f"{p}/tcp" for p in shlex.split(runtime["EXPOSE"][0])] == list(config["ExposedPorts"])
    assert runtime["WORKDIR"] == [config["WorkingDir"]]
    # distroless' nonroot user, which the daemonless image defines itself.
    assert f"nonroot:x:{build_image.NONROOT_ID}:{build_image.NONROOT_ID}:" in build_image.ACCOUNTS["etc/passwd"]
