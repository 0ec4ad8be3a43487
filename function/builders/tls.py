"""TLS for the Fleet and Control APIs.

That is the SuperLink's certificate (an existing Secret, or a cert-manager
Certificate the function composes) and the CA that SuperNodes trust.

SuperNodes never see the SuperLink's private key. In the SuperLink's own
namespace they mount only ca.crt of its Secret; elsewhere they mount a Secret
holding only the CA certificate: one the user names (caSecretRef), or one
the function composes from the CA it reads through Crossplane's required
resources. A private key is never copied anywhere.
"""

from __future__ import annotations

import base64
import ipaddress
from typing import Any

from function.api import names
from function.api.spec import FederationSpec, TLSSpec
from function.federation.value import Federation

TLS_DIR = "/app/tls"
TLS_VOLUME = "tls"
# In the SuperLink's pod: only the CA of its Secret, at the same path, for
# the containers there that dial it (SuperExec, reaper) and need no key.
CA_VOLUME = "tls-ca"
CA_FILE = "ca.crt"
REQUIREMENT = "superlink-tls"


def enabled(spec: FederationSpec) -> bool:
    """Whether the Fleet and Control APIs serve TLS."""
    return spec.tls is not None


def insecure(spec: FederationSpec) -> bool:
    """--insecure unless TLS is configured, or as the user says."""
    return spec.insecure if spec.insecure is not None else not enabled(spec)


def _tls(spec: FederationSpec) -> TLSSpec:
    """spec.tls, for callers that only run with TLS configured."""
    if spec.tls is None:
        msg = "spec.tls is not set"
        raise ValueError(msg)
    return spec.tls


def secret_name(federation: str, spec: FederationSpec) -> str:
    """The SuperLink's TLS Secret: the one named, or the one cert-manager fills."""
    return _tls(spec).secretName or f"{names.superlink(federation)}-tls"


def ca_secret_name(federation: str) -> str:
    """The Secret the function composes beside remote pools, holding only the CA certificate."""
    return f"{names.superlink(federation)}-ca"


def superlink_args() -> list[str]:
    """The SuperLink's certificate, key and CA, as mounted by mount()."""
    return [
        f"--ssl-ca-certfile={TLS_DIR}/ca.crt",
        f"--ssl-certfile={TLS_DIR}/tls.crt",
        f"--ssl-keyfile={TLS_DIR}/tls.key",
    ]


def supernode_args() -> list[str]:
    """The CA certificate SuperNodes trust, as mounted by mount()."""
    return [f"--root-certificates={TLS_DIR}/{CA_FILE}"]


def mount() -> dict[str, Any]:
    """The TLS volume's mount, read-only, in the SuperLink or SuperNode container."""
    return {"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True}


def ca_mount() -> dict[str, Any]:
    """The CA-only volume's mount in the SuperLink's pod, where mount() would put the whole Secret."""
    return {"name": CA_VOLUME, "mountPath": TLS_DIR, "readOnly": True}


def superlink_volume(federation: str, spec: FederationSpec) -> dict[str, Any]:
    """The SuperLink's whole TLS Secret as its TLS volume: for the SuperLink container alone."""
    return {"name": TLS_VOLUME, "secret": {"secretName": secret_name(federation, spec), "defaultMode": 0o440}}


def superlink_ca_volume(federation: str, spec: FederationSpec) -> dict[str, Any]:
    """Only the CA certificate of the SuperLink's Secret, for the other containers of its pod."""
    return pool_volume(secret_name(federation, spec), CA_FILE, name=CA_VOLUME)


def pool_volume(secret: str, key: str, *, name: str = TLS_VOLUME) -> dict[str, Any]:
    """Only the CA certificate of secret, as ca.crt."""
    return {
        "name": name,
        "secret": {"secretName": secret, "items": [{"key": key, "path": CA_FILE}], "defaultMode": 0o440},
    }


def certificate_name(federation: str) -> str:
    """The cert-manager Certificate of the SuperLink's TLS Secret."""
    return f"{names.superlink(federation)}-tls"


def certificate(fed: Federation, external: str | None) -> dict[str, Any]:
    """A cert-manager Certificate for the SuperLink Service, its loopback and its external address if any.

    The loopback (localhost, 127.0.0.1) is where users reach the Control API,
    through `kubectl port-forward` to the SuperLink's pod, and where the pod's
    own SuperExec dials it over this TLS (Flower 1.37 and later).
    """
    federation, namespace, spec = fed.name, fed.namespace, fed.spec
    cert_manager = _tls(spec).certManager
    if cert_manager is None:
        msg = "spec.tls.certManager is not set"
        raise ValueError(msg)
    service = names.superlink(federation)
    dns = [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    dns.append("localhost")
    ips = ["127.0.0.1"]
    if external:
        host = (
            external.rsplit(":", 1)[0].strip("[]")
            if not external.startswith("[")
            else external[1 : external.index("]")]
        )
        try:
            ips.append(str(ipaddress.ip_address(host)))
        except ValueError:
            dns.append(host)
    issuer = cert_manager.issuerRef
    cert_spec: dict[str, Any] = {
        "secretName": secret_name(federation, spec),
        "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
        "commonName": f"{service}.{namespace}.svc",
        "dnsNames": dns,
        "usages": ["server auth", "digital signature", "key encipherment"],
    }
    if ips:
        cert_spec["ipAddresses"] = ips
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {
            "name": certificate_name(federation),
            "namespace": namespace,
            "labels": names.superlink_labels(federation),
        },
        "spec": cert_spec,
    }


def ca_from_secret(secret: Any) -> str | None:
    """The CA certificate (base64, as in a Secret) of the SuperLink's Secret: ca.crt, else tls.crt."""
    data = secret.get("data") if isinstance(secret, dict) else None
    if not isinstance(data, dict):
        return None
    for key in ("ca.crt", "tls.crt"):
        value = data.get(key)
        if isinstance(value, str) and value:
            try:
                base64.b64decode(value, validate=True)
            except ValueError:
                return None
            return value
    return None


def ca_secret(federation: str, namespace: str, ca: str) -> dict[str, Any]:
    """The Secret named ca_secret_name(), holding ca (base64) as ca.crt."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": ca_secret_name(federation),
            "namespace": namespace,
            "labels": names.superlink_labels(federation),
        },
        "data": {CA_FILE: ca},
    }
