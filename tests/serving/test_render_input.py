"""`function render` on any bytes: a clear error on stderr, exit 1, nothing on stdout, never a traceback.

Through the command line itself (function.serving.main.cli, the `function` entry point),
in process: each row is a file, a directory or standard input of bytes a user could give.
One row runs the installed `function` as a process, where standard input is the real one.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys

import pytest
import structlog
from click.testing import CliRunner

from function.serving import documents, main
from support.peers import CLAIMS, EXAMPLES, ROOT

QUICKSTART = (EXAMPLES / "claims" / "quickstart.yaml").read_bytes()


def claim(name: str, namespace: str, old: str = "", new: str = "") -> bytes:
    """The quick start's claim under another name and namespace, with one text replaced."""
    text = QUICKSTART.decode().replace("name: my-federation", f"name: {name}")
    text = text.replace("namespace: default", f"namespace: {namespace}")
    assert old in text, old
    return text.replace(old, new).encode() if old else text.encode()


def nested(levels: int) -> bytes:
    return b"a: " + b"[" * levels + b"]" * levels + b"\n"


def bomb(levels: int) -> bytes:
    """The billion laughs: each level nine aliases of the one before."""
    text, before = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n", "l0"
    for i in range(1, levels + 1):
        text += f"l{i}: &l{i} [{', '.join([f'*{before}'] * 9)}]\n"
        before = f"l{i}"
    return text.encode()


@dataclasses.dataclass(frozen=True)
class Case:
    reason: str
    data: bytes
    says: str  # in the error
    where: str = "stdin"  # stdin, file (FILE), observed (a directory, --observed) or policy (--policy)


CASES = [
    Case("a binary file (an image's first bytes)", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
         "binary data (a NUL byte at line 3, column 1): function render reads YAML text", "file"),
    Case("binary on standard input", b"\x7fELF\x02\x01\x01\x00", "standard input: binary data", "stdin"),
    Case("Latin-1, not UTF-8, in a file", b"a: b\nc: d\xe9j\xe0\n", "not UTF-8 text: byte 0xe9 at line 2, column 5",
         "file"),
    Case("Latin-1 on standard input", b"name: caf\xe9\n", "standard input: not UTF-8 text: byte 0xe9 at line 1",
         "stdin"),
    Case("UTF-16 (its NUL bytes)", "a: b\n".encode("utf-16"), "binary data", "stdin"),
    Case("a line longer than any Kubernetes object", b"a: " + b"x" * (documents.MAX_LINE_BYTES + 1),
         "line 1 is 3.0 MiB long, longer than any Kubernetes object", "file"),
    Case("a control character YAML does not allow", b"a: b\x07\n", "not YAML: unacceptable character #x0007", "stdin"),
    Case("not YAML at all", b"a: [b\n", "standard input: not YAML: while parsing a flow sequence", "stdin"),
    Case("a document that is no mapping", b"just words\n", "document 1 is a str, not a mapping", "stdin"),
    Case("nested deeper than any object", nested(documents.MAX_DEPTH + 1), "nested deeper than 100 levels", "stdin"),
    Case("a YAML bomb (aliases of aliases)", bomb(7),
         "its aliases expand it to 54,481,013 nodes, more than 1,000,000 (a YAML bomb?)", "stdin"),
    Case("an alias inside its own anchor (a cycle)", b"a: &a {b: *a}\n",
         "document 1: an alias refers to a node that holds it, a cycle (line 1, column 4)", "stdin"),
    Case("aliases nesting past the depth bound", b"a: &a " + b"[" * 90 + b"]" * 90 + b"\nb: [[[[[[[[[[[*a]]]]]]]]]]]\n",
         "its aliases nest it deeper than 100 levels", "stdin"),
    Case("an integer Python will not read (5,000 digits)",
         claim("fed", "team-a", "replicas: 2", "replicas: " + "9" * 5000),
         "an integer too long for any Kubernetes field", "file"),
    Case("an integer past int64", claim("fed", "team-a", "replicas: 2", f"replicas: {2**99}"),
         "spec.supernodes.pools[0].replicas: an integer of 100 bits, more than a Kubernetes integer holds", "stdin"),
    Case("not a number", claim("fed", "team-a", "replicas: 2", "replicas: .nan"),
         "spec.supernodes.pools[0].replicas: nan is no JSON number", "stdin"),
    Case("a !!binary value", claim("fed", "team-a", "namespace: team-a", "namespace: !!binary dGVhbS1h"),
         "metadata.namespace: a !!binary value, which a Kubernetes object (JSON) cannot hold", "stdin"),
    Case("a key that is not a string",
         claim("fed", "team-a", "namespace: team-a", "namespace: team-a\n  labels: {1: b}"),
         "metadata.labels has the key 1, not a string: quote it", "stdin"),
    Case("a name that is not a string", claim("fed", "team-a", "name: fed", "name: [fed]"),
         "document 1 (Federation without a name): metadata.name must be a string", "stdin"),
    Case("an observed file that is binary, in a directory", b"\x00\x01", "z.yaml: binary data", "observed"),
    Case("a policy that is not UTF-8", b"podSecurity: privil\xe8ged\n", "policy.yaml: not UTF-8 text", "policy"),
    Case("a policy file holding no document", b"# nothing\n", "policy.yaml: 0 documents", "policy"),
    Case("an EnvironmentConfig the packages would not read (another name)",
         b"apiVersion: apiextensions.crossplane.io/v1beta1\nkind: EnvironmentConfig\nmetadata: {name: mine}\n"
         b"data: {podSecurity: privileged}\n",
         "policy.yaml: the packages' Compositions read the EnvironmentConfig flower-platform-policy", "policy"),
    Case("the platform's EnvironmentConfig holding no policy",
         b"apiVersion: apiextensions.crossplane.io/v1beta1\nkind: EnvironmentConfig\n"
         b"metadata: {name: flower-platform-policy}\ndata: {podSecurity: lax}\n",
         "EnvironmentConfig flower-platform-policy: data.podSecurity", "policy"),
]  # fmt: skip


