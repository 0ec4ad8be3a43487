"""The function's command line: serve gRPC (the default) or render a file."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from crossplane.function import logging, runtime

from function.serving import cpus
from function.serving import render as renderer
from function.serving import serve as server
from function.serving import workers as workers_pool


class Workers(click.ParamType[int, object]):
    """A whole number from 1, or `auto`: the CPUs this process may use (function/serving/cpus.py)."""

    name = "auto|N"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        """`auto` or a number as the count of workers."""
        if isinstance(value, int) and value >= 1:
            return value
        if value == "auto":
            return cpus.usable()
        if isinstance(value, str) and value.isdecimal() and int(value) >= 1:
            return int(value)
        self.fail(f"{value!r} is neither auto nor a whole number from 1", param, ctx)


SERVE_OPTIONS = [
    click.option("--debug", "-d", is_flag=True, help="Emit debug logs."),
    click.option(
        "--address",
        default="0.0.0.0:9443",
        show_default=True,
        help="Address at which to listen for gRPC connections.",
    ),
    click.option(
        "--tls-certs-dir",
        envvar="TLS_SERVER_CERTS_DIR",
        help="Serve using mTLS certificates (tls.crt, tls.key, ca.crt) from this directory.",
    ),
    click.option(
        "--insecure",
        is_flag=True,
        help="Run without mTLS credentials; --tls-certs-dir is then ignored.",
    ),
    click.option(
        "--workers",
        envvar="FUNCTION_WORKERS",
        type=Workers(),
        default="auto",
        show_default=True,
        help="Worker processes composing calls in parallel; auto: one per CPU the container may use (its "
        "CPU limit, else its CPUs up to 8); 1 composes in the serving process.",
    ),
]


Command = TypeVar("Command", bound=Callable[..., Any])


def serve_options(command: Command) -> Command:
    """Decorate a command with the serving options, in SERVE_OPTIONS' order."""
    for option in reversed(SERVE_OPTIONS):
        command = option(command)
    return command


# Crossplane sends every observed Object, live state included: a Federation
# whose selectors stand for hundreds of clusters observes thousands of them,
# well past gRPC's default 4 MiB. (Crossplane reads responses up to gRPC's
# default 4 MiB, which bounds clusterSelector.maxClusters; see function/api/spec.py.)
MAX_REQUEST_BYTES = 256 * 1024 * 1024


def _serve(*, debug: bool, address: str, tls_certs_dir: str | None, insecure: bool, workers: int) -> None:
    level = logging.Level.DEBUG if debug else logging.Level.INFO
    logging.configure(level=level)
    # What `auto` saw, for whoever sizes the pod: the CPUs it may run on and its cgroup's CPU limit.
    logging.get_logger().info(
        "composing", workers=workers, cpus=len(os.sched_getaffinity(0)), cpu_limit=cpus.quota_cpus()
    )
    pool = None
    try:
        # Started before the server listens: Crossplane's first calls find the workers ready.
        pool = workers_pool.start(workers, level)
        server.serve(
            server.FunctionRunner(pool),
            address,
            # The SDK returns None for None, though it annotates a str.
            creds=runtime.load_credentials(tls_certs_dir),  # type: ignore[arg-type]
            insecure=insecure,
            options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES)],
        )
    except Exception as err:  # report, then fail the process
        click.echo(f"cannot run function: {err}", err=True)
        sys.exit(1)
    finally:
        # serve returns on SIGTERM once the calls under way have been answered
        # (or its grace period is over); the workers have nothing left to do.
        if pool is not None:  # None if it could not start
            pool.shutdown()
            # In a finally: what is being raised, if anything, is the exit it stands for (sys.exit(1) above).
            workers_pool.leave_no_thread_behind(0 if sys.exc_info()[0] is None else 1)


@click.group(invoke_without_command=True)
@serve_options
@click.pass_context
def cli(
    ctx: click.Context, *, debug: bool, address: str, tls_certs_dir: str | None, insecure: bool, workers: int
) -> None:
    """A Crossplane composition function that deploys Flower federations.

    With no command it serves gRPC, as Crossplane runs it.
    """
    if ctx.invoked_subcommand is None:
        _serve(debug=debug, address=address, tls_certs_dir=tls_certs_dir, insecure=insecure, workers=workers)


@cli.command()
@serve_options
def serve(*, debug: bool, address: str, tls_certs_dir: str | None, insecure: bool, workers: int) -> None:
    """Serve gRPC for Crossplane (the same as no command)."""
    _serve(debug=debug, address=address, tls_certs_dir=tls_certs_dir, insecure=insecure, workers=workers)


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--observed",
    type=click.Path(exists=True),
    help="YAML file or directory of observed composed resources (as `crossplane render -o`).",
)
@click.option(
    "--xrd",
    type=click.Path(exists=True, dir_okay=False),
    help="The XRD to follow, as `crossplane render --xrd`: with a namespaced (v2) XRD a "
    "Federation is a namespaced XR; without one it is taken as a claim.",
)
@click.option(
    "--required",
    type=click.Path(exists=True),
    help="YAML file or directory of resources to answer the function's requirements with "
    "(as `crossplane render --required-resources`), e.g. the SuperLink's TLS Secret.",
)
@click.option(
    "--policy",
    type=click.Path(exists=True, dir_okay=False),
    help="The platform's policy: its EnvironmentConfig flower-platform-policy as the platform applies it, "
    "or a flower.fn.crossplane.io Policy as a Composition's step gives it; the defaults without one.",
)
def render(file: str, observed: str | None, xrd: str | None, required: str | None, policy: str | None) -> None:
    """Render every Federation in FILE (- for standard input) to one YAML stream.

    XRs, claims and flower-operator Federations are rendered; any other document is
    refused, named, and nothing is printed.
    """
    # The function logs what it cannot compose (a bug) for a server's log; here stdout is the
    # rendered stream alone, and the error below says what failed.
    logging.configure(level=logging.Level.DISABLED)
    try:
        text, warnings = renderer.render_file(file, observed, xrd, required, policy)
    except renderer.RenderError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(1)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(text, nl=False)


if __name__ == "__main__":
    cli()
