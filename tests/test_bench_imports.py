"""Every name a benchmark imports from this project exists: a move or a rename elsewhere (issue 24's moved a
dozen modules) breaks a benchmark only when someone next runs it, minutes into `make bench`. The benchmarks are
read with `ast`, so imports inside their functions count too; running them is `make bench` (BENCHMARKS.md)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("pipeline", "storage", "tasks", "flows", "bench")
BENCHES = sorted((ROOT / "bench").glob("*.py"))


def project_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of each import of this project's code in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] in OURS]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in OURS:
            found += [(node.lineno, node.module, a.name) for a in node.names]
    return found


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.stem)
def test_every_name_a_benchmark_imports_exists(path):
    missing = []
    for line, module, name in project_imports(path):
        try:
            imported = importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{path.name}:{line}: {module}: {e}")
            continue
        if name is None or hasattr(imported, name):
            continue
        # `from package import module` names a module the package need not have imported yet.
        if not (hasattr(imported, "__path__") and importlib.util.find_spec(f"{module}.{name}")):
            missing.append(f"{path.name}:{line}: {module} has no {name}")
    assert not missing, "\n".join(missing)


def test_the_check_sees_every_benchmarks_imports():
    """Not vacuous: each benchmark is found, and each imports this project's code, which the check resolves."""
    assert {p.stem for p in BENCHES} >= {"common", "filter_throughput", "train_step_overhead", "encode_throughput"}
    assert all(project_imports(p) for p in BENCHES if p.stem != "__init__")