@pytest.fixture
def cli(tmp_path):
    """Run `function render` on a case's bytes; the logging it turns off is turned back on after."""

    def run(case: Case):
        args, stdin = ["render", "-"], None
        if case.where == "stdin":
            stdin = case.data
        elif case.where == "file":
            (tmp_path / "input.yaml").write_bytes(case.data)
            args = ["render", str(tmp_path / "input.yaml")]
        elif case.where == "observed":
            (tmp_path / "observed").mkdir()
            (tmp_path / "observed" / "a.yaml").write_bytes(QUICKSTART)
            (tmp_path / "observed" / "z.yaml").write_bytes(case.data)
            args = ["render", str(CLAIMS[0]), "--observed", str(tmp_path / "observed")]
        else:
            (tmp_path / f"{case.where}.yaml").write_bytes(case.data)
            args = ["render", str(CLAIMS[0]), f"--{case.where}", str(tmp_path / f"{case.where}.yaml")]
        return CliRunner().invoke(main.cli, args, input=stdin)

    yield run
    structlog.reset_defaults()


@pytest.mark.parametrize("case", CASES, ids=[c.reason for c in CASES])
def test_any_bytes_give_a_clear_error_and_nothing_on_stdout(case: Case, cli):
    result = cli(case)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        case.reason,
        result.exception,
    )
    assert result.exit_code == 1, (case.reason, result.exit_code, result.stderr)
    assert result.stdout == "", case.reason
    assert result.stderr.startswith("error: "), (case.reason, result.stderr)
    assert case.says in result.stderr, (case.reason, result.stderr)
    assert "Traceback" not in result.stderr


def test_a_document_whose_timestamps_kubernetes_reads_as_strings_renders(cli):
    """As sigs.k8s.io/yaml reads YAML: an unquoted timestamp is a string, not a date JSON cannot hold."""
    result = cli(
        Case("", claim("fed", "team-a", "namespace: team-a", "namespace: team-a\n  labels: {day: 2024-01-01}"), "")
    )
    assert result.exit_code == 0, result.stderr


# A stream of three Federations: the third one's pool is a DaemonSet that sets replicas.
STREAM = b"---\n".join(
    [
        claim("first", "team-a"),
        claim("second", "team-b"),
        claim("fed", "team-a", "mode: StatefulSet", "mode: DaemonSet"),
    ]
)


def test_an_error_in_a_stream_names_the_federation_by_place_kind_and_namespace_name(cli):
    result = cli(Case("", STREAM, ""))
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("error: standard input: document 3 (Federation team-a/fed): invalid Federation: ")


def test_warnings_in_a_stream_name_their_federation(cli):
    exposed = claim("open", "team-b", "ClusterIP", "LoadBalancer")
    result = cli(Case("", claim("first", "team-a") + b"---\n" + exposed, ""))
    assert result.exit_code == 0, result.stderr
    warnings = result.stderr.splitlines()
    assert warnings and all(w.startswith("warning: document 2 (Federation team-b/open): ") for w in warnings)


def test_the_installed_command_on_real_standard_input_and_a_binary_file(tmp_path):
    """The `function` script as a process: its own standard input and a file of binary bytes."""
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    (tmp_path / "blob.yaml").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF")
    for args, stdin in [(["-"], b"a: caf\xe9\n"), ([str(tmp_path / "blob.yaml")], b""), (["-"], STREAM)]:
        proc = subprocess.run(
            ["function", "render", *args], input=stdin, cwd=ROOT, env=env, capture_output=True, timeout=60, check=False
        )
        assert proc.returncode == 1, proc.stderr
        assert proc.stdout == b""
        assert proc.stderr.startswith(b"error: ") and b"Traceback" not in proc.stderr, proc.stderr
