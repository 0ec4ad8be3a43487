"""Every example renders with the command its header, the README or the docs give, as a new user runs it.

Through the command line itself (function.serving.main.cli, the `function` entry point),
from the repository's root: an example whose header gives `function render ...` is
rendered with exactly that; any other Federation with `function render FILE`. The table
says, for every file under examples/, how it renders and why.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex

import pytest
import structlog
from click.testing import CliRunner

from function.serving import main
from support.peers import EXAMPLES, ROOT, header_commands

HEADER = "its header's command"  # renders (exit 0) with each `function render` its header gives, and needs one
PLAIN = "plain"  # renders with `function render FILE`; its header gives no command
REFUSED = "refused"  # exit 1 with the message its first line (`# expect: ...`) gives
NO_FEDERATION = "no Federation"  # a manifest of another kind: `function render` names it and renders nothing


@dataclasses.dataclass(frozen=True)
class Row:
    pattern: str  # under examples/ (fnmatch): the first row that matches a file holds
    how: str
    reason: str


TABLE = [
    Row("claims/gpu-mountall.yaml", HEADER,
        "its AMD pool runs privileged: the default policy refuses that, a platform's may allow it in one namespace"),
    Row("claims/multicluster-hub-spokes.yaml", HEADER,
        "its spoke pools run in flower-clients, beside the claim's namespace: the policy's namespaces must list it"),
    Row("claims/multicluster-selector.yaml", HEADER,
        "its pools are the ProviderConfigs Crossplane would list (--required); they run in flower-sites (--policy)"),
    Row("claims/tls-cert-manager-multicluster.yaml", HEADER,
        "renders alone too, with spoke-eu's pool held back until the SuperLink's Secret comes (--required)"),
    Row("claims/*.yaml", PLAIN, "a claim the defaults admit, needing nothing Crossplane would send besides it"),
    Row("xr.yaml", PLAIN, "the composite resource (XR) form, rendered as Crossplane passes it"),
    Row("v2/federation.yaml", HEADER, "a namespaced Federation: the v2 XRD's scope says so (--xrd)"),
    Row("observed/*.yaml", HEADER, "observed state: its header renders the claim it was observed for with it"),
    Row("required/*.yaml", HEADER, "required resources: its header renders the claim that asks for them with them"),
    Row("invalid/*.yaml", REFUSED, "invalid on purpose: refused, with the message its first line expects"),
    Row("install/*.yaml", NO_FEDERATION, "what a platform team applies to install the packages"),
    Row("multicluster/*.yaml", NO_FEDERATION, "the ProviderConfigs the multicluster claims name"),
    Row("policy/*.yaml", NO_FEDERATION, "the platform's policy, as its EnvironmentConfig: --policy's input too"),
    Row("v2/providerconfigs.yaml", NO_FEDERATION, "the provider configs the namespaced Federation names"),
    Row("v2/tenant.yaml", NO_FEDERATION, "a tenant's RBAC for Federations in its namespace"),
    Row("v2/run.yaml", NO_FEDERATION, "a FederationRun: applied on a cluster, where the runner starts it"),
    Row("runs/*.yaml", NO_FEDERATION, "a FederationRun: applied on a cluster, where the runner starts it"),
    Row("functions.yaml", NO_FEDERATION, "the function as `crossplane render` runs it"),
]  # fmt: skip
EXAMPLE_FILES = sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.yaml") if "app" not in p.parts)


def row(example: str) -> Row:
    found = next((r for r in TABLE if pathlib.PurePosixPath(example).match(r.pattern)), None)
    assert found is not None, f"examples/{example} has no row in TABLE: say how it renders, and why"
    return found


@pytest.fixture
def render(monkeypatch):
    """`function render ARGS` from the repository's root; the logging it turns off is turned back on after."""
    monkeypatch.chdir(ROOT)
    yield lambda args: CliRunner().invoke(main.cli, ["render", *args])
    structlog.reset_defaults()


def assert_renders(result, command: str) -> None:
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, f"{command}: {result.stderr}"
    assert "kind: XFederation" in result.stdout or "kind: Federation" in result.stdout, command


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_every_example_renders_with_the_command_its_header_gives(example, render):
    how, path = row(example).how, f"examples/{example}"
    commands = header_commands(EXAMPLES / example)
    if how == HEADER:
        assert commands, f"{path}: its header must give the command that renders it (`#   function render ...`)"
        for args in commands:
            assert_renders(render(args), f"function render {shlex.join(args)}")
        return
    assert not commands, f"{path}: its header gives a command; its row in TABLE must say {HEADER!r}"
    result = render([path])
    if how == PLAIN:
        assert_renders(result, f"function render {path}")
    elif how == REFUSED:
        expected = (EXAMPLES / example).read_text().splitlines()[0].removeprefix("# expect: ")
        assert result.exit_code == 1 and result.stdout == "", result.stderr
        assert expected in result.stderr, result.stderr
    else:
        assert result.exit_code == 1 and result.stdout == "", result.stderr
        assert "is no Federation" in result.stderr, result.stderr


def test_every_row_of_the_table_is_some_example():
    for r in TABLE:
        assert any(pathlib.PurePosixPath(e).match(r.pattern) for e in EXAMPLE_FILES), r


# `.venv/bin/function render ...` in a code block of the README or docs/ (a trailing `\` continues it).
DOC_COMMAND = re.compile(r"^(?:\$ )?\.venv/bin/function render ((?:[^#\n\\]|\\\n)+)", re.MULTILINE)


def _doc_commands() -> list[tuple[str, list[str]]]:
    """(doc, arguments) of each command there on examples/ (not the reader's own files, nor standard input)."""
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in DOC_COMMAND.finditer(doc.read_text()):
            args = shlex.split(m.group(1).replace("\\\n", " "))
            if any(a.startswith("examples/") for a in args):
                out.append((doc.relative_to(ROOT).as_posix(), args))
    return out


DOC_COMMANDS = _doc_commands()


def test_the_readme_and_docs_give_commands_on_examples():
    assert len(DOC_COMMANDS) >= 4, DOC_COMMANDS


@pytest.mark.parametrize(("doc", "args"), DOC_COMMANDS, ids=[f"{d}: {shlex.join(a)}" for d, a in DOC_COMMANDS])
def test_every_example_renders_with_the_command_the_readme_or_docs_give(doc, args, render):
    result = render(args)
    if any(a.startswith("examples/invalid/") for a in args):
        assert result.exit_code == 1 and result.stdout == "", result.stderr
        return
    assert_renders(result, f"{doc}: function render {shlex.join(args)}")
