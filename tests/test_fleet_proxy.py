"""The Fleet API proxy's nginx.conf (function/builders/fleet_proxy.py), as the function renders it.

Table tests read the rendered directives block by block, a reason per row; the real nginx
(NGINX_ROOT, `make unit`) checks the file's syntax.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest

from function.builders import fleet_proxy, tls
from support.helpers import BASE, manifests, spec
from support.peers import ROOT, need

V142 = spec(BASE, superlink__image="flwr/superlink:1.42.0", supernodes__image="flwr/supernode:1.42.0")
TLS = {"tls": {"secretName": "superlink-tls"}}

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


def rendered(*, secure: bool = False) -> str:
    return manifests({**V142, **(TLS if secure else {})})["superlink-fleet-proxy"]["data"][fleet_proxy.CONFIG_FILE]


@pytest.mark.parametrize(
    ("reason", "secure", "path", "directive"),
    [
        ("TLS 1.3 besides 1.2: nginx before 1.23.4 offers 1.2 alone", True, SERVER, "ssl_protocols TLSv1.2 TLSv1.3"),
        ("and to the SuperLink's own listener", True, SERVER, "proxy_ssl_protocols TLSv1.2 TLSv1.3"),
        ("health: the raw request line is the probe's, else nginx answers (no //health, /%68ealth, ?query)",
         False, HEALTH, 'if ($request_uri != "/health") { return 404; }'),
        ("Fleet: the raw request line is a plain Fleet path, as before", False, FLEET,
         'if ($request_uri !~ "^/v1/fleet/[a-z0-9-]+$") { return 404; }'),
        ("health by GET (and HEAD) alone", False, HEALTH, "limit_except GET { deny all; }"),
    ],
)  # fmt: skip
def test_the_proxy_renders(reason, secure, path, directive):
    assert directive in directives(rendered(secure=secure), path), reason


def test_no_tls_directive_without_tls():
    assert not re.search(r"ssl_", rendered()), "plain HTTP"


def nginx_binary() -> pathlib.Path:
    root = pathlib.Path(os.environ.get("NGINX_ROOT") or ROOT / ".cache" / "nginx")
    binary = root / "usr" / "sbin" / "nginx"
    need(os.access(binary, os.X_OK), f"nginx from Debian's package ({root}; `make unit`)")
    return binary


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls"])
def test_nginx_accepts_the_configuration(tmp_path: pathlib.Path, *, secure: bool):
    """nginx itself reads the file (`nginx -t`), with its paths moved under a scratch directory."""
    binary = nginx_binary()
    text = rendered(secure=secure)
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
