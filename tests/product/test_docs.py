"""The docs: the API reference agrees with the model, every link inside the repository resolves, and the
README's compatibility table says what the pins say."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from function.releases import flower
from function.serving import render
from support.peers import ROOT, hack_module, header_commands

GUIDES = sorted((ROOT / "docs").glob("*.md"))
DOCS = [ROOT / "README.md", *GUIDES, ROOT / "CHANGELOG.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Code blocks and spans are not Markdown: a pattern such as [a-z](...) there is no link.
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)


def test_api_reference_is_fresh():
    proc = subprocess.run(
        [sys.executable, "hack/gen_api_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def anchors(path: pathlib.Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, - for spaces."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = []
    for target in LINK.findall(CODE.sub("", doc.read_text())):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path) if path else doc
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert broken == []


def test_every_guide_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert [d.name for d in GUIDES if f"](docs/{d.name})" not in readme] == []
    assert "](CHANGELOG.md)" in readme


# A repository path the docs name in a code span, e.g. `examples/claims/quickstart.yaml`.
REPO_PATH = re.compile(r"`((?:apis|benchmarks|docs|examples|function|hack|package|tests|tools)/[^`\s]*)`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_files_exist(doc):
    assert [p for p in REPO_PATH.findall(doc.read_text()) if not list(ROOT.glob(p.rstrip("/")))] == []


# -- the README's compatibility table -----------------------------------------------------------
pins = hack_module("pins")
# A release as the table writes one: 1.30, v1.35.4, 2.4.0.
RELEASE = re.compile(r"v?\d+\.\d+(?:\.\d+)?")
COLUMNS = ("Supported", "Tested end to end (`make e2e`)", "Tested in the unit suite")


def compatibility() -> dict[str, dict[str, str]]:
    """The README's compatibility table: each row's cells by column, by component."""
    section = (ROOT / "README.md").read_text().split("\n### Compatibility\n", 1)[1]
    table: list[list[str]] = []
    for line in section.splitlines():
        if line.startswith("|"):
            table.append([cell.strip() for cell in line.strip("| ").split("|")])
        elif table:
            break  # the first table's end
    header, _, *rows = table
    assert tuple(header[1:]) == COLUMNS, header
    return {row[0]: dict(zip(COLUMNS, row[1:], strict=True)) for row in rows}


def releases(cell: str) -> list[str]:
    return RELEASE.findall(cell)


def by_version(names: list[str]) -> list[str]:
    return sorted(names, key=pins.version)


def _dependency(kind: str) -> list[str]:
    """What each Configuration flavor asks of Crossplane ("Crossplane") or of a dependency's kind."""
    out = []
    for folder in ("apis", "apis/v2"):
        spec = yaml.safe_load((ROOT / folder / "crossplane.yaml").read_text())["spec"]
        out.append(spec["crossplane"]["version"] if kind == "Crossplane" else
                   next(d["version"] for d in spec["dependsOn"] if d["kind"] == kind))  # fmt: skip
    assert len(set(out)) == 1, f"the flavors ask for different {kind} releases: {out}"
    return out


def test_the_compatibility_table_names_every_component_once():
    assert list(compatibility()) == [
        "Kubernetes",
        "Crossplane",
        "provider-kubernetes",
        "Flower (the images a Federation runs)",
        "Python (the function's)",
    ]


def test_the_kubernetes_row_is_the_pinned_minors():
    row = compatibility()["Kubernetes"]
    minors, planes = pins.kube_minors(), pins.kube_planes()
    # Supported is a range: every minor inside it has a CRD validator, so the unit column names each.
    numbers = [pins.version(m)[1] for m in minors]
    assert numbers == list(range(numbers[0], numbers[-1] + 1))
    assert releases(row["Supported"]) == [minors[0], minors[-1]]
    assert releases(row["Tested end to end (`make e2e`)"]) == [r for m in planes for r in (m, pins.kubernetes(m))]
    assert releases(row["Tested in the unit suite"]) == minors


def test_the_crossplane_row_is_what_the_packages_ask_for_and_the_e2e_runs():
    row, core = compatibility()["Crossplane"], pins.crossplane()
    [constraint] = set(_dependency("Crossplane"))
    assert constraint == f">={core}"
    assert f"`{constraint}`" in row["Supported"]
    assert releases(row["Supported"]) == [core.removeprefix("v"), core]
    assert releases(row["Tested end to end (`make e2e`)"]) == [core]
    assert releases(row["Tested in the unit suite"]) == []
    # The note under the table names the CLI the unit suite runs.
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"is {pins.crossplane_cli()} (`tools/crank`)" in readme


