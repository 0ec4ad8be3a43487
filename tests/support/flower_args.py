"""Run by a Flower release's virtualenv: parse container args with that release's own CLI parsers.

Reads a JSON list of {"binary": ..., "args": [...]} on stdin, writes a JSON
list of {"ok": {option: value}} or {"error": message}.
"""

import contextlib
import io
import json
import sys

from flwr.supercore.cli.flower_superexec import _parse_args as _parse_args_superexec
from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode

try:  # the SuperLink's command moved to its own package in 1.35
    from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink
except ImportError:
    from flwr.server.app import _parse_args_run_superlink

PARSERS = {
    "flower-superlink": _parse_args_run_superlink,
    "flower-supernode": _parse_args_run_supernode,
    "flower-superexec": _parse_args_superexec,
}

out = []
for item in json.load(sys.stdin):
    parser = PARSERS[item["binary"]]()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            namespace = parser.parse_args(item["args"])
        out.append(
            {"ok": {k: v for k, v in vars(namespace).items() if isinstance(v, (str, int, float, bool, type(None)))}}
        )
    except SystemExit:
        out.append({"error": stderr.getvalue().strip().splitlines()[-1]})
json.dump(out, sys.stdout)
