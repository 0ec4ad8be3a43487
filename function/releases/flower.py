"""What differs between Flower releases: one row per release where something the function writes changes.

Every builder asks the dialect of the release it writes for (the SuperLink's,
or a pool's own) and never compares version numbers itself, so a new Flower
release is one new row here. The facts come from each release's command-line
help and from runs of the real processes: tests/releases/test_flower_cli.py parses every
rendered argument with that release's own parser, and tests/real/test_real_flower.py
runs rendered Federations as real processes.

The ports stay where the flower-operator put them, whatever the release, so
the Service, its users' Flower configs and the remote pools' addresses do not
move when a Federation is upgraded: the Fleet API on 9092, the Control API on
9093 (the port `flwr` talks to), the SuperLink's app-facing API (ServerAppIO,
then Runtime) on 9091 and the SuperNode's (ClientAppIO, then Runtime) on 9094.
From 1.37 the Control API is served over HTTP on the SuperLink's one HTTP
listener, so that listener takes 9093; from 1.40 the Fleet API joins it and
the Service's Fleet port leads there too.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Literal

# Flower's ports, where the flower-operator put them (see above).
FLEET_PORT = 9092
SERVERAPPIO_PORT = 9091
CONTROL_PORT = 9093
CLIENTAPPIO_PORT = 9094
# From Flower 1.40 the Fleet API shares the SuperLink's one HTTP listener with
# the Control and Runtime APIs, so that listener stays on the pod's loopback
# and an L7 proxy in the pod serves the Fleet API alone on this port.
FLEET_PROXY_PORT = 9099

API = Literal["grpc", "http"]
LOOPBACK = "127.0.0.1"
# Flower's SimulationIO API, apart from ServerAppIO until 1.28.
SIMULATIONIO_PORT = 9096
ALLOW_DEPENDENCIES = "--allow-runtime-dependency-installation"
# The images a Federation that names only spec.version runs, tagged with that release.
IMAGES = {"superlink": "flwr/superlink", "supernode": "flwr/supernode", "superexec": "flwr/superexec"}


@dataclasses.dataclass(frozen=True, order=True)
class Release:
    """A Flower release, as its image tags name it (`1.41.0`, `1.41.0-py3.11-ubuntu24.04`)."""

    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> Release | None:
        """The release a version or image tag names, or None when it names none."""
        # ASCII digits (\d would take any script's), as the XRD's rule on spec.version reads them.
        match = re.fullmatch(r"v?([0-9]+)\.([0-9]+)(?:\.([0-9]+))?(?:[-+][0-9A-Za-z.\-]*)?", text)
        if match is None:
            return None
        major, minor, patch = match.groups()
        return cls(int(major), int(minor), int(patch or 0))

    def __str__(self) -> str:
        """As Flower writes it."""
        return f"{self.major}.{self.minor}.{self.patch}"


def image_tag(image: str) -> str | None:
    """An image reference's tag, or None (`flwr/superlink`, a digest alone, a registry port)."""
    repository, _, tag = image.split("@", 1)[0].rpartition(":")
    return tag if repository and "/" not in tag else None


def release_of_image(image: str) -> Release | None:
    """The release an image's tag names (`flwr/superlink:1.41.0-py3.11`), or None (no tag, `latest`, a digest)."""
    tag = image_tag(image)
    return Release.parse(tag) if tag is not None else None


