"""The Fleet API proxy: from Flower 1.40, the only door of the SuperLink pod besides health.

Flower 1.40 serves the Fleet, Control and Runtime APIs, `/docs` and
`/openapi.json` on one HTTP listener, and authenticates no caller of Control
or Runtime. So that listener stays on the pod's loopback and nginx, a
well-kept proxy, listens on FLEET_PROXY_PORT and passes on only what a
SuperNode sends (`POST /v1/fleet/<endpoint>`) and what a probe asks
(`GET|HEAD /health`); everything else is answered 404 (or 403 for another
method) without reaching Flower. Paths pass unchanged (a SuperNode appends
`/v1/fleet/...` to the address it dials), and so do the headers node
authentication signs requests with. A path is passed only when the raw
request line matches too, so no encoding or `..` can make the filter and
Flower read two different paths.

With TLS (1.2 and 1.3) nginx terminates it with the SuperLink's certificate
and dials the SuperLink over TLS on the loopback; the SuperLink's own listener
keeps its certificate for `kubectl port-forward`. The configuration is a
ConfigMap beside the SuperLink, the same for the same Federation.
"""

from __future__ import annotations

from typing import Any

from function.api import names
from function.api.spec import FLEET_PROXY_IMAGE, FederationSpec
from function.builders import merge, tls
from function.federation.value import Federation
from function.releases.flower import CONTROL_PORT, FLEET_PROXY_PORT

CONTAINER = "fleet-proxy"
VOLUME = "fleet-proxy-config"
CONFIG_DIR = "/etc/flower-fleet-proxy"
CONFIG_FILE = "nginx.conf"
# nginx's own writable files, on the container's scratch /tmp (its root is read-only).
_SCRATCH = "/tmp"  # noqa: S108 - the container's own emptyDir

# The Fleet endpoints are lower-case words joined by hyphens (`/v1/fleet/pull-messages`).
FLEET_PATH = "^/v1/fleet/[a-z0-9-]+$"
# What the kubelet's probe asks, raw: no query, no other spelling.
HEALTH_PATH = "/health"
TLS_PROTOCOLS = "TLSv1.2 TLSv1.3"


def configmap_name(federation: str) -> str:
    """The ConfigMap holding the proxy's nginx.conf, beside the SuperLink."""
    return f"{names.superlink(federation)}-fleet-proxy"


def config(spec: FederationSpec) -> str:
    """nginx.conf: Fleet and health to the SuperLink's loopback listener, nothing else."""
    lines = [
        "# Written by the Flower Federation function: the SuperLink's Fleet API and health, nothing else.",
        "daemon off;",
        "worker_processes 1;",
        f"pid {_SCRATCH}/nginx.pid;",
        "error_log stderr warn;",
        # One worker is plenty for Fleet's small requests; each SuperNode may hold a
        # keep-alive connection and each proxied request one more to the SuperLink.
        "events { worker_connections 16384; }",
        "http {",
        "    access_log off;",
        "    server_tokens off;",
        *(f"    {kind}_temp_path {_SCRATCH}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")),
        *(f"    {line}" for line in _server(spec)),
        "}",
    ]
    return "\n".join(lines) + "\n"


def _server(spec: FederationSpec) -> list[str]:
    """The one server block: the proxy's listener, TLS as the SuperLink's, and what it passes."""
    secure = tls.enabled(spec)
    server_tls = [
        f"ssl_certificate {tls.TLS_DIR}/tls.crt;",
        f"ssl_certificate_key {tls.TLS_DIR}/tls.key;",
        # nginx before 1.23.4 leaves TLS 1.3 out by default.
        f"ssl_protocols {TLS_PROTOCOLS};",
        f"proxy_ssl_protocols {TLS_PROTOCOLS};",
        # The upstream is this pod's own loopback, which no other pod can
        # take; its certificate names whatever the user's Secret names.
        "proxy_ssl_verify off;",
    ]
    return [
        "server {",
        f"    listen {FLEET_PROXY_PORT}{' ssl' if secure else ''};",
        *(f"    {line}" for line in (server_tls if secure else [])),
        # Model parameters travel in Fleet messages: no size cap, streamed both ways.
        "    client_max_body_size 0;",
        "    proxy_request_buffering off;",
        "    proxy_buffering off;",
        "    proxy_http_version 1.1;",
        "    proxy_read_timeout 1h;",
        "    proxy_send_timeout 1h;",
        *(f"    {line}" for line in _locations(f"{'https' if secure else 'http'}://127.0.0.1:{CONTROL_PORT}")),
        "}",
    ]


def _locations(upstream: str) -> list[str]:
    """Fleet by raw path and method, health by raw path and GET; 404 for the rest."""
    return [
        "location /v1/fleet/ {",
        f'    if ($request_uri !~ "{FLEET_PATH}") {{ return 404; }}',
        "    limit_except POST { deny all; }",
        f"    proxy_pass {upstream};",
        "}",
        "location = /health {",
        f'    if ($request_uri != "{HEALTH_PATH}") {{ return 404; }}',
        "    limit_except GET { deny all; }",  # GET admits HEAD
        f"    proxy_pass {upstream};",
        "}",
        "location / { return 404; }",
    ]


def configmap(fed: Federation) -> dict[str, Any]:
    """The ConfigMap the proxy reads its configuration from, beside the SuperLink."""
    federation, namespace, spec = fed.name, fed.namespace, fed.spec
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(federation),
            "namespace": namespace,
            "labels": names.superlink_labels(federation),
        },
        "data": {CONFIG_FILE: config(spec)},
    }


def volume(federation: str) -> dict[str, Any]:
    """The configuration's volume in the SuperLink pod."""
    return {"name": VOLUME, "configMap": {"name": configmap_name(federation)}}


def container(spec: FederationSpec) -> dict[str, Any]:
    """nginx, in the foreground, with the configuration above; ready while the SuperLink answers /health."""
    link = spec.superlink
    mounts = [{"name": VOLUME, "mountPath": CONFIG_DIR, "readOnly": True}]
    if tls.enabled(spec):
        mounts.append(tls.mount())  # it serves the SuperLink's certificate: the whole Secret
    out: dict[str, Any] = {
        "name": CONTAINER,
        "image": link.proxyImage or FLEET_PROXY_IMAGE,
        # The image's entrypoint is a shell script: nginx itself, with our file.
        "command": ["nginx"],
        "args": ["-e", "stderr", "-c", f"{CONFIG_DIR}/{CONFIG_FILE}"],
        "ports": [{"containerPort": FLEET_PROXY_PORT, "name": "fleet-http", "protocol": "TCP"}],
        "volumeMounts": merge.by_name(mounts),
    }
    if spec.healthProbes:
        out["readinessProbe"] = {
            "httpGet": {
                "path": "/health",
                "port": FLEET_PROXY_PORT,
                "scheme": "HTTPS" if tls.enabled(spec) else "HTTP",
            },
            "periodSeconds": 10,
            "failureThreshold": 3,
        }
    if link.proxyResources:
        out["resources"] = link.proxyResources
    return out
