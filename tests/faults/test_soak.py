"""The short soak that `make test` runs: 20 s of the deployment in miniature (see tests/harness/soak.py; `make soak`
runs it for two minutes or longer)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ..harness.soak import run_soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_a_short_soak_holds_every_rule(database_url: str, tmp_path: Path) -> None:
    out = io.StringIO()
    soak = run_soak(database_url, 20.0, tmp_path, out=out)
    print("\n" + out.getvalue())
    assert not soak.errors, "\n".join(soak.errors)
    assert soak.report["jobs"] > 200 and soak.report["runs"] >= soak.report["jobs"]
