"""The docs: the API reference agrees with the model."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_api_reference_is_fresh():
    proc = subprocess.run(
        [sys.executable, "hack/gen_api_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
