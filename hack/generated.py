"""The --check / write logic the generators share."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Callable


def main(out: pathlib.Path, render: Callable[[], str], doc: str | None, script: str) -> int:
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--check", action="store_true", help="fail if the committed file is stale")
    args = parser.parse_args()
    text = render()
    if not args.check:
        out.write_text(text)
        return 0
    if out.exists() and out.read_text() == text:
        return 0
    print(f"{out.name} is stale: run python {script}", file=sys.stderr)
    return 1
