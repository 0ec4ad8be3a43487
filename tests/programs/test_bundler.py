"""The bundler (function/programs/bundle_program.py): an image run's app built by the image's `flwr build`.

The real tests run the archive the function ships (function/builders/identity.py) with a Flower
release's Python and CLI, as the Job's container runs it in the app's image, against a fake
Kubernetes API over TLS that records what the bundler writes into its ConfigMap.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import http.server
import io
import ipaddress
import json
import os
import pathlib
import shutil
import ssl
import subprocess
import sys
import threading
import time
import tomllib
import zipfile
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from function.api import run_spec
from function.builders import identity
from function.programs import bundle_program, flwr_control
from support.peers import EXAMPLES, need
from support.real_flower import venv_python

NAMESPACE = "team-a"
CONFIGMAP = "run-a-app"
PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{CONFIGMAP}"
# The releases the runner's real tests run (tests/real/test_real_runs.py): 1.35 (HTTP runtime APIs), the last two.
RELEASES = ["1.35.0", "1.41.0", "1.42.0"]


def test_the_programs_cap_on_a_bundle_is_the_apis():
    """The programs cannot import function.api: their copy of the cap must follow the API's."""
    assert flwr_control.MAX_FAB_BYTES == run_spec.MAX_FAB_BYTES
    assert flwr_control.BUNDLE_KEY == run_spec.DEFAULT_APP_KEY, "an image run's bundle under the key a FAB has"


# What Flower 1.35 to 1.42 print when `flwr build` fails (rich's box, 80 columns, on stderr).
BOXED = """\
╭─ Error ──────────────────────────────────────────────────────────────────────╮
│ Invalid Flower App configuration in '/tmp/bt/bad/pyproject.toml':            │
│ - Missing [tool.flwr.app] section                                            │
╰──────────────────────────────────────────────────────────────────────────────╯
"""


@pytest.mark.parametrize(
    ("stdout", "stderr", "said", "why"),
    [
        ("", BOXED,
         "Invalid Flower App configuration in '/tmp/bt/bad/pyproject.toml': - Missing [tool.flwr.app] section",
         "Flower's words, out of their box"),
        ("Traceback ...\nValueError: boom\n", "", "Traceback ... ValueError: boom", "not boxed: as it is, one line"),
        ("", "", "", "nothing said"),
        ("", "x" * 1000, "x" * 297 + "...", "bounded"),
    ],
)  # fmt: skip
def test_flowers_words_become_one_bounded_line(stdout, stderr, said, why):
    assert bundle_program.flower_words(stdout, stderr) == said, why


def test_without_an_api_nothing_is_built_and_the_job_tries_again(tmp_path, monkeypatch, capsys):
    """No API to write the outcome to: exit 1 (the Job retries) before the minutes a build may take."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    argv = ["bundle", f"--app={EXAMPLES / 'app'}", f"--configmap={CONFIGMAP}", f"--work={tmp_path / 'work'}"]
    assert bundle_program.main([*argv, f"--kube-credentials={tmp_path}"]) == 1
    assert "no Kubernetes API in reach" in capsys.readouterr().out
    assert not (tmp_path / "work").exists(), "nothing built"


# The real `flwr build`: a fake Kubernetes API over TLS, and the release's Python running the shipped archive.


def certificates(into: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """A CA (as the pod's ca.crt) and a certificate it signed for 127.0.0.1: (ca.crt, tls.crt, tls.key)."""
    now = dt.datetime.now(dt.UTC)

    def signed(
        subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, signer, extensions
    ) -> x509.Certificate:
        builder = x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        builder = builder.issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
        builder = builder.not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(hours=1))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = signed("test-ca", ca_key, ca_name, ca_key, [
        (x509.BasicConstraints(ca=True, path_length=None), True),
        (x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                       data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                       encipher_only=False, decipher_only=False), True),
        (x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False),
    ])  # fmt: skip
    leaf = signed("127.0.0.1", key, ca_name, ca_key, [
        (x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False),
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False),
    ])  # fmt: skip
    paths = into / "ca.crt", into / "tls.crt", into / "tls.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    paths[2].write_bytes(pem)
    return paths


