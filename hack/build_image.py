"""Build the function's runtime image without a container daemon.

The same layout as the Dockerfile (Debian 12's Python 3.11, the wheel and its
locked dependencies in a venv at /venv/fn, user nonroot, the function as
entrypoint), from parts this machine reaches: Debian's packages through
mmdebstrap, the project's wheel and PyPI's wheels pinned by requirements.lock.
The result is a `docker save` style archive, what `crossplane xpkg build
--embed-runtime-image-tarball` takes.

Needs root (mmdebstrap into a directory, chroot). Usage:
    python hack/build_image.py OUT.tar [--tag function-flower:VERSION]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from function.__version__ import __version__  # noqa: E402 - needs the sys.path set-up above

SUITE = "bookworm"  # Debian 12, as the Dockerfile's stages.
# Debian 12's Python and the C++ runtime grpcio needs, without a shell or a
# package manager's scripts: about what distroless python3-debian12 holds.
PACKAGES = ["python3-minimal", "libpython3.11-stdlib", "libstdc++6"]
VENV = "/venv/fn"
PYTHON = f"{VENV}/bin/python3"
# pip runs from its own wheel inside the image's root, so the scripts it
# writes point at the image's Python; it is not left in the image.
PIP = "pip==26.3"
# Where the wheels wait inside the image's root during the install (removed after).
BUILD = "/tmp/build"  # noqa: S108 - a folder of the image being built, seen through chroot
USER = "nonroot:nonroot"
NONROOT_ID = 65532  # distroless' nonroot
CONFIG = {
    "User": USER,
    "Entrypoint": [f"{VENV}/bin/function"],
    "WorkingDir": "/",
    "ExposedPorts": {"9443/tcp": {}},
    "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
}
ACCOUNTS = {
    "etc/passwd": f"root:x:0:0:root:/root:/sbin/nologin\n"
    f"nonroot:x:{NONROOT_ID}:{NONROOT_ID}:nonroot:/home/nonroot:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n",
    "etc/group": f"root:x:0:\nnonroot:x:{NONROOT_ID}:\nnobody:x:65534:\n",
}


# Long command lines here are wrapped by hand (`# fmt: skip`) so that each
# option stays beside its value; the formatter would put one word a line.
def run(*args: str | os.PathLike[str], env: dict[str, str] | None = None) -> None:
    """Run a command (echoed to stderr), env added to this process' environment; fail if it fails."""
    print("+", " ".join(str(a) for a in args), file=sys.stderr)
    subprocess.run([str(a) for a in args], check=True, env={**os.environ, **(env or {})})


def source_date_epoch() -> str:
    """The last commit's time, so the same tree builds the same files."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        return out or "0"
    except (OSError, subprocess.CalledProcessError):
        return "0"


def wheels(dest: pathlib.Path) -> None:
    """The project's wheel and every dependency's, at the locked versions."""
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", dest, ROOT)
    wheel = next(dest.glob("function_flower-*.whl"))
    run(sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", dest,
        "-c", ROOT / "requirements.lock", wheel)  # fmt: skip
    run(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", dest / "pip", PIP)


def rootfs(target: pathlib.Path, wheel_dir: pathlib.Path, epoch: str) -> None:
    """The image's files in target: Debian's packages, the venv with the wheels, the nonroot user."""
    if not shutil.which("mmdebstrap"):  # a Debian package, as the Dockerfile's base
        run("apt-get", "update", "-qq")
        run("apt-get", "install", "-y", "-qq", "--no-install-recommends", "mmdebstrap",
            env={"DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip
    run("mmdebstrap", "--quiet", "--variant=extract", f"--include={','.join(PACKAGES)}", SUITE, target,
        env={"SOURCE_DATE_EPOCH": epoch})  # fmt: skip
    run("chroot", target, "/usr/bin/python3", "-m", "venv", "--without-pip", VENV)
    build = target / BUILD.lstrip("/")
    shutil.copytree(wheel_dir, build)
    shutil.copy(ROOT / "requirements.lock", build / "requirements.lock")
    pip = next((build / "pip").glob("pip-*.whl")).name
    run("chroot", target, PYTHON, f"{BUILD}/pip/{pip}/pip", "install", "--quiet", "--no-index",
        "--no-cache-dir", "--disable-pip-version-check", "--find-links", BUILD,
        "-c", f"{BUILD}/requirements.lock", "function-flower")  # fmt: skip
    shutil.rmtree(build)
    for path, text in ACCOUNTS.items():
        (target / path).write_text(text)
    home = target / "home" / "nonroot"
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, NONROOT_ID, NONROOT_ID)
    # Caches a package manager would clean; they only make the image vary.
    for leftover in ["var/cache/apt", "var/lib/apt/lists", "var/log"]:
        shutil.rmtree(target / leftover, ignore_errors=True)


def layer(root: pathlib.Path, epoch: int) -> bytes:
    """The root filesystem as one tar layer: sorted, owners by number, times clamped."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted([*dirnames, *filenames]):
                path = pathlib.Path(dirpath) / name
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root)))
                info.mtime = min(int(info.mtime), epoch)
                info.uname = info.gname = ""
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return buf.getvalue()


def archive(layer_tar: bytes, tag: str, epoch: int, out: pathlib.Path) -> dict[str, object]:
    """A `docker save` archive of one layer; returns the image config."""
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    created = dt.datetime.fromtimestamp(epoch, dt.UTC)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": CONFIG,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created.strftime("%Y-%m-%dT%H:%M:%SZ"), "created_by": "hack/build_image.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_gz = gzip.compress(layer_tar, mtime=0)
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": ["layer.tar.gz"]}]
    with tarfile.open(out, "w") as tar:
        for name, data in [
            (config_name, config_bytes),
            ("layer.tar.gz", layer_gz),
            ("manifest.json", json.dumps(manifest).encode()),
        ]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), epoch, 0o644
            tar.addfile(info, io.BytesIO(data))
    return config


def main() -> None:
    """Build the image archive named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--tag", default=f"function-flower:v{__version__}")
    args = parser.parse_args()
    epoch = source_date_epoch()
    with tempfile.TemporaryDirectory(prefix="function-image-") as tmp:
        work = pathlib.Path(tmp)
        wheels(work / "whl")
        rootfs(work / "rootfs", work / "whl", epoch)
        layer_tar = layer(work / "rootfs", int(epoch))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    archive(layer_tar, args.tag, int(epoch), args.out)
    print(f"{args.out}: {args.tag}, {len(layer_tar) // 2**20} MiB uncompressed", file=sys.stderr)


if __name__ == "__main__":
    main()