@dataclasses.dataclass(frozen=True)
class Dialect:
    """How the releases from `since` on are started and reached."""

    since: Release
    # The SuperLink's APIs: gRPC each on its own address, or HTTP on the one
    # --host/--port listener (Runtime 1.35, Control 1.37, Fleet 1.40).
    runtime_api: API
    control_api: API
    fleet_api: API
    # The SimulationIO API, on its own address until 1.28 merges it into ServerAppIO.
    simulationio_api: bool
    # The SuperNode's app-facing API: ClientAppIO over gRPC, or Runtime over
    # HTTP on its own --host/--port (1.35).
    supernode_runtime_api: API
    # SuperLink --storage-dir (gone in 1.29: state lives in --database alone).
    storage_dir: bool
    # --superexec-auth-secret-file on SuperLink, SuperNode and SuperExec (1.29).
    superexec_auth: bool
    # Installing an app's dependencies at run time: absent, off unless
    # --allow-runtime-dependency-installation (1.29), or on in the SuperLink
    # unless --disable-runtime-dependency-installation (1.32).
    dependency_install: Literal["absent", "opt-in", "opt-out"]
    # The SuperExec's flag for the API it dials (renamed in 1.36) and whether
    # it needs --plugin-type (ignored with a warning from 1.38).
    superexec_api_flag: str
    superexec_plugin_type: bool
    # GET /health on the HTTP listeners (1.35).
    http_health: bool
    # Where `flwr` reads a SuperLink's address: a Flower app's pyproject.toml
    # ([tool.flwr.federations]) or $FLWR_HOME/config.toml ([superlink.NAME], 1.26).
    cli_config: Literal["pyproject", "config-toml"]
    # Whether the SuperLink pod's runner can start, follow and stop FederationRuns with the
    # release's CLI (function/programs/run_program.py): from 1.26, whose CLI reads the connection
    # from $FLWR_HOME/config.toml; before, from the app's own pyproject.toml, which is the user's.
    runs: bool

    def superlink_listen_args(self, *, control_open: bool) -> list[str]:
        """Where the SuperLink's listeners bind: the Fleet API and health on every address, the rest on the loopback.

        Open-source Flower authenticates no caller of the Control or Runtime
        API, so they listen on the pod's loopback, where only the pod's own
        containers and `kubectl port-forward` reach them; control_open puts the
        Control API (and the listener it shares) on every address instead. The
        gRPC Fleet API keeps its default, the operator's port on every address.
        From 1.40 the one HTTP listener serves Fleet too, and the pod's Fleet
        API proxy (function/builders/fleet_proxy.py) passes only Fleet and health to it.
        """
        anywhere = "0.0.0.0"  # noqa: S104 - the pod's address, for the APIs other pods reach
        args = []
        if self.control_api == "grpc":
            args.append(f"--control-api-address={anywhere if control_open else LOOPBACK}:{CONTROL_PORT}")
        if self.runtime_api == "grpc":
            args.append(f"--serverappio-api-address={LOOPBACK}:{SERVERAPPIO_PORT}")
        if self.simulationio_api:
            args.append(f"--simulationio-api-address={LOOPBACK}:{SIMULATIONIO_PORT}")
        if self.runtime_api == "http":
            host = anywhere if control_open and self.control_api == "http" else LOOPBACK
            args += [f"--host={host}", f"--port={self.runtime_port}"]
        return args

    @property
    def runtime_port(self) -> int:
        """The SuperLink port its SuperExec dials: ServerAppIO, the HTTP listener from 1.35 (9093 with Control)."""
        return CONTROL_PORT if self.control_api == "http" else SERVERAPPIO_PORT

    @property
    def fleet_port(self) -> int:
        """The SuperLink pod's port SuperNodes reach, behind the Service's Fleet port: from 1.40 its proxy's."""
        return FLEET_PROXY_PORT if self.fleet_api == "http" else FLEET_PORT

    @property
    def runtime_tls(self) -> bool:
        """Whether the SuperLink's TLS flags also cover the API its SuperExec dials (1.37)."""
        return self.control_api == "http"

    def superlink_dependency_args(self, *, allow: bool) -> list[str]:
        """The SuperLink's word on installing dependencies, for the SuperExec it spawns in subprocess mode."""
        if self.dependency_install == "opt-out" and not allow:
            # Installing needs a package index and a writable environment,
            # which the restricted pods and NetworkPolicies deny unless asked.
            return ["--disable-runtime-dependency-installation"]
        if self.dependency_install == "opt-in" and allow:
            return [ALLOW_DEPENDENCIES]
        return []

    def dependency_args(self, *, allow: bool) -> list[str]:
        """A SuperNode's or SuperExec's: off unless allowed, in every release that has the flag."""
        return [ALLOW_DEPENDENCIES] if allow and self.dependency_install != "absent" else []

    def superexec_args(self, plugin: Literal["serverapp", "clientapp"], port: int) -> list[str]:
        """How a SuperExec sidecar reaches the API of its pod's SuperLink or SuperNode."""
        plugin_type = [f"--plugin-type={plugin}"] if self.superexec_plugin_type else []
        return [*plugin_type, f"{self.superexec_api_flag}=localhost:{port}"]


# 1.24 takes 1.25's command lines: the flower-operator's mixed-release example
# runs a 1.24 pool beside a 1.25 SuperLink.
OLDEST = Release(1, 24)
NEWEST = Release(1, 42)

_1_24 = Dialect(
    since=OLDEST,
    runtime_api="grpc",
    control_api="grpc",
    fleet_api="grpc",
    simulationio_api=True,
    supernode_runtime_api="grpc",
    storage_dir=True,
    superexec_auth=False,
    dependency_install="absent",
    superexec_api_flag="--appio-api-address",
    superexec_plugin_type=True,
    http_health=False,
    cli_config="pyproject",
    runs=False,
)
_1_26 = dataclasses.replace(_1_24, since=Release(1, 26), cli_config="config-toml", runs=True)
_1_28 = dataclasses.replace(_1_26, since=Release(1, 28), simulationio_api=False)
_1_29 = dataclasses.replace(
    _1_28, since=Release(1, 29), storage_dir=False, superexec_auth=True, dependency_install="opt-in"
)
_1_32 = dataclasses.replace(_1_29, since=Release(1, 32), dependency_install="opt-out")
_1_35 = dataclasses.replace(
    _1_32, since=Release(1, 35), runtime_api="http", supernode_runtime_api="http", http_health=True
)
_1_36 = dataclasses.replace(_1_35, since=Release(1, 36), superexec_api_flag="--runtime-api-address")
_1_37 = dataclasses.replace(_1_36, since=Release(1, 37), control_api="http")
_1_38 = dataclasses.replace(_1_37, since=Release(1, 38), superexec_plugin_type=False)
_1_40 = dataclasses.replace(_1_38, since=Release(1, 40), fleet_api="http")

