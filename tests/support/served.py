"""The function as Crossplane runs it: its own process, gRPC with mTLS, called over one connection.

Shared by the tests (conftest.py, test_shutdown.py, the e2e's control plane) and benchmarks/bench_load.py.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from function.serving import cpus

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The request and response sizes the function takes and gives (function/serving/main.py
# reads up to 256 MiB; Crossplane sends what it observed, however big).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024

# openssl's own configuration, so that the host's openssl.cnf plays no part:
# a CA, the function's server certificate for the address the tests dial, and
# the client certificate Crossplane would present.
OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
[server]
basicConstraints = critical,CA:FALSE
subjectAltName = IP:127.0.0.1,DNS:localhost
extendedKeyUsage = serverAuth
[client]
basicConstraints = critical,CA:FALSE
extendedKeyUsage = clientAuth
"""
NEW_KEY = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"


@dataclass(frozen=True)
class Certificates:
    """A CA, the function's certificate and key in server_dir (its --tls-certs-dir), and a client's."""

    server_dir: pathlib.Path
    ca: bytes
    client_crt: bytes
    client_key: bytes

    def channel(self, address: str) -> grpc.Channel:
        """One mTLS connection to address, as Crossplane holds to a function."""
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.client_key, certificate_chain=self.client_crt
        )
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ]
        return grpc.secure_channel(address, creds, options=options)


def issue(directory: pathlib.Path, openssl: str = "openssl") -> Certificates:
    """Certificates for mTLS on 127.0.0.1, made with the openssl CLI in directory."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "openssl.cnf"
    config.write_text(OPENSSL_CONFIG)

    def run(command: str) -> None:
        # Every file is named relative to directory, so the command splits on spaces.
        subprocess.run([openssl, *command.split()], cwd=directory, check=True, capture_output=True)

    run(f"req -x509 -config {config.name} -extensions ca {NEW_KEY} -keyout ca.key -out ca.crt -days 2 -subj /CN=ca")
    for name, extensions, serial in (("tls", "server", 2), ("client", "client", 3)):
        run(f"req -new -config {config.name} {NEW_KEY} -keyout {name}.key -out {name}.csr -subj /CN={name}")
        run(
            f"x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -set_serial {serial} -days 2 "
            f"-extfile {config.name} -extensions {extensions} -out {name}.crt"
        )
    return Certificates(
        server_dir=directory,
        ca=(directory / "ca.crt").read_bytes(),
        client_crt=(directory / "client.crt").read_bytes(),
        client_key=(directory / "client.key").read_bytes(),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(
    *args: str,
    port: int,
    log: pathlib.Path,
    command: tuple[str, ...] = ("serve",),
    env: dict[str, str] | None = None,
    timeout: float = 300,
    program: tuple[str, ...] = ("-m", "function.serving.main"),
    cgroup: pathlib.Path | None = None,
) -> subprocess.Popen:
    """`python -m function.serving.main serve --address 127.0.0.1:port *args`, once it listens; its output in log.

    command () runs it as the image does, with no command. program is what
    this interpreter runs: a script that takes the function's command line
    instead (benchmarks/bench.py lifts the pool cap first). The output goes to
    a file, not a pipe: a pipe no one reads stops the server once full.
    timeout is a liveness bound, not a figure: it returns as soon as the port
    answers, but a CI machine running two control planes and real Flower beside
    the unit tests has taken over 60 s to start a function with workers.
    cgroup is a cgroup directory the function starts in, as a container's process does.
    """
    return launch(
        [sys.executable, *program, *command, "--address", f"127.0.0.1:{port}", *args],
        port=port,
        log=log,
        env=env,
        timeout=timeout,
        cgroup=cgroup,
    )


def launch(
    argv: list[str],
    *,
    port: int,
    log: pathlib.Path,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    cgroup: pathlib.Path | None = None,
) -> subprocess.Popen:
    """Start argv, a gRPC server that listens at 127.0.0.1:port, and return it once it listens; its output in log.

    Any server: the function (serve) or a peer a benchmark compares it with. Raises, the server killed, when it
    exits first or is not listening after timeout seconds.
    """
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=join_group(cgroup),  # noqa: PLW1509 - it only writes its pid to a cgroup file
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            msg = f"{pathlib.Path(argv[0]).name} exited with {proc.returncode}: {log.read_text()}"
            raise RuntimeError(msg)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    msg = f"{pathlib.Path(argv[0]).name} did not start listening within {timeout}s: {log.read_text()}"
    raise RuntimeError(msg)


def children(pid: int) -> list[int]:
    """The processes pid started (its threads' children, as the kernel lists them)."""
    found = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return sorted(found)


def workers(pid: int) -> list[int]:
    """The function's worker processes: its children but multiprocessing's resource tracker."""
    found = []
    for child in children(pid):
        try:
            cmdline = pathlib.Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:  # ended meanwhile
            continue
        if b"spawn_main" in cmdline:
            found.append(child)
    return found


CFS_PERIOD_MICROSECONDS = 100_000  # the kubelet's CPU quota period


def cpu_limit_group(name: str, cpus_limit: float) -> pathlib.Path | None:
    """A cgroup under this process's own, with this CPU quota, as a kubelet sets a container's CPU limit (made, or
    its quota set again); None where no CPU controller here may be written (not root, or a cgroup v2 group with
    processes)."""
    hierarchies = [(d, v) for _, d, v in cpus.cpu_cgroups(cpus.PROC) if v == cpus.V1 or (d / "cpu.max").exists()]
    if not hierarchies or os.geteuid() != 0:
        return None
    parent, version = hierarchies[0]
    group = parent / name
    quota = str(int(cpus_limit * CFS_PERIOD_MICROSECONDS))
    try:
        group.mkdir(exist_ok=True)
        if version == cpus.V1:
            (group / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_MICROSECONDS))
            (group / "cpu.cfs_quota_us").write_text(quota)
        else:
            (group / "cpu.max").write_text(f"{quota} {CFS_PERIOD_MICROSECONDS}")
    except OSError:
        return None
    return group


def remove_group(group: pathlib.Path, timeout: float) -> None:
    """Remove a cgroup once its processes have left it (they exit first: multiprocessing's tracker a moment late)."""
    deadline = time.monotonic() + timeout
    while (group / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.1)
    group.rmdir()


def join_group(group: pathlib.Path | None) -> Callable[[], None] | None:
    """A preexec_fn that moves the child into group before it runs anything, or None without a group.

    The child only writes its pid to a cgroup file: no lock a thread could hold.
    """
    if group is None:
        return None

    def join() -> None:
        (group / "cgroup.procs").write_text(str(os.getpid()))

    return join
