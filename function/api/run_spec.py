"""A FederationRun: one Flower run on a Federation, asked for as a Kubernetes object.

The XRDs in apis/ (federationrun-definition.yaml, and v2/) are generated from
these models (hack/gen_xrd.py), as the Federation's are from function/api/spec.py.

A run names its Federation (in its own namespace: a run cannot reach another
namespace's SuperLink), the Flower app to run (a bundle in a ConfigMap, or an
image holding the app's directory) and the run's config. The
function hands it to the Federation's runner, a sidecar of the SuperLink pod
and the Control API's only client (function/programs/run_program.py); what
Flower records of the run comes back as the run's status. A run is a one-time
request: its fields cannot change once it exists (delete it and apply another).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from function.api.spec import (
    DNS_LABEL_PATTERN,
    MAX_NODE_CONFIG_KEYS,
    MAX_NODE_CONFIG_VALUE,
    NO_SPACE,
    NODE_CONFIG,
    Image,
    Model,
    NodeConfigField,
)

# Kubernetes ConfigMap keys: letters, digits, '-', '_' and '.'.
CONFIGMAP_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
DEFAULT_APP_KEY = "app.fab"
# A ConfigMap holds at most 1 MiB; the FAB travels through the function's answer and the runs' ConfigMap.
MAX_FAB_BYTES = 512 * 1024
# Transition rules: the field, once set, keeps its value.
IMMUTABLE: list[JsonValue] = [
    {"rule": "self == oldSelf", "message": "a run cannot change: delete it and apply a new one"}
]
# Where images built FROM flwr/superexec (or flwr/base) keep their app: their WORKDIR.
DEFAULT_APP_PATH = "/app"
ONE_SOURCE = "give exactly one of configMap and image"
ONE_SOURCE_RULE: JsonValue = {"rule": "has(self.configMap) != has(self.image)", "message": ONE_SOURCE}
Phase = Literal["Pending", "Running", "Completed", "Failed", "Stopped"]
PHASES: tuple[Phase, ...] = ("Pending", "Running", "Completed", "Failed", "Stopped")
FINISHED: tuple[Phase, ...] = ("Completed", "Failed", "Stopped")


class AppConfigMap(Model):
    name: str = Field(
        min_length=1, max_length=253, description="A ConfigMap in the run's namespace that holds the app's FAB."
    )
    key: str = Field(
        default=DEFAULT_APP_KEY,
        min_length=1,
        max_length=253,
        pattern=CONFIGMAP_KEY_PATTERN,
        description="Its binaryData key holding the Flower App Bundle (`flwr build`).",
    )


class AppImage(Model):
    reference: Image = Field(
        max_length=512,
        description=(
            "The image holding the app's directory: the one a team builds FROM flwr/superexec for process "
            "isolation (it has Python and the flwr CLI). The platform's policy (runImages) names the "
            "registries a run may use."
        ),
    )
    path: str = Field(
        default=DEFAULT_APP_PATH,
        max_length=1024,
        pattern=f"^/{NO_SPACE}*$",
        description="The app's directory in the image, where its pyproject.toml is.",
    )


class RunApp(Model):
    configMap: AppConfigMap | None = Field(
        default=None,
        description=(
            "A Flower App Bundle (the .fab `flwr build` makes) in a ConfigMap: "
            "`kubectl create configmap NAME --from-file=app.fab=...`. Up to 512 KiB."
        ),
    )
    image: AppImage | None = Field(
        default=None,
        description=(
            "An OCI image holding the app's directory: a Job beside the SuperLink bundles it with the "
            "image's own `flwr build` (up to 512 KiB) and hands it to the runner."
        ),
    )


class FederationRunSpec(Model):
    federation: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description="The Federation to run on, in the run's own namespace.",
        json_schema_extra={"x-kubernetes-validations": IMMUTABLE},
    )
    app: RunApp = Field(
        description="Where the Flower app comes from: configMap or image.",
        json_schema_extra={"x-kubernetes-validations": [*IMMUTABLE, ONE_SOURCE_RULE]},
    )
    runConfig: dict[str, NodeConfigField] = Field(
        default_factory=dict,
        max_length=MAX_NODE_CONFIG_KEYS,
        description=(
            "Overrides of the app's [tool.flwr.app.config], as `flwr run --run-config`. "
            "Values are strings; numbers and true/false become typed values."
        ),
        json_schema_extra={NODE_CONFIG: MAX_NODE_CONFIG_VALUE, "x-kubernetes-validations": IMMUTABLE},
    )
    deadlineSeconds: int | None = Field(
        default=None,
        ge=1,
        le=30 * 24 * 3600,
        description="Stop the run, and call it Failed, once it has run this long.",
        json_schema_extra={"x-kubernetes-validations": IMMUTABLE},
    )
