"""Run by the Flower virtualenv: parse --node-config strings with Flower's own parser.

Reads a JSON list of strings on stdin, writes a JSON list of
{"ok": dict} or {"error": str}, one per string.
"""

import json
import sys

from flwr.common.config import parse_config_args

out = []
for text in json.load(sys.stdin):
    try:
        out.append({"ok": parse_config_args([text])})
    except BaseException as err:  # Flower exits through typer on bad input
        out.append({"error": f"{type(err).__name__}: {err}"})
json.dump(out, sys.stdout)
