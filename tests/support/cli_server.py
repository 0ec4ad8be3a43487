"""Serves `flwr` commands in a test's CLI container: Flower imported once, each command in a child.

Importing Flower is most of what a `flwr` command costs (one to two CPU seconds,
against tens of milliseconds for the call), and the real-Flower tests ask the
CLI every few seconds while they wait. So test_real_flower.cli_exec runs this
once per CLI container, with the container's Python, after the product's
flwr_control: each command runs as the registrar and the runner run their own
(flwr_control.run_forked: a child forked from this process, with the
container's environment and working directory, killed at its timeout), so
the tests use the CLI the way the product does.

One JSON request a line on stdin, {"argv": [...], "timeout": seconds}; one
JSON answer a line on stdout, {"code": int or null past the timeout,
"stdout": ..., "stderr": ...}. A command that is not `flwr` runs as a process.
"""

import contextlib
import json
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

# Runs the container's Python: flwr_control's source, then this file's, then BOOT's last line.
BOOT = (
    "import sys, types\n"
    "module = types.ModuleType('cli_server')\n"
    "sys.modules['cli_server'] = module\n"
    "exec(compile(sys.argv[1], 'flwr_control.py', 'exec'), module.__dict__)\n"
    "exec(compile(sys.argv[2], 'cli_server.py', 'exec'), module.__dict__)\n"
    "module.serve(module.load_entry_point, module.run_forked, module.run_subprocess)\n"
)


def serve(
    load_entry_point: Callable[[str], Any], run_forked: Callable[..., Any], run_subprocess: Callable[..., Any]
) -> None:
    """Answer requests until stdin closes (the helpers: flwr_control's)."""
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries answers alone
        entry = load_entry_point("flwr")
    cwd, env = pathlib.Path.cwd(), dict(os.environ)
    while line := sys.stdin.readline():
        request = json.loads(line)
        argv, timeout = request["argv"], float(request["timeout"])
        if entry is False or argv[0] != "flwr":
            ran = run_subprocess(argv, cwd, env, timeout)
        else:
            ran = run_forked(entry, argv, cwd, env, timeout)
        code, stdout, stderr = ran
        if code is None:  # killed at the timeout: what it had printed, and that it was killed
            stderr = f"{stderr}\nkilled after {timeout:.0f} s"
        sys.stdout.write(json.dumps({"code": code, "stdout": stdout, "stderr": stderr}) + "\n")
        sys.stdout.flush()
