"""Which Flower release each part of a Federation runs, as its spec says, and the images named from it.

The per-release facts are the table in function/releases/flower.py; this
reads a spec against it. What cannot run is refused in function/api/refusals.py.
"""

from __future__ import annotations

import dataclasses

from function.api.spec import FederationSpec
from function.releases.flower import IMAGES, NEWEST, Release, Releases, dialect, image_tag, newer_than_known, supported


@dataclasses.dataclass(frozen=True)
class Written:
    """The releases a spec names: the SuperLink's (None when nothing tells it) and each pool's."""

    superlink: Release | None
    pools: dict[str, Release]
    # (field, text) of each version or image tag that names a release this function does not support.
    unsupported: list[tuple[str, str]]
    # The release spec.version names, when it names a supported one.
    version: Release | None = None


def _named(text: str, field: str, unsupported: list[tuple[str, str]]) -> Release | None:
    release = Release.parse(text)
    if release is None or not supported(release):
        unsupported.append((field, text))
        return None
    return release


def _image_release(image: str | None, field: str, unsupported: list[tuple[str, str]]) -> Release | None:
    """The release an image's tag names; None, and nothing unsupported, when the tag names none (`latest`, a digest)."""
    tag = image_tag(image) if image is not None else None
    if tag is None or Release.parse(tag) is None:
        return None
    return _named(tag, field, unsupported)


def written(spec: FederationSpec) -> Written:
    """The release each part runs: its image's tag, else spec.version (the SuperLink's, for pools)."""
    unsupported: list[tuple[str, str]] = []
    version = _named(spec.version, "spec.version", unsupported) if spec.version else None
    superlink = _image_release(spec.superlink.image, "spec.superlink.image", unsupported) or version
    default = _image_release(spec.supernodes.image, "spec.supernodes.image", unsupported) or version or superlink
    pools: dict[str, Release] = {}
    for i, pool in enumerate(spec.supernodes.pools):
        field = f"spec.supernodes.pools[{i}].images.supernode"
        release = _image_release(pool.images.supernode, field, unsupported) or default
        if release is not None:
            pools[pool.name] = release
    return Written(superlink, pools, unsupported, version)


def releases(superlink: Release, pools: dict[str, Release], version: Release | None = None) -> Releases:
    """The releases the Federation runs, with what the user should know about them; version: spec.version's."""
    return Releases(superlink, pools, tuple(_warnings(superlink, pools)), version)


def with_default_images(spec: FederationSpec, releases: Releases) -> FederationSpec:
    """The spec with every unset image named from spec.version: flwr/superlink, flwr/supernode, flwr/superexec.

    A part runs spec.version's release unless its image names another; a
    defaulted image is tagged with the release of the part it serves: the
    text of spec.version where that is the release (so `1.41.0-py3.11` keeps
    its variant), else the release as Flower writes it (`1.35.0`). Without
    spec.version every image is the user's (the rules require them).
    """
    if not spec.version:
        return spec
    named = releases.version  # spec.version, as written() read it

    def image(part: str, release: Release) -> str:
        return f"{IMAGES[part]}:{spec.version if release == named else release}"

    process = spec.isolationMode == "process"
    link = spec.superlink
    superlink = link.model_copy(
        update={
            "image": link.image or image("superlink", releases.superlink),
            "superexecImage": link.superexecImage or (image("superexec", releases.superlink) if process else None),
        }
    )
    pools = [
        pool.model_copy(
            update={
                "images": pool.images.model_copy(
                    update={
                        "superexecClientApp": pool.images.superexecClientApp
                        or (image("superexec", releases.pools[pool.name]) if process else None)
                    }
                )
            }
        )
        for pool in spec.supernodes.pools
    ]
    supernodes = spec.supernodes.model_copy(
        update={"image": spec.supernodes.image or image("supernode", named or releases.superlink), "pools": pools}
    )
    return spec.model_copy(update={"superlink": superlink, "supernodes": supernodes})


def _warnings(superlink: Release, pools: dict[str, Release]) -> list[str]:
    warnings = [
        f"Flower {release} is newer than {NEWEST.major}.{NEWEST.minor}, the newest release this function is tested "
        f"with: it writes {NEWEST.major}.{NEWEST.minor}'s command lines"
        for release in sorted({superlink, *pools.values()})
        if newer_than_known(release)
    ]
    for name, release in sorted(pools.items()):
        if dialect(release).fleet_api != dialect(superlink).fleet_api:
            warnings.append(
                f"pool {name} runs Flower {release}, the SuperLink {superlink}: the SuperLink serves it "
                "through Flower's internal gRPC Fleet adapter (FLWR_INTERNAL_GRPC_FLEET_API), meant for the "
                "move to 1.40; upgrade the pool"
            )
        elif release != superlink:
            warnings.append(f"pool {name} runs Flower {release}, the SuperLink {superlink}")
    return warnings


@dataclasses.dataclass(frozen=True)
class Images:
    """The image every part runs, as the front door promises the builders: none is missing.

    supernodes: (pool name, image) for every pool of the spec, in its order.
    """

    superlink: str
    supernodes: tuple[tuple[str, str], ...]

    def supernode(self, pool: str) -> str:
        """The SuperNode image of a pool of the spec."""
        return dict(self.supernodes)[pool]
