"""The table of Flower releases: which release a Federation runs, and each release's dialect."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from function import caching
from function.api import refusals, versions
from function.api.refusals import SpecError
from function.api.spec import FederationSpec
from function.releases import flower
from function.releases.flower import Release
from function.serving import render
from support.helpers import spec


@dataclasses.dataclass(frozen=True)
class ParseCase:
    reason: str
    text: str
    want: Release | None


PARSE_CASES = [
    ParseCase("a plain release", "1.41.0", Release(1, 41, 0)),
    ParseCase("a patch release", "1.26.1", Release(1, 26, 1)),
    ParseCase("no patch: .0", "1.35", Release(1, 35, 0)),
    ParseCase("a variant tag of the image", "1.41.0-py3.11-ubuntu24.04", Release(1, 41, 0)),
    ParseCase("a leading v", "v1.29.0", Release(1, 29, 0)),
    ParseCase("latest names no release", "latest", None),
    ParseCase("a nightly names no release", "nightly", None),
    ParseCase("words after the release", "1.41.0 please", None),
]


@pytest.mark.parametrize("case", PARSE_CASES, ids=lambda c: c.reason)
def test_release_parse(case):
    assert Release.parse(case.text) == case.want


@pytest.mark.parametrize(
    ("reason", "image", "want"),
    [
        ("tag", "flwr/superlink:1.41.0", Release(1, 41, 0)),
        ("registry with a port", "registry.example.com:5000/flwr/superlink:1.35.0", Release(1, 35, 0)),
        ("registry with a port, no tag", "registry.example.com:5000/flwr/superlink", None),
        ("tag and digest", "flwr/superlink:1.29.0@sha256:" + "0" * 64, Release(1, 29, 0)),
        ("digest only", "flwr/superlink@sha256:" + "0" * 64, None),
        ("no tag", "flwr/superlink", None),
        ("latest", "flwr/superlink:latest", None),
    ],
)
def test_release_of_image(reason, image, want):
    assert flower.release_of_image(image) == want, reason


@pytest.mark.parametrize(
    ("reason", "release", "since"),
    [
        ("1.24 takes 1.25's command lines", Release(1, 24), Release(1, 24)),
        ("a release between rows takes the row before", Release(1, 27, 0), Release(1, 26)),
        ("a row's first release", Release(1, 35), Release(1, 35)),
        ("the newest known", Release(1, 41), Release(1, 40)),
        ("newer minors take the newest row", Release(1, 43, 2), Release(1, 40)),
    ],
)
def test_dialect_row(reason, release, since):
    assert flower.dialect(release).since == since, reason


def test_each_row_changes_something_and_rows_are_ordered():
    # A row that changes nothing would be a release table that lies about where
    # Flower changed; rows out of order would pick the wrong one.
    rows = flower.DIALECTS
    assert list(rows) == sorted(rows, key=lambda d: d.since)
    for before, after in itertools.pairwise(rows):
        changed = [
            f.name
            for f in dataclasses.fields(flower.Dialect)
            if f.name != "since" and getattr(before, f.name) != getattr(after, f.name)
        ]
        assert changed, f"row {after.since} repeats row {before.since}"


LOOP_CONTROL = "--control-api-address=127.0.0.1:9093"
LOOP_SERVERAPPIO = "--serverappio-api-address=127.0.0.1:9091"


@pytest.mark.parametrize(
    ("reason", "release", "control_open", "listen", "fleet_port", "runtime_port"),
    [
        ("gRPC everywhere: all but Fleet on the loopback", "1.25.0", False,
         [LOOP_CONTROL, LOOP_SERVERAPPIO, "--simulationio-api-address=127.0.0.1:9096"], 9092, 9091),
        ("SimulationIO merged into ServerAppIO", "1.28.0", False, [LOOP_CONTROL, LOOP_SERVERAPPIO], 9092, 9091),
        ("Control opened in the cluster", "1.29.0", True,
         ["--control-api-address=0.0.0.0:9093", LOOP_SERVERAPPIO], 9092, 9091),
        ("Runtime over HTTP, loopback for the sidecar", "1.35.0", False,
         [LOOP_CONTROL, "--host=127.0.0.1", "--port=9091"], 9092, 9091),
        ("opened Control is gRPC; the Runtime listener stays on the loopback", "1.36.0", True,
         ["--control-api-address=0.0.0.0:9093", "--host=127.0.0.1", "--port=9091"], 9092, 9091),
        ("Control joins the HTTP listener, on the loopback", "1.37.0", False, ["--host=127.0.0.1", "--port=9093"],
         9092, 9093),
        ("Control opened: the listener it shares on all addresses", "1.37.0", True,
         ["--host=0.0.0.0", "--port=9093"], 9092, 9093),
        ("Fleet too: one listener, behind the Fleet proxy", "1.41.0", False, ["--host=127.0.0.1", "--port=9093"],
         9099, 9093),
    ],
)  # fmt: skip
def test_superlink_listeners(reason, release, control_open, listen, fleet_port, runtime_port):
    d = flower.dialect(Release.parse(release))
    got = (d.superlink_listen_args(control_open=control_open), d.fleet_port, d.runtime_port)
    assert got == (listen, fleet_port, runtime_port), reason


@pytest.mark.parametrize(
    ("reason", "release", "want"),
    [
        ("1.25: plugin type, AppIO", "1.25.0", ["--plugin-type=clientapp", "--appio-api-address=localhost:9094"]),
        ("1.36 renames the flag", "1.36.0", ["--plugin-type=clientapp", "--runtime-api-address=localhost:9094"]),
        ("1.38 ignores the plugin type: not written", "1.38.0", ["--runtime-api-address=localhost:9094"]),
    ],
)  # fmt: skip
def test_superexec_args(reason, release, want):
    assert flower.dialect(Release.parse(release)).superexec_args("clientapp", 9094) == want, reason


@dataclasses.dataclass(frozen=True)
class ResolveCase:
    reason: str
    changes: dict[str, object]
    superlink: str | None = None
    pools: dict[str, str] = dataclasses.field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    error: str | None = None


RESOLVE_CASES = [
    ResolveCase("the images' tags", {}, "1.25.0", {"a": "1.25.0"}),
    ResolveCase(
        "a pool image of another release: a warning, its own release",
        {"supernodes__pools": [{"name": "a", "replicas": 1, "images": {"supernode": "flwr/supernode:1.24.0"}}]},
        "1.25.0",
        {"a": "1.24.0"},
        ("pool a runs Flower 1.24.0, the SuperLink 1.25.0",),
    ),
    ResolveCase(
        "untagged images take spec.version",
        {"version": "1.41.0", "superlink__image": "flwr/superlink", "supernodes__image": "flwr/supernode:latest"},
        "1.41.0",
        {"a": "1.41.0"},
    ),
    ResolveCase(
        "an image's tag wins over spec.version for what runs",
        {"version": "1.41.0", "superlink__image": "flwr/superlink:1.40.0", "supernodes__image": "flwr/supernode"},
        "1.40.0",
        {"a": "1.41.0"},
        ("pool a runs Flower 1.41.0, the SuperLink 1.40.0",),
    ),
    ResolveCase(
        "nothing names a release",
        {"superlink__image": "flwr/superlink", "supernodes__image": "flwr/supernode"},
        error="spec.version: cannot tell which Flower release runs",
    ),
    ResolveCase(
        "too old",
        {"version": "1.20.0", "superlink__image": "flwr/superlink", "supernodes__image": "flwr/supernode"},
        error="spec.version: Flower 1.20.0 is not a release this function supports: 1.24 and later (tested 1.24 "
        "to 1.42; a newer release is accepted with a warning)",
    ),
    ResolveCase(
        "another major version",
        {"superlink__image": "flwr/superlink:2.0.0"},
        error="spec.superlink.image: Flower 2.0.0 is not a release this function supports",
    ),
    ResolveCase(
        "newer than known: the newest dialect and a warning",
        {"superlink__image": "flwr/superlink:1.43.0", "supernodes__image": "flwr/supernode:1.43.0"},
        "1.43.0",
        {"a": "1.43.0"},
        (
            (
                "Flower 1.43.0 is newer than 1.42, the newest release this function is tested with: it writes 1.42's "
                "command lines"
            ),
        ),
    ),
    ResolveCase(
        "a pool before 1.40 joins a 1.40+ SuperLink through Flower's gRPC Fleet adapter, with a warning",
        {"superlink__image": "flwr/superlink:1.41.0", "supernodes__image": "flwr/supernode:1.39.0"},
        "1.41.0",
        {"a": "1.39.0"},
        (
            (
                "pool a runs Flower 1.39.0, the SuperLink 1.41.0: the SuperLink serves it through Flower's internal "
                "gRPC Fleet adapter (FLWR_INTERNAL_GRPC_FLEET_API), meant for the move to 1.40; upgrade the pool"
            ),
        ),
    ),
    ResolveCase(
        "a SuperLink before 1.40 has no HTTP Fleet API for a newer pool",
        {"superlink__image": "flwr/superlink:1.39.0", "supernodes__image": "flwr/supernode:1.40.0"},
        error="spec.supernodes.pools[0]: pool a runs Flower 1.40.0 and the SuperLink 1.39.0: a SuperLink before "
        "1.40 has no HTTP Fleet API",
    ),
    ResolveCase(
        "beside the adapter, an HTTP pool in another cluster has no address for the HTTP Fleet API",
        {
            "superlink__image": "flwr/superlink:1.41.0",
            "supernodes__image": "flwr/supernode:1.41.0",
            "supernodes__pools": [
                {"name": "a", "replicas": 1, "images": {"supernode": "flwr/supernode:1.39.0"}},
                {"name": "b", "replicas": 1, "providerConfigRef": {"name": "spoke"}},
            ],
        },
        error="spec.supernodes.pools[1]: pool b runs Flower 1.41.0 in another cluster while pools before 1.40 "
        "hold the SuperLink's Fleet port",
    ),
]


@pytest.mark.parametrize("case", RESOLVE_CASES, ids=lambda c: c.reason)
def test_resolve(case):
    base = {"supernodes__pools": [{"name": "a", "replicas": 1}]}
    federation = FederationSpec.model_validate(spec(**{**base, **case.changes}))
    if case.error is not None:
        with pytest.raises(SpecError) as err:
            refusals.releases(federation)
        assert str(err.value).startswith(case.error), case.reason
        return
    got = refusals.releases(federation)
    assert str(got.superlink) == case.superlink, case.reason
    assert {k: str(v) for k, v in got.pools.items()} == case.pools, case.reason
    assert got.warnings == case.warnings, case.reason


def test_caches_never_share_a_result_across_releases():
    # The same spec but for spec.version (untagged images): each release must
    # get its own command lines, warm caches or cold.
    def rendered(version):
        xr = {
            "apiVersion": "flower.crossplane.io/v1alpha1",
            "kind": "Federation",
            "metadata": {"name": "fed", "namespace": "default"},
            "spec": spec(
                version=version,
                isolationMode="process",
                superlink__image="flwr/superlink",
                superlink__superexecImage="flwr/superexec",
                supernodes__image="flwr/supernode",
                supernodes__pools=[{"name": "a", "replicas": 1, "images": {"superexecClientApp": "flwr/superexec"}}],
            ),
        }
        return render.render(xr, [])[0]

    caching.clear_caches()
    cold = {v: rendered(v) for v in ("1.25.0", "1.41.0")}
    warm = {v: rendered(v) for v in ("1.41.0", "1.25.0", "1.41.0")}
    assert cold["1.25.0"] != cold["1.41.0"]
    assert warm == cold
    args = [c["args"] for d in cold["1.41.0"][1:] for c in _containers(d)]
    assert any("--runtime-api-address=localhost:9093" in a for a in args), args


def _containers(doc):
    template = (doc["spec"]["forProvider"]["manifest"].get("spec") or {}).get("template")
    return template["spec"]["containers"] if template else []


@dataclasses.dataclass(frozen=True)
class ImagesCase:
    reason: str
    changes: dict[str, object]
    # superlink, superexecImage, supernodes.image, the pool's supernode and superexecClientApp images
    want: tuple[str | None, str | None, str | None, str | None, str | None]


VERSION_ONLY = {
    "mode": "StatefulSet",
    "version": "1.41.0",
    "isolationMode": "process",
    "superlink": {},
    "supernodes": {"pools": [{"name": "a", "replicas": 1}]},
}
IMAGES_CASES = [
    ImagesCase(
        "spec.version alone names every image",
        {},
        ("flwr/superlink:1.41.0", "flwr/superexec:1.41.0", "flwr/supernode:1.41.0", None, "flwr/superexec:1.41.0"),
    ),
    ImagesCase(
        "subprocess mode has no sidecar to name",
        {"isolationMode": "subprocess"},
        ("flwr/superlink:1.41.0", None, "flwr/supernode:1.41.0", None, None),
    ),
    ImagesCase(
        "the tag keeps the variant spec.version names",
        {"version": "1.41.0-py3.11-ubuntu24.04"},
        (
            "flwr/superlink:1.41.0-py3.11-ubuntu24.04",
            "flwr/superexec:1.41.0-py3.11-ubuntu24.04",
            "flwr/supernode:1.41.0-py3.11-ubuntu24.04",
            None,
            "flwr/superexec:1.41.0-py3.11-ubuntu24.04",
        ),
    ),
    ImagesCase(
        "a sidecar follows the release of the process it serves, not spec.version",
        {
            "superlink__image": "registry.example.com/superlink:1.40.0",
            "supernodes__pools": [{"name": "a", "replicas": 1, "images": {"supernode": "flwr/supernode:1.40.0"}}],
        },
        (
            "registry.example.com/superlink:1.40.0",
            "flwr/superexec:1.40.0",
            "flwr/supernode:1.41.0",
            "flwr/supernode:1.40.0",
            "flwr/superexec:1.40.0",
        ),
    ),
    ImagesCase(
        "the user's images win",
        {
            "superlink__superexecImage": "registry.example.com/serverapp:1",
            "supernodes__image": "registry.example.com/supernode:1.41.0",
        },
        (
            "flwr/superlink:1.41.0",
            "registry.example.com/serverapp:1",
            "registry.example.com/supernode:1.41.0",
            None,
            "flwr/superexec:1.41.0",
        ),
    ),
]


@pytest.mark.parametrize("case", IMAGES_CASES, ids=lambda c: c.reason)
def test_default_images(case):
    federation = FederationSpec.model_validate(spec(VERSION_ONLY, **case.changes))
    got = versions.with_default_images(federation, refusals.releases(federation))
    pool = got.supernodes.pools[0]
    assert (
        got.superlink.image,
        got.superlink.superexecImage,
        got.supernodes.image,
        pool.images.supernode,
        pool.images.superexecClientApp,
    ) == case.want, case.reason


def test_without_spec_version_no_image_is_invented():
    federation = FederationSpec.model_validate(spec(isolationMode="subprocess"))
    assert versions.with_default_images(federation, refusals.releases(federation)) is federation


@pytest.mark.parametrize(
    ("reason", "changes", "error"),
    [
        (
            "1.25 has no way to install an app's dependencies",
            {"version": "1.25.0"},
            (
                "spec.allowRuntimeDependencyInstallation: needs Flower 1.29 or newer, where apps can install their "
                "dependencies; the SuperLink runs 1.25.0, pool a runs 1.25.0"
            ),
        ),
        (
            "one old pool is enough to refuse",
            {
                "version": "1.35.0",
                "supernodes__pools": [{"name": "a", "replicas": 1, "images": {"supernode": "flwr/supernode:1.28.0"}}],
            },
            (
                "spec.allowRuntimeDependencyInstallation: needs Flower 1.29 or newer, where apps can install their "
                "dependencies; pool a runs 1.28.0"
            ),
        ),
        ("1.29 has the flag", {"version": "1.29.0"}, None),
    ],
)
def test_dependency_installation_needs_a_release_that_has_it(reason, changes, error):
    federation = FederationSpec.model_validate(
        spec(VERSION_ONLY, isolationMode="subprocess", allowRuntimeDependencyInstallation=True, **changes)
    )
    if error is None:
        refusals.releases(federation)
        return
    with pytest.raises(SpecError) as err:
        refusals.releases(federation)
    assert str(err.value) == error, reason


def test_release_warnings_reach_the_user():
    # Crossplane shows a function's warnings as events on the XR.
    xr = {
        "apiVersion": "flower.crossplane.io/v1alpha1",
        "kind": "Federation",
        "metadata": {"name": "fed", "namespace": "default"},
        "spec": spec(VERSION_ONLY, version="1.43.0", isolationMode="subprocess"),
    }
    _, warnings = render.render(xr, [])
    assert warnings == [
        (
            "Flower 1.43.0 is newer than 1.42, the newest release this function is tested with: it writes 1.42's "
            "command lines"
        )
    ]
