"""The bundler: a Job's one container, in a run's app image, that builds the app's Flower App Bundle (mode bundle).

A FederationRun whose app is an image (one a team builds FROM flwr/superexec,
holding the app's directory, Python and the `flwr` CLI) gets a Job beside the
SuperLink running this program in that image, and an empty ConfigMap of the
Job's name. The program builds the app with the image's own `flwr build` and
writes the outcome into that ConfigMap, which the runner
(function/programs/run_program.py) reads back: the bundle under
binaryData[--key], or, when there is none to make, one line saying why under
data["error"] (flwr_control.BUNDLE_ERROR_KEY), in Flower's words where Flower
said it.

Why there is no bundle is the Job's result, not its failure (exit 0): the
image would fail the same way again. It exits non-zero only when it could not
write the ConfigMap (no API, refused), so that the Job tries again. Its
work directory (an emptyDir) is its HOME too: the image's root filesystem is
read-only, and `flwr build` writes nowhere else.

Standard library only (it runs in the app's image, whose Python may be 3.10).
"""

from __future__ import annotations

import argparse
import base64
import os
import pathlib
import re
import shutil
import sys

from function.programs.flwr_control import (
    BUNDLE_ERROR_KEY,
    BUNDLE_KEY,
    MAX_FAB_BYTES,
    KubeApi,
    killed,
    load_entry_point,
    one_line,
    patch_configmap,
    run_forked,
    run_subprocess,
)

# How long `flwr build` may take before it is killed (an app of many files on a busy node).
BUILD_TIMEOUT = 300.0
# The directory under --work that `flwr build` runs in: emptied first, so the one bundle there is this build's
# (an emptyDir outlives a container that the Job starts again in the same pod).
BUILD_DIR = "build"
# The boxes Flower's CLI draws around its errors (rich's box-drawing characters), taken out of a message.
BOX = re.compile("[\u2500-\u257f]")
# Wide enough that the CLI does not fold a long path of its message over two lines.
COLUMNS = "200"


def flower_words(stdout: str, stderr: str) -> str:
    """What Flower's CLI said when it failed, as one bounded line: its boxes and their title taken out."""
    said = " ".join(BOX.sub(" ", f"{stderr}\n{stdout}").split())
    return one_line(said.removeprefix("Error ").strip())


def not_an_app(app: pathlib.Path) -> str:
    """Why the image's directory is no Flower app to build, before Flower is asked; empty when it may be one."""
    if not app.is_dir():
        return f"{app} is not a directory in the image (the app's directory, --app)"
    if not (app / "pyproject.toml").is_file():
        return f"{app} has no pyproject.toml: not a Flower app's directory"
    return ""


def build(app: pathlib.Path, work: pathlib.Path) -> tuple[bytes | None, str]:
    """The app's bundle as the image's `flwr build` makes it: (its bytes, its file's name), or (None, why not)."""
    if why := not_an_app(app):
        return None, why
    into = work / BUILD_DIR
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    argv = ["flwr", "build", "--app", str(app)]
    print(f"building the app in {app}: {' '.join(argv)} (in {into})", flush=True)
    env = {**os.environ, "HOME": str(work), "NO_COLOR": "1", "COLUMNS": COLUMNS}
    entry = load_entry_point("flwr")
    if entry is False:
        ran = run_subprocess(argv, into, env, BUILD_TIMEOUT)
    else:
        ran = run_forked(entry, argv, into, env, BUILD_TIMEOUT)
    code, stdout, stderr = ran
    if code is None:
        return None, one_line(killed(f"flwr build did not finish within {BUILD_TIMEOUT:.0f} s", ran))
    if code != 0:
        return None, one_line(f"flwr build failed: {flower_words(stdout, stderr) or f'exit {code}'}")
    made = sorted(into.glob("*.fab"))
    if len(made) != 1:
        return None, f"flwr build made {len(made)} bundles, not one: {', '.join(p.name for p in made) or 'none'}"
    fab = made[0].read_bytes()
    if len(fab) > MAX_FAB_BYTES:
        return None, f"the app's bundle is {len(fab)} bytes; a run's may have at most {MAX_FAB_BYTES}"
    return fab, made[0].name


def bundle(api: KubeApi | None, args: argparse.Namespace) -> int:
    """Mode bundle: build the app, write its bundle or why there is none into the ConfigMap; the exit code."""
    namespace = os.environ.get("POD_NAMESPACE", "")
    where = f"ConfigMap {namespace}/{args.configmap}"
    if api is None or not namespace:
        missing = "POD_NAMESPACE" if api is not None else "KUBERNETES_SERVICE_HOST, --kube-credentials or the token"
        print(f"no Kubernetes API in reach ({missing} missing): nothing built, {where} not written", flush=True)
        return 1
    work = pathlib.Path(args.work).absolute()
    work.mkdir(parents=True, exist_ok=True)
    # Absolute: `flwr build` runs in the work directory, where a relative --app would name another place.
    fab, said = build(pathlib.Path(args.app).absolute(), work)
    if fab is None:
        print(f"not bundled: {said}", flush=True)
        done, why = patch_configmap(api, namespace, args.configmap, {BUNDLE_ERROR_KEY: said})
        written = f"wrote why to {where} (data.{BUNDLE_ERROR_KEY})"
    else:
        print(f"built {said}: {len(fab)} bytes", flush=True)
        encoded = {args.key: base64.b64encode(fab).decode()}
        done, why = patch_configmap(api, namespace, args.configmap, encoded, field="binaryData")
        written = f"wrote the bundle to {where} (binaryData.{args.key})"
    print(written if done else f"cannot write {where}: {why}", flush=True)
    return 0 if done else 1


def main(argv: list[str]) -> int:
    """Run the bundler (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="flower-bundler")
    parser.add_argument("mode", choices=["bundle"])
    parser.add_argument("--app", default="/app", help="the app's directory in the image")
    parser.add_argument("--configmap", required=True, help="the ConfigMap of the pod's namespace it writes")
    parser.add_argument("--key", default=BUNDLE_KEY, help="the ConfigMap's key of the bundle")
    parser.add_argument("--work", required=True, help="a writable directory of this container's own (its HOME too)")
    parser.add_argument("--kube-credentials", help="the projected ServiceAccount token and cluster CA")
    args = parser.parse_args(argv)
    api = KubeApi.from_environment(pathlib.Path(args.kube_credentials)) if args.kube_credentials else None
    return bundle(api, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