DIALECTS = (_1_24, _1_26, _1_28, _1_29, _1_32, _1_35, _1_36, _1_37, _1_38, _1_40)
# The first release FederationRuns work with (Dialect.runs).
RUNS_SINCE = next(d.since for d in DIALECTS if d.runs)


# Not a content cache (function/caching.py): a handful of releases run at once, and a cache
# bounded by them never fills.
@functools.lru_cache(maxsize=64)
def dialect(release: Release) -> Dialect:
    """The dialect of a supported release: the last row at or before it (the newest for newer releases).

    Looked up once per release: a call asks about six times per pool.
    """
    if not supported(release):
        msg = f"Flower {release} is not supported"
        raise ValueError(msg)
    return next(d for d in reversed(DIALECTS) if d.since <= release)


def supported(release: Release) -> bool:
    """Releases from OLDEST on, of its major version: newer minors get the newest dialect and a warning."""
    return release >= OLDEST and release.major == OLDEST.major


def newer_than_known(release: Release) -> bool:
    """Whether release is past the newest one the table was checked against."""
    return (release.major, release.minor) > (NEWEST.major, NEWEST.minor)


@dataclasses.dataclass(frozen=True)
class Releases:
    """The Flower release of the SuperLink and of each pool, and what to warn about them."""

    superlink: Release
    pools: dict[str, Release]
    warnings: tuple[str, ...] = ()
    # The release spec.version names, parsed once (None without spec.version): the default images' tag.
    version: Release | None = None

    @property
    def superlink_dialect(self) -> Dialect:
        """How the SuperLink and its SuperExec are started."""
        return dialect(self.superlink)

    def pool_dialect(self, pool: str) -> Dialect:
        """How a pool's SuperNodes and SuperExecs are started."""
        return dialect(self.pools[pool])

    @property
    def legacy_fleet(self) -> bool:
        """Whether an HTTP-Fleet SuperLink (1.40+) also serves the gRPC Fleet API for older pools.

        Flower 1.40+ keeps that server, off unless FLWR_INTERNAL_GRPC_FLEET_API=1,
        as a compatibility adapter while SuperNodes move to HTTP; 1.25 and 1.39
        SuperNodes join through it, beside HTTP ones (tests/real/test_real_flower.py).
        It then holds the Service's Fleet port, where the old SuperNodes have
        always dialled, and HTTP SuperNodes dial the Service's `fleet-http`
        port, which leads to the pod's Fleet API proxy.
        """
        return self.superlink_dialect.fleet_api == "http" and any(
            dialect(release).fleet_api == "grpc" for release in self.pools.values()
        )

    @property
    def fleet_target(self) -> int:
        """The SuperLink container port behind the Service's Fleet port."""
        return FLEET_PORT if self.legacy_fleet else self.superlink_dialect.fleet_port

    @property
    def fleet_ports(self) -> tuple[int, ...]:
        """The SuperLink container ports SuperNodes dial (the NetworkPolicies admit them)."""
        if self.legacy_fleet:
            return (FLEET_PORT, self.superlink_dialect.fleet_port)
        return (self.superlink_dialect.fleet_port,)

    def dials_proxy_port(self, pool: str) -> bool:
        """Whether a pool dials the Fleet API at the Service's `fleet-http` port: an HTTP pool beside the adapter."""
        return self.legacy_fleet and self.pool_dialect(pool).fleet_api == "http"


# The releases this function runs, as every message about them says it: a newer minor of the
# same major runs with the newest dialect and a warning (supported, newer_than_known).
SUPPORTED = (
    f"{OLDEST.major}.{OLDEST.minor} and later (tested {OLDEST.major}.{OLDEST.minor} to "
    f"{NEWEST.major}.{NEWEST.minor}; a newer release is accepted with a warning)"
)


def _at_least(n: int) -> str:
    """A regular expression alternation of the decimal numbers from n up, leading zeros aside."""
    digits = str(n)
    width = len(digits)
    out = [digits]
    for i, digit in enumerate(digits):
        if digit != "9":
            left = width - i - 1
            rest = "" if left == 0 else "[0-9]" if left == 1 else f"[0-9]{{{left}}}"
            out.append(f"{digits[:i]}[{int(digit) + 1}-9]{rest}")
    out.append(f"[1-9][0-9]{{{width},}}")
    return "|".join(out)


# What Release.parse reads and supported admits, as one regular expression (RE2's syntax and
# Python's): the XRD's CEL rule on spec.version (function/api/rules.py).
SUPPORTED_PATTERN = f"^v?0*{OLDEST.major}[.]0*({_at_least(OLDEST.minor)})([.][0-9]+)?([-+][0-9A-Za-z.-]*)?$"
