"""The Fleet API proxy's nginx.conf (function/builders/fleet_proxy.py), as the function renders it.

Table tests read the rendered directives block by block, a reason per row; the real nginx
(NGINX_ROOT, `make unit`) checks the file's syntax; each Flower release's own code says how
large a body its SuperNodes send, which the smallest body cap the API admits must hold. What the
configuration does to an attacker, with Flower behind it, is tests/real/test_real_fleet_edge.py's.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest

from function.api.spec import ProxyLimits
from function.builders import fleet_proxy, tls
from support.helpers import BASE, manifests, spec
from support.peers import ROOT, need

V142 = spec(BASE, superlink__image="flwr/superlink:1.42.0", supernodes__image="flwr/supernode:1.42.0")
TLS = {"tls": {"secretName": "superlink-tls"}}

HTTP = ("http",)
SERVER = ("http", "server")
FLEET = ("http", "server", "location /v1/fleet/")
HEALTH = ("http", "server", "location = /health")

Block = list[tuple[str, Any]]  # (directive's text, its block's contents or None)


def parse(text: str) -> Block:
    """nginx.conf as nested blocks: each directive's words as written (quotes kept), and its block."""
    tokens = re.findall(r'(?:"[^"]*"|[^\s{};"])+|[{};]', re.sub(r"#[^\n]*", "", text))
    stack: list[Block] = [[]]
    words: list[str] = []
    for word in tokens:
        if word == ";":
            stack[-1].append((" ".join(words), None))
        elif word == "{":
            block: Block = []
            stack[-1].append((" ".join(words), block))
            stack.append(block)
        elif word == "}":
            stack.pop()
        else:
            words.append(word)
            continue
        words = []
    assert len(stack) == 1 and not words, "unbalanced braces"
    return stack[0]


def directives(text: str, path: tuple[str, ...]) -> list[str]:
    """The directives of the block at path (each step a block's header), blocks given as `header { ... }`."""
    block = parse(text)
    for step in path:
        block = next(inner for header, inner in block if header == step and inner is not None)
    return [
        header if inner is None else f"{header} {{ {' '.join(h + ';' for h, _ in inner)} }}" for header, inner in block
    ]


def rendered(limits: dict[str, Any] | None = None, *, secure: bool = False) -> str:
    s = spec(V142, superlink__proxyLimits=limits or {})
    return manifests({**s, **(TLS if secure else {})})["superlink-fleet-proxy"]["data"][fleet_proxy.CONFIG_FILE]