def test_the_provider_row_is_the_configurations_range_and_what_each_plane_runs():
    row = compatibility()["provider-kubernetes"]
    [constraint] = set(_dependency("Provider"))
    assert row["Supported"] == f"`{constraint}`"
    assert releases(row["Tested end to end (`make e2e`)"]) == [
        r for m in pins.kube_planes() for r in (pins.provider_for(m).release, m)
    ]
    assert releases(row["Tested in the unit suite"]) == [p.release for p in pins.providers()]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"provider-kubernetes` at `{constraint}`" in readme  # the install steps say it too


def test_the_flower_row_is_the_supported_releases_and_the_venvs_the_tests_run():
    row = compatibility()["Flower (the images a Federation runs)"]
    venvs = by_version([p.stem for p in (ROOT / "tests" / "flower").glob("*.txt")])
    assert releases(row["Supported"]) == releases(flower.SUPPORTED)
    assert releases(row["Tested end to end (`make e2e`)"]) == venvs[-1:]  # the Makefile's FLWR_NEWEST
    assert releases(row["Tested in the unit suite"]) == venvs


def test_the_python_row_is_the_packages_range_the_image_and_this_run():
    row = compatibility()["Python (the function's)"]
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    low, high = re.fullmatch(r">=(3\.\d+),<(3\.\d+)", requires).groups()  # type: ignore[union-attr]
    supported = [f"3.{n}" for n in range(pins.version(low)[1], pins.version(high)[1])]
    assert releases(row["Supported"]) == [supported[0], supported[-1]]
    image = re.search(r'"libpython(3\.\d+)-stdlib"', (ROOT / "hack" / "build_image.py").read_text())
    assert image is not None
    assert releases(row["Tested end to end (`make e2e`)"]) == [image.group(1)]
    # The unit suite runs on each Python its column names: this run is one of them.
    tested = releases(row["Tested in the unit suite"])
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in tested
    assert set(tested) <= set(supported)


def composed_table() -> list[re.Pattern[str]]:
    """The README's "What gets composed" table: each row's composition resource names, placeholders as patterns."""
    text = (ROOT / "README.md").read_text().split("## What gets composed", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    names = [n for row in rows for n in re.findall(r"`([^`]+)`", row)]
    # re.escape leaves < and > as they are: each <placeholder> becomes a name's characters.
    return [re.compile("^" + re.sub(r"<[^>]+>", "[a-z0-9.-]+", re.escape(n)) + "$") for n in names]


def _render_args(args: list[str]) -> tuple[str, str | None, str | None, str | None, str | None]:
    """render_file's arguments for an example header's `function render` arguments, paths from the root."""
    flags = {"--observed": 1, "--xrd": 2, "--required": 3, "--policy": 4}
    out: list[str | None] = [None] * 5
    words = iter(args)
    for word in words:
        value = next(words) if word in flags else word
        out[flags.get(word, 0)] = str(ROOT / value)
    assert out[0] is not None, args
    return (out[0], out[1], out[2], out[3], out[4])


def test_the_composed_table_names_everything_the_examples_compose():
    """Every composition resource an example composes has its row: the table does not fall behind the function."""
    rows = composed_table()
    assert len(rows) > 10, rows
    missing = set()
    for path in sorted((ROOT / "examples" / "claims").glob("*.yaml")):
        args = (header_commands(path) or [[str(path)]])[0]
        text, _ = render.render_file(*_render_args(args))
        for doc in yaml.safe_load_all(text):
            name = ((doc or {}).get("metadata", {}).get("annotations") or {}).get(
                "crossplane.io/composition-resource-name"
            )
            if name and not any(row.match(name) for row in rows):
                missing.add(name)
    assert not missing, f"README's What gets composed has no row for: {sorted(missing)}"


def test_the_readmes_sample_status_is_what_the_function_renders():
    """The status in the README's `crossplane render` sample has the fields the function writes, no fewer."""
    readme = (ROOT / "README.md").read_text()
    sample = readme.split("kind: XFederation\n", 1)[1].split("\n---", 1)[0]
    shown = set(re.findall(r"^  ([A-Za-z]+):", sample.split("status:\n", 1)[1], flags=re.M))
    text, _ = render.render_file(str(ROOT / "examples" / "xr.yaml"))
    status = next(yaml.safe_load_all(text))["status"]
    assert shown == set(status), f"README's sample shows {sorted(shown)}, the function writes {sorted(status)}"


def test_the_readmes_install_blocks_are_the_ones_the_e2e_runs():
    """README "Install on your cluster": each block marked for the e2e is run by it (by name), and every file
    a line applies is in the repository."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"<!-- e2e: (\S+) -->\n```sh\n(.*?)```", readme, re.DOTALL)
    assert {name for name, _ in blocks} == {"platform", "federation", "tenant"}, blocks
    harness = "".join(p.read_text() for p in sorted((ROOT / "tests" / "e2e").glob("*.py")))
    for name, block in blocks:
        assert f'"{name}"' in harness, f"no e2e runs the README's {name} block"
        for path in re.findall(r"-f (\S+)", block):
            assert (ROOT / path).is_file(), (name, path)
