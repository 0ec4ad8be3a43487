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

It also bounds what a client can make Flower hold, which reads a whole body
before it checks a node's signature (spec.superlink.proxyLimits): a body cap,
Fleet requests in progress per client address and in all, requests a second
per address (503 over them, which SuperNodes retry), and timeouts for clients
that stall. Bodies are spooled whole before Flower gets a byte, and answers
taken from it whole, so a slow client holds nginx's scratch, not Flower: Flower
holds at most maxRequests bodies of maxBodyMiB. Health is outside the limits
(the kubelet's probe may share a flood's address) and takes no body to speak of.

With TLS (1.2 and 1.3) nginx terminates it with the SuperLink's certificate
and dials the SuperLink over TLS on the loopback; the SuperLink's own listener
keeps its certificate for `kubectl port-forward`. The configuration is a
ConfigMap beside the SuperLink, the same for the same Federation; nginx reads
it when it starts.
"""

from __future__ import annotations

import hashlib
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
# nginx's shared memory zones: Fleet requests in progress per address and in all, requests a second per address.
ZONE_ADDRESS = "fleet_per_address"
ZONE_ALL = "fleet_all"
ZONE_RATE = "fleet_rate_per_address"
SERVER_NAME = "fleet-proxy"
# The status of a request over a limit.
LIMITED = 503
# A burst may be this many seconds' worth of requestsPerSecondPerAddress.
BURST_SECONDS = 2
KEEPALIVE = "10s"


def configmap_name(federation: str) -> str:
    """The ConfigMap holding the proxy's nginx.conf, beside the SuperLink."""
    return f"{names.superlink(federation)}-fleet-proxy"


def config(spec: FederationSpec) -> str:
    """nginx.conf: Fleet and health to the SuperLink's loopback listener, nothing else."""
    limits = spec.superlink.proxyLimits
    lines = [
        "# Written by the Flower Federation function: the SuperLink's Fleet API and health, nothing else.",
        "daemon off;",
        "worker_processes 1;",
        f"pid {_SCRATCH}/nginx.pid;",
        # Errors: refusals and failures. Not warnings: nginx warns of every body it spools to disk.
        "error_log stderr error;",
        # One worker is plenty for Fleet's small requests; each SuperNode may hold a
        # keep-alive connection and each proxied request one more to the SuperLink.
        "events { worker_connections 16384; }",
        "http {",
        "    access_log off;",
        "    server_tokens off;",
        *(f"    {kind}_temp_path {_SCRATCH}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")),
        # Fleet requests in progress per client address and in all (keyed on the one server name:
        # one count), and requests a second per client address.
        f"    limit_conn_zone $binary_remote_addr zone={ZONE_ADDRESS}:4m;",
        f"    limit_conn_zone $server_name zone={ZONE_ALL}:1m;",
        f"    limit_req_zone $binary_remote_addr zone={ZONE_RATE}:4m rate={limits.requestsPerSecondPerAddress}r/s;",
        # 503, not 429: a SuperNode (1.40-1.42) retries 503 with back-off, and gives up on 429
        # (its heartbeat thread raises).
        f"    limit_conn_status {LIMITED};",
        f"    limit_req_status {LIMITED};",
        *(f"    {line}" for line in _server(spec)),
        "}",
    ]
    return "\n".join(lines) + "\n"


def _server(spec: FederationSpec) -> list[str]:
    """The one server block: the proxy's listener, TLS as the SuperLink's, and what it passes."""
    secure = tls.enabled(spec)
    limits = spec.superlink.proxyLimits
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
    timeout = f"{limits.clientTimeoutSeconds}s"
    return [
        "server {",
        f"    listen {FLEET_PROXY_PORT}{' ssl' if secure else ''};",
        # The key of the zone that counts every Fleet request.
        f"    server_name {SERVER_NAME};",
        *(f"    {line}" for line in (server_tls if secure else [])),
        # A client that stalls is cut off: waiting for its header, between two reads of its
        # body, between two writes of the answer; and an idle keep-alive connection is
        # closed (a SuperNode's HTTP client keeps one idle for 5 s).
        f"    client_header_timeout {timeout};",
        f"    client_body_timeout {timeout};",
        f"    send_timeout {timeout};",
        f"    keepalive_timeout {KEEPALIVE};",
        "    reset_timedout_connection on;",
        # Whole bodies, spooled to nginx's scratch, before Flower gets a byte, and whole
        # answers taken from Flower as fast as it writes them: a slow client holds nginx's
        # disk, never Flower's memory.
        "    proxy_request_buffering on;",
        "    proxy_buffering on;",
        "    proxy_http_version 1.1;",
        "    proxy_read_timeout 1h;",
        "    proxy_send_timeout 1h;",
        *(f"    {line}" for line in _locations(f"{'https' if secure else 'http'}://127.0.0.1:{CONTROL_PORT}", spec)),
        "}",
    ]


def _locations(upstream: str, spec: FederationSpec) -> list[str]:
    """Fleet by raw path and method, within the limits; health by raw path and GET; 404 for the rest."""
    limits = spec.superlink.proxyLimits
    return [
        "location /v1/fleet/ {",
        f'    if ($request_uri !~ "{FLEET_PATH}") {{ return 404; }}',
        "    limit_except POST { deny all; }",
        f"    client_max_body_size {limits.maxBodyMiB}m;",
        f"    limit_conn {ZONE_ADDRESS} {limits.maxRequestsPerAddress};",
        f"    limit_conn {ZONE_ALL} {limits.maxRequests};",
        f"    limit_req zone={ZONE_RATE} burst={BURST_SECONDS * limits.requestsPerSecondPerAddress} nodelay;",
        f"    proxy_pass {upstream};",
        "}",
        # Exempt from the limits: the kubelet's probe may share its address with Fleet
        # clients (a node's, behind a Service), and a flood must not make the pod unready.
        "location = /health {",
        f'    if ($request_uri != "{HEALTH_PATH}") {{ return 404; }}',
        "    limit_except GET { deny all; }",  # GET admits HEAD
        "    client_max_body_size 1k;",
        f"    proxy_pass {upstream};",
        "}",
        "location / { return 404; }",
    ]


# On the SuperLink's pod template: a digest of the proxy's configuration, so a new one rolls the pod.
CONFIG_ANNOTATION = "flower.flwr.ai/fleet-proxy-config"


def config_annotation(spec: FederationSpec) -> dict[str, str]:
    """The pod template's annotation that changes whenever the proxy's configuration does."""
    return {CONFIG_ANNOTATION: hashlib.sha256(config(spec).encode()).hexdigest()[:16]}


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