class KubeApiFake(http.server.BaseHTTPRequestHandler):
    """The Kubernetes API as the bundler reaches it: each request recorded, answered with the server's status."""

    requests: ClassVar[list[dict[str, Any]]]
    status: ClassVar[int]

    def do_PATCH(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.requests.append({
            "method": "PATCH", "path": self.path, "content-type": self.headers.get("Content-Type"),
            "authorization": self.headers.get("Authorization"), "body": json.loads(body or b"null"),
        })  # fmt: skip
        answer = json.dumps({} if self.status == 200 else {"message": "forbidden"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        """Quiet: the test reads what it recorded."""


class FakeApi:
    """A fake API server on the loopback, its pod's credentials (token, ca.crt) and what it was asked."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.credentials = tmp / "kube-api"
        self.credentials.mkdir()
        (self.credentials / "token").write_text("the-token\n")
        ca, cert, key = certificates(self.credentials)
        self.handler = type("Handler", (KubeApiFake,), {"requests": [], "status": 200})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self.handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        assert ca.exists()

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.handler.requests

    def answer(self, status: int) -> None:
        self.handler.status = status

    def env(self) -> dict[str, str]:
        """What the kubelet puts in every pod's environment, and the downward API's namespace."""
        port = str(self.server.server_address[1])
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port, "POD_NAMESPACE": NAMESPACE}


@pytest.fixture
def kube_api(tmp_path) -> Iterator[FakeApi]:
    api = FakeApi(tmp_path)
    thread = threading.Thread(target=api.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield api
    api.server.shutdown()
    api.server.server_close()
    thread.join(timeout=10)


@pytest.fixture(params=RELEASES)
def release_bin(request) -> pathlib.Path:
    """The bin directory of a Flower release's venv: its Python and its `flwr`, as the app's image has them."""
    python = venv_python(request.param)
    need(python is not None, f"a venv of Flower {request.param} (FLWR_VENVS; `make unit`)")
    assert python is not None
    script = "import importlib.metadata as m; print(m.version('flwr'))"
    installed = subprocess.run([python, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert installed == request.param, f"{python} has Flower {installed}"
    return python.parent


def bundle(
    release_bin: pathlib.Path, api: FakeApi, app: pathlib.Path, tmp: pathlib.Path
) -> subprocess.CompletedProcess[str]:
    """The Job's container: `python <archive> bundle ...` with the release's Python, its HOME an empty directory."""
    archive = tmp / identity.PROGRAM_FILE
    archive.write_bytes(base64.b64decode(identity.PROGRAM_ARCHIVE))
    home = tmp / "home"
    home.mkdir()
    env = {"PATH": f"{release_bin}:{os.environ['PATH']}", "HOME": str(home), **api.env()}
    argv = [
        release_bin / "python", archive, "bundle", f"--app={app}", f"--configmap={CONFIGMAP}", "--key=app.fab",
        f"--work={tmp / 'work'}", f"--kube-credentials={api.credentials}",
    ]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert list(home.iterdir()) == [], "nothing written to the image's HOME: its root filesystem is read-only"
    return proc


def app_copy(tmp: pathlib.Path, change: str = "") -> pathlib.Path:
    """A copy of examples/app: as it is, without its pyproject.toml ("no pyproject"), or invalid to Flower."""
    app = tmp / "app"
    shutil.copytree(EXAMPLES / "app", app, ignore=shutil.ignore_patterns("__pycache__"))
    if change == "no pyproject":
        (app / "pyproject.toml").unlink()
    elif change == "not flower's":
        (app / "pyproject.toml").write_text('[project]\nname = "smoke"\nversion = "1.0.0"\n')
    return app


def files(app: pathlib.Path) -> list[str]:
    """The app's files; not Python's bytecode cache (`flwr build` imports the app), which a read-only image skips."""
    return sorted(str(p.relative_to(app)) for p in app.rglob("*") if "__pycache__" not in p.parts)


@pytest.mark.peers  # each release's Flower virtualenv, which `make unit-py` does not make
def test_the_images_app_is_bundled_into_its_configmap(release_bin, kube_api, tmp_path):
    """The app built by the image's own `flwr build`, written as binaryData: a bundle of the app's files."""
    app = app_copy(tmp_path)
    before = files(app)
    proc = bundle(release_bin, kube_api, app, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (request,) = kube_api.requests
    assert (request["method"], request["path"]) == ("PATCH", PATH)
    assert request["content-type"] == "application/merge-patch+json"
    assert request["authorization"] == "Bearer the-token", "the projected token, as read from its file"
    assert list(request["body"]) == ["binaryData"] and list(request["body"]["binaryData"]) == ["app.fab"]
    encoded = request["body"]["binaryData"]["app.fab"]
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(encoded))) as fab:
        # Flower writes the app's pyproject.toml anew (its comments left out): the same TOML.
        assert tomllib.loads(fab.read("pyproject.toml").decode()) == tomllib.loads((app / "pyproject.toml").read_text())
        assert fab.read("smoke/server_app.py") == (app / "smoke" / "server_app.py").read_bytes()
    assert files(app) == before, "the image's app directory is left as it was"
    assert encoded[:40] not in proc.stdout + proc.stderr, "the log never holds the bundle"
    assert f"wrote the bundle to ConfigMap {NAMESPACE}/{CONFIGMAP} (binaryData.app.fab)" in proc.stdout


@pytest.mark.peers  # each release's Flower virtualenv, which `make unit-py` does not make
@pytest.mark.parametrize(
    ("change", "error", "why"),
    [
        ("no pyproject", "{app} has no pyproject.toml: not a Flower app's directory",
         "a directory that is no app: said before Flower is asked"),
        ("not flower's", ("flwr build failed: Invalid Flower App configuration in '{app}/pyproject.toml': "
         "- Missing [tool.flwr.app] section"), "an app Flower refuses: in Flower's words, out of their box"),
        ("missing", "{app} is not a directory in the image (the app's directory, --app)", "the wrong --app"),
    ],
)  # fmt: skip
def test_an_app_that_cannot_be_bundled_writes_why(release_bin, kube_api, tmp_path, change, error, why):
    """Why there is no bundle is the Job's result (exit 0): building again would fail again."""
    app = app_copy(tmp_path, change) if change != "missing" else tmp_path / "nowhere"
    proc = bundle(release_bin, kube_api, app, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (request,) = kube_api.requests
    assert (request["method"], request["path"]) == ("PATCH", PATH)
    assert request["body"] == {"data": {"error": error.format(app=app)}}, why
    assert f"not bundled: {error.format(app=app)}" in proc.stdout


@pytest.mark.peers  # each release's Flower virtualenv, which `make unit-py` does not make
def test_a_bundle_too_large_for_a_run_writes_why(release_bin, kube_api, tmp_path):
    app = app_copy(tmp_path)
    # Random bytes, base64 in a module: a bundle larger than a run's cap, whatever zip makes of it.
    blob = base64.b64encode(os.urandom(flwr_control.MAX_FAB_BYTES)).decode()
    (app / "smoke" / "blob.py").write_text(f'DATA = "{blob}"\n')
    proc = bundle(release_bin, kube_api, app, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (request,) = kube_api.requests
    error = request["body"]["data"]["error"]
    assert error.startswith("the app's bundle is ") and error.endswith("bytes; a run's may have at most 524288")
    assert "binaryData" not in request["body"]


@pytest.mark.peers  # each release's Flower virtualenv, which `make unit-py` does not make
def test_a_configmap_it_cannot_write_fails_the_container_so_the_job_tries_again(release_bin, kube_api, tmp_path):
    kube_api.answer(403)
    proc = bundle(release_bin, kube_api, app_copy(tmp_path), tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(kube_api.requests) == 1, "built, then refused"
    assert f"cannot write ConfigMap {NAMESPACE}/{CONFIGMAP}: 403 forbidden" in proc.stdout


def test_the_shipped_archive_runs_the_bundle_mode(tmp_path):
    """`python <archive> bundle` is bundle_program's mode, through the archive's __main__.py."""
    archive = tmp_path / identity.PROGRAM_FILE
    archive.write_bytes(base64.b64decode(identity.PROGRAM_ARCHIVE))
    proc = subprocess.run([sys.executable, archive, "bundle", "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--configmap" in proc.stdout and "flower-bundler" in proc.stdout


class RecordingApi:
    """The Kubernetes API as patch_configmap sees it: every call recorded, each answered 200."""

    def __init__(self):
        self.calls = []

    def call(self, method, path, body=None, content_type=""):
        self.calls.append((method, path, body, content_type))
        return 200, {}


def test_a_relative_app_is_the_one_where_the_container_starts(tmp_path, monkeypatch):
    """`flwr build` runs in the work directory: a relative --app still names the directory it named at the start."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    api = RecordingApi()
    args = argparse.Namespace(app="nowhere", configmap=CONFIGMAP, key="app.fab", work=str(tmp_path / "work"))
    assert bundle_program.bundle(api, args) == 0
    error = f"{tmp_path / 'nowhere'} is not a directory in the image (the app's directory, --app)"
    assert api.calls == [("PATCH", PATH, {"data": {"error": error}}, "application/merge-patch+json")]


def _prints_then_hangs() -> None:
    sys.stdout.write("Loading project configuration...\n")  # line-buffered: it reaches the file at once
    time.sleep(60)


def test_a_build_past_its_timeout_says_so_with_its_last_words(tmp_path, monkeypatch):
    app = tmp_path / "app"
    app.mkdir()
    (app / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    monkeypatch.setattr(bundle_program, "BUILD_TIMEOUT", 0.5)
    monkeypatch.setattr(bundle_program, "load_entry_point", lambda _name: _prints_then_hangs)
    assert bundle_program.build(app, tmp_path / "work") == (
        None,
        "flwr build did not finish within 0 s; its last words: Loading project configuration...",
    )
