"""Install the LOWEST and the HIGHEST versions pyproject.toml allows, each into a fresh virtualenv, and run the
contract suites on both (the memory stores, and MySQL over one pool setup), against one shared MySQL server.

    python scripts/deps_matrix.py            # what `make deps` and .ci/run run
    python scripts/deps_matrix.py --only lowest

Lowest means every direct requirement (the dependencies and the `testing` extra) at its lower bound, the rest
resolved by pip as usual (what `uv pip compile --resolution lowest-direct` gives). The package is built into a
wheel once; pip's cache is reused, so only the first run on a machine downloads anything. The server is
PLITZI_MYSQL_URL if set, else one throwaway server for both runs (`plitzi_jobs_mysql.testing.mysql_server_url`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
SUITES = ["tests/unit/test_contract_memory.py", "tests/mysql/test_contract_mysql.py"]
# The memory suites, and MySQL over one pool setup (autocommit off, a table prefix: the most demanding one).
SELECTION = "Memory or prefixed"
SHOWN = ("aiomysql", "PyMySQL", "croniter", "tzdata", "pytest", "pytest-asyncio", "pytest-timeout", "testcontainers")


def direct_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in [*project["dependencies"], *project["optional-dependencies"]["testing"]]]


def lowest_constraints() -> list[str]:
    """`name==lower bound` for each direct requirement; a requirement without a lower bound is an error here."""
    pins = []
    for requirement in direct_requirements():
        lows = [spec.version for spec in requirement.specifier if spec.operator in (">=", "==", "~=")]
        if not lows:
            raise SystemExit(f"{requirement} has no lower bound: give it one in pyproject.toml")
        pins.append(f"{requirement.name}=={max(lows, key=lambda v: tuple(int(p) for p in v.split('.')))}")
    return pins


def run(command: list[str], **kwargs: object) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)  # type: ignore[call-overload]


def one(mode: str, wheel: Path, work: Path, env: dict[str, str]) -> None:
    venv = work / f"venv-{mode}"
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "-q", f"{wheel}[testing]"]
    if mode == "lowest":
        constraints = work / "lowest.txt"
        constraints.write_text("\n".join(lowest_constraints()) + "\n")
        install += ["-c", str(constraints)]
    run(install)
    show = "import importlib.metadata as m, sys; print(', '.join(f'{n} {m.version(n)}' for n in sys.argv[1:]))"
    versions = subprocess.run([python, "-c", show, *SHOWN], check=True, capture_output=True, text=True).stdout.strip()
    print(f"== {mode}: {versions}", flush=True)
    clean = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", SELECTION, *SUITES], cwd=ROOT, env=clean)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", choices=("lowest", "highest"), default=None)
    args = parser.parse_args()
    modes = [args.only] if args.only else ["lowest", "highest"]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pjm-deps-") as tmp:
        work = Path(tmp)
        # The wheel from the sdist, as `python -m build` makes it: never from the checkout's build/ directory,
        # which keeps modules that were moved or removed since the last in-tree build.
        run([sys.executable, "-m", "build", "-q", "--no-isolation", "--outdir", str(work), str(ROOT)])
        (wheel,) = work.glob("*.whl")
        env = dict(os.environ)
        if env.get("PLITZI_MYSQL_URL"):
            for mode in modes:
                one(mode, wheel, work, env)
        else:
            from plitzi_jobs_mysql.testing import mysql_server_url

            with mysql_server_url() as url:
                env["PLITZI_MYSQL_URL"] = url
                for mode in modes:
                    one(mode, wheel, work, env)
    print(f"== dependency matrix passed in {time.monotonic() - started:.0f} s: {', '.join(modes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
