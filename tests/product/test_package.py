"""The Dockerfile's build steps, mirrored: wheel, clean venv, console script."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import venv

import yaml

from support.peers import CLAIMS, ROOT


def _normalized(distribution: str) -> str:
    """A distribution name as wheels spell it in .dist-info folders, lowercased."""
    return re.sub(r"[-_.]+", "_", distribution).lower()


def test_dockerfile_steps_build_a_working_function(tmp_path):
    dockerfile = (ROOT / "Dockerfile").read_text()
    # The test below follows these steps; fail loudly if the Dockerfile moves away from them.
    assert "pip wheel --no-deps --wheel-dir /whl ." in dockerfile
    assert "pip install -c requirements.lock /whl/*.whl" in dockerfile
    assert 'ENTRYPOINT ["/venv/fn/bin/function"]' in dockerfile

    wheels = tmp_path / "whl"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(ROOT)],
        check=True,
        timeout=600,
    )
    wheel = next(wheels.glob("*.whl"))
    env_dir = tmp_path / "fn"
    venv.create(env_dir, with_pip=True)
    subprocess.run(
        [env_dir / "bin" / "pip", "install", "--quiet", "-c", ROOT / "requirements.lock", wheel],
        check=True,
        timeout=600,
    )
    # Only the trimmed definitions ship, not the schemas of every Kubernetes version.
    site = next(env_dir.glob("lib/python*/site-packages"))
    assert (site / "function" / "api" / "k8s_definitions.json").is_file()
    assert not list(site.glob("kubernetes_validate*"))
    # Nor any other development tool (pytest, linters, type checker and stubs).
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    dev_names = {_normalized(re.split(r"[=<>!~\[; ]", requirement)[0]) for requirement in dev}
    installed = {_normalized(d.name.split("-")[0]) for d in site.glob("*.dist-info")}
    assert not dev_names & installed

    helped = subprocess.run([env_dir / "bin" / "function", "--help"], capture_output=True, text=True, check=True)
    assert re.search(r"render\s", helped.stdout) and re.search(r"serve\s", helped.stdout)
    rendered = subprocess.run(
        [env_dir / "bin" / "function", "render", CLAIMS[0]], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    kinds = [d["kind"] for d in yaml.safe_load_all(rendered.stdout)]
    assert kinds[0] == "XFederation" and set(kinds[1:]) == {"Object"}
