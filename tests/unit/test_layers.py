"""The package's layers: records -> contract -> stores -> runtime -> assembly / command line, nothing importing
upwards (so a store never depends on the worker, and the contract never on a store)."""

from __future__ import annotations

import ast
from pathlib import Path

import plitzi_jobs_mysql

PACKAGE = Path(plitzi_jobs_mysql.__file__).parent
#: Each top-level module or folder of the package and its layer; an import may only reach the same layer or lower.
LAYERS = {
    "records": 0, "errors": 0,
    "contract": 1,
    "memory": 2, "mysql": 2, "url": 2,
    "runtime": 3, "otel": 3, "redis_wakeups": 3,
    "assembly": 4,
    "cli": 5, "migrations": 5, "alembic": 5, "testing": 5, "web": 5,
    "pytest_plugin": 6, "__init__": 6, "__main__": 6,
}  # fmt: skip


def _imports(path: Path) -> list[str]:
    """The package modules `path` imports, dotted from the package root."""
    package = list(path.relative_to(PACKAGE).parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package[: len(package) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            found += [target] if node.module else [f"{target}.{alias.name}".lstrip(".") for alias in node.names]
        elif node.module and node.module.startswith("plitzi_jobs_mysql"):
            found.append(node.module.removeprefix("plitzi_jobs_mysql").lstrip(".") or "__init__")
    return found


def test_every_module_has_a_layer() -> None:
    tops = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in PACKAGE.rglob("*.py")}
    assert tops <= set(LAYERS), sorted(tops - set(LAYERS))


def test_no_module_imports_a_higher_layer() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for target in _imports(path):
            top = target.split(".")[0] or "__init__"
            if LAYERS.get(top, -1) > LAYERS[own]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {target}")
    assert not upward, upward