@pytest.mark.parametrize(
    ("reason", "limits", "secure", "path", "directive"),
    [
        ("a body over the cap is answered 413 by nginx: Flower reads a whole body before it checks a signature",
         None, False, FLEET, "client_max_body_size 16m"),
        ("the cap the spec asks for", {"maxBodyMiB": 6}, False, FLEET, "client_max_body_size 6m"),
        ("a probe sends no body: health passes next to none, outside the Fleet limits",
         None, False, HEALTH, "client_max_body_size 1k"),
        ("Fleet requests in progress from one client address", None, False, FLEET, "limit_conn fleet_per_address 32"),
        ("per address, as asked", {"maxRequestsPerAddress": 4}, False, FLEET, "limit_conn fleet_per_address 4"),
        ("the zone per address is keyed on the client's address",
         None, False, HTTP, "limit_conn_zone $binary_remote_addr zone=fleet_per_address:4m"),
        ("every Fleet request in progress, counted together: SuperLink memory <= maxRequests x body cap",
         None, False, FLEET, "limit_conn fleet_all 64"),
        ("in all, as asked", {"maxRequests": 6}, False, FLEET, "limit_conn fleet_all 6"),
        ("one count for all: its key is the server's name, the same for every request",
         None, False, HTTP, "limit_conn_zone $server_name zone=fleet_all:1m"),
        ("the one server's name, so the key is never empty (nginx counts no empty key)",
         None, False, SERVER, "server_name fleet-proxy"),
        ("requests a second per client address",
         None, False, HTTP, "limit_req_zone $binary_remote_addr zone=fleet_rate_per_address:4m rate=200r/s"),
        ("bursts of two seconds' worth pass at once, the rest is refused, not queued",
         None, False, FLEET, "limit_req zone=fleet_rate_per_address burst=400 nodelay"),
        ("the rate as asked", {"requestsPerSecondPerAddress": 5}, False, HTTP,
         "limit_req_zone $binary_remote_addr zone=fleet_rate_per_address:4m rate=5r/s"),
        ("its burst, twice the rate", {"requestsPerSecondPerAddress": 5}, False, FLEET,
         "limit_req zone=fleet_rate_per_address burst=10 nodelay"),
        ("a refused request is 503, which SuperNodes retry; on 429 they give up", None, False, HTTP,
         "limit_conn_status 503"),
        ("the same for the rate", None, False, HTTP, "limit_req_status 503"),
        ("a client that stalls its header is cut off", None, False, SERVER, "client_header_timeout 30s"),
        ("a client that stalls its body is cut off", None, False, SERVER, "client_body_timeout 30s"),
        ("a client that stops reading its answer is cut off", None, False, SERVER, "send_timeout 30s"),
        ("the timeouts as asked", {"clientTimeoutSeconds": 3}, False, SERVER, "client_body_timeout 3s"),
        ("an idle keep-alive connection goes (a SuperNode's client keeps one idle for 5 s)",
         None, False, SERVER, "keepalive_timeout 10s"),
        ("a timed-out connection is reset, its memory freed at once", None, False, SERVER,
         "reset_timedout_connection on"),
        ("a body is spooled whole before Flower gets a byte: a slow sender never holds Flower",
         None, False, SERVER, "proxy_request_buffering on"),
        ("an answer is taken from Flower whole: a slow reader never holds Flower", None, False, SERVER,
         "proxy_buffering on"),
        ("TLS 1.3 besides 1.2: nginx before 1.23.4 offers 1.2 alone", None, True, SERVER,
         "ssl_protocols TLSv1.2 TLSv1.3"),
        ("and to the SuperLink's own listener", None, True, SERVER, "proxy_ssl_protocols TLSv1.2 TLSv1.3"),
        ("health: the raw request line is the probe's, else nginx answers (no //health, /%68ealth, ?query)",
         None, False, HEALTH, 'if ($request_uri != "/health") { return 404; }'),
        ("Fleet: the raw request line is a plain Fleet path, as before", None, False, FLEET,
         'if ($request_uri !~ "^/v1/fleet/[a-z0-9-]+$") { return 404; }'),
        ("health by GET (and HEAD) alone", None, False, HEALTH, "limit_except GET { deny all; }"),
        ("refusals are logged (at error), not every body spooled to disk (a warning, each chunk of a model)",
         None, False, (), "error_log stderr error"),
    ],
)  # fmt: skip
def test_the_proxy_renders(reason, limits, secure, path, directive):
    assert directive in directives(rendered(limits, secure=secure), path), reason


@pytest.mark.parametrize(
    ("reason", "secure", "path", "pattern"),
    [
        ("no body is unbounded anywhere", True, (), r"client_max_body_size 0;"),
        ("health is not rate limited: the kubelet may share an address with a flood (a node's, behind a Service)",
         False, HEALTH, r"limit_req"),
        ("nor counted: a flood that fills the Fleet slots must not make the pod unready", False, HEALTH,
         r"limit_conn"),
        ("no TLS directive without TLS", False, (), r"ssl_"),
        ("bodies are never streamed to Flower as they arrive", True, (), r"proxy_request_buffering off"),
    ],
)  # fmt: skip
def test_the_proxy_leaves_out(reason, secure, path, pattern):
    text = rendered(secure=secure)
    found = "\n".join(directives(text, path)) if path else text
    assert not re.search(pattern, found), reason


def test_the_defaults_are_the_models():
    """The rendered defaults are those the API documents."""
    defaults = ProxyLimits()
    text = rendered()
    assert f"client_max_body_size {defaults.maxBodyMiB}m" in directives(text, FLEET)
    assert f"client_body_timeout {defaults.clientTimeoutSeconds}s" in directives(text, SERVER)


def proxy_digest(limits: dict[str, Any] | None = None) -> str | None:
    """The SuperLink pod template's digest of the proxy's configuration, for a 1.42 Federation with these limits."""
    given = spec(V142, superlink__proxyLimits=limits) if limits else V142
    template = manifests(given)["superlink"]["spec"]["template"]["metadata"]
    return (template.get("annotations") or {}).get(fleet_proxy.CONFIG_ANNOTATION)


