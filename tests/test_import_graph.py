"""The import graph of pipeline/ and storage/ has no cycle, and pipeline/ never imports prefect.

Every import counts, at any depth: one placed inside a function to dodge a cycle is still an edge of the graph.
Modules are read with `ast`, not imported, so the test is cheap and sees imports that a run may never reach."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "storage")  # the graph's modules, searched for cycles
OURS = (*PACKAGES, "tasks", "flows", "bench", "tests")  # top-level names that are this project's code
# What the config sections' validators need from the stages, and the registry the config composes its sections from,
# in modules that import nothing of this project's: the config imports these and other config modules only, so no
# stage module can close a cycle through it.
LEAVES = (
    "pipeline.registry",
    "pipeline.errors",
    "pipeline.config_base",
    "pipeline.corpus.credentials",
    "pipeline.corpus.segment",
    "pipeline.objectives.clear_names",
    "pipeline.train.splits",
    "pipeline.train.losses",
    "pipeline.readers.names",
    "pipeline.readers.registry",
    "pipeline.repeats",
    "pipeline.objectives",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules `name` imports, as dotted names (ours or not), at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            # `from a import b` imports the module a.b where there is one, else a name of a.
            subs = {f"{source}.{alias.name}" for alias in node.names} & known
            out.update(subs)
            if len(subs) < len(node.names):
                out.add(source)
    return out


@functools.cache
def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Edges between our modules, and every module's imports (ours or not)."""
    mods = modules()
    known = set(mods)
    imports = {name: imported(name, path, known) for name, path in mods.items()}
    edges = {}
    for name, targets in imports.items():
        ours = set()
        for t in targets:
            # `import pipeline.a.b` with no such module (a name of a package): the nearest module that exists.
            while t and t not in known and "." in t:
                t = t.rpartition(".")[0]
            if t in known and t != name:
                ours.add(t)
        edges[name] = ours
    return edges, imports


def components(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm): each holds a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def cycle(component: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module, as a -> b -> ... -> a (breadth-first)."""
    start = min(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges[v] & component):
                if w == start:
                    chain = [v]
                    while chain[-1] != start:
                        chain.append(parent[chain[-1]])
                    return [*reversed(chain), start]
                if w not in parent:
                    parent[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def describe(component: set[str], edges: dict[str, set[str]]) -> str:
    return f"{' -> '.join(cycle(component, edges))}  (modules in the cycles: {', '.join(sorted(component))})"


def test_the_import_graph_walks_every_module():
    edges, _ = graph()
    assert "pipeline.config" in edges and "storage" in edges
    assert "pipeline.errors" in edges["pipeline.config"]


def test_no_import_cycle_in_pipeline_or_storage():
    edges, _ = graph()
    cycles = [describe(c, edges) for c in components(edges)]
    assert not cycles, "import cycles (imports at any depth, function-local ones included):\n" + "\n".join(cycles)


def test_cycles_are_found_and_described():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert components(edges) == [{"a", "b", "c"}]
    assert describe({"a", "b", "c"}, edges) == "a -> b -> c -> a  (modules in the cycles: a, b, c)"


def test_leaves_import_nothing_of_ours():
    _, imports = graph()
    for leaf in LEAVES:
        ours = sorted(t for t in imports[leaf] if t.split(".")[0] in OURS)
        assert not ours, f"{leaf} is a leaf: it must import nothing of this project's, but imports {ours}"


def test_the_config_imports_only_config_modules_and_leaves():
    edges, _ = graph()
    configs = {m for m in edges if m == "pipeline.config" or m.endswith(".config")}
    assert {"pipeline.train.config", "pipeline.evaluate.config", "pipeline.baselines.fasttext.config"} <= configs
    for module in sorted(configs):
        others = sorted(edges[module] - configs - set(LEAVES))
        assert not others, f"{module} imports {others}: a config module imports config modules and leaves only"


def test_pipeline_and_storage_import_no_flows_or_tasks():
    _, imports = graph()
    outside = {
        name: sorted(t for t in targets if t.split(".")[0] in OURS and t.split(".")[0] not in PACKAGES)
        for name, targets in imports.items()
    }
    assert not {k: v for k, v in outside.items() if v}


def test_pipeline_never_imports_prefect():
    _, imports = graph()
    offenders = sorted(
        name
        for name, targets in imports.items()
        if name.split(".")[0] == "pipeline" and any(t == "prefect" or t.startswith("prefect.") for t in targets)
    )
    assert not offenders, f"pipeline/ must stay usable without prefect; these import it: {offenders}"