def test_a_new_configuration_rolls_the_superlink_pod():
    """nginx reads its file once: without a new pod, a running SuperLink would keep the old limits and filter."""
    same = proxy_digest()
    assert same is not None and same == proxy_digest(), "the same Federation, the same pod"
    assert proxy_digest({"maxBodyMiB": 32}) != same, "new limits, a new pod"
    # Before 1.40 there is no proxy, and no digest of one.
    old = manifests(spec(BASE, superlink__image="flwr/superlink:1.35.0", supernodes__image="flwr/supernode:1.35.0"))
    assert fleet_proxy.CONFIG_ANNOTATION not in (
        old["superlink"]["spec"]["template"]["metadata"].get("annotations") or {}
    )


def nginx_binary() -> pathlib.Path:
    root = pathlib.Path(os.environ.get("NGINX_ROOT") or ROOT / ".cache" / "nginx")
    binary = root / "usr" / "sbin" / "nginx"
    need(os.access(binary, os.X_OK), f"nginx from Debian's package ({root}; `make unit`)")
    return binary


@pytest.mark.peers  # Debian's nginx, which `make unit-py` does not unpack
@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls"])
def test_nginx_accepts_the_configuration(tmp_path: pathlib.Path, *, secure: bool):
    """nginx itself reads the file (`nginx -t`), with its paths moved under a scratch directory."""
    binary = nginx_binary()
    text = rendered({"maxBodyMiB": 6, "clientTimeoutSeconds": 3}, secure=secure)
    text = text.replace("/tmp/", f"{tmp_path}/").replace(f"{tls.TLS_DIR}/", f"{tmp_path}/")
    if secure:
        need(shutil.which("openssl") is not None, "openssl (a certificate for nginx -t)")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-days", "1", "-subj", "/CN=t", "-keyout", str(tmp_path / "tls.key"), "-out", str(tmp_path / "tls.crt")],
            check=True, capture_output=True,
        )  # fmt: skip
    (tmp_path / "nginx.conf").write_text(text)
    proc = subprocess.run(
        [binary, "-t", "-q", "-e", "stderr", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


# What a SuperNode pushes: the largest chunk of a model's arrays as a push-object request, run in
# a release's venv. Node and run IDs at their largest, and a session ID longer than Flower's.
PUSH_OBJECT_BODY = """
import numpy as np
from flwr.app import Array
from flwr.common.constant import FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE as CHUNK
from flwr.proto.message_pb2 import PushObjectRequest
from flwr.proto.node_pb2 import Node
chunk = max((c for _, c in Array(np.ones(3 * CHUNK, dtype=np.uint8)).slice_array()), key=lambda c: len(c.deflate()))
request = PushObjectRequest(node=Node(node_id=2**64 - 1), run_id=2**64 - 1, object_id=chunk.object_id,
                            object_content=chunk.deflate(), session_id="s" * 128)
print(CHUNK, len(request.SerializeToString()))
"""


@pytest.mark.peers  # each release's Flower virtualenv, which `make unit-py` does not make
@pytest.mark.parametrize(
    ("release", "reason"),
    [
        ("1.40.0", "the first release behind the Fleet API proxy"),
        ("1.41.0", "the SuperLink's release in the upgrade across 1.40 (examples/claims/flower-upgrade.yaml)"),
        ("1.42.0", "the newest supported, whose command lines newer releases get"),
    ],
)
def test_the_smallest_cap_holds_what_a_supernode_sends(release: str, reason: str):
    """The body cap's floor is above the largest push-object a SuperNode of each release sends:
    one chunk of an array (the release's own constant), in its own request."""
    venvs = os.environ.get("FLWR_VENVS")
    python = pathlib.Path(venvs) / release / "bin" / "python" if venvs else None
    need(python is not None and os.access(python, os.X_OK), f"a venv of Flower {release} (FLWR_VENVS; `make unit`)")
    proc = subprocess.run([str(python), "-c", PUSH_OBJECT_BODY], capture_output=True, text=True, check=True)
    chunk, body = map(int, proc.stdout.split())
    floor = ProxyLimits.model_fields["maxBodyMiB"].metadata
    smallest = next(m.ge for m in floor if hasattr(m, "ge")) * 2**20
    assert chunk == 5 * 2**20, f"Flower {release} chunks arrays by {chunk} bytes: look at the body cap again"
    assert chunk < body < smallest, (release, reason, body, smallest)
