"""pipeline/'s packages import in one direction: each module only from its own layer or one to its left in the
order docs/contributing.md declares ("Package order"), a stage package it does not name placed by the registry, and
never the project's code inside a function.

Modules are read with `ast`, not imported. An import under `if TYPE_CHECKING:` never runs and is no edge."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pipeline import registry

ROOT = Path(__file__).resolve().parents[1]
OURS = ("pipeline", "storage", "tasks", "flows")
DOC = ROOT / "docs" / "contributing.md"


def declared_order() -> list[tuple[str, tuple[str, ...]]]:
    """The layers, left first: (name, the top-level modules of pipeline/ it holds; none for a package): the block's,
    and before its last (the config's) a layer for each stage's package that it does not name, in the registry's
    order."""
    block = re.search(r"^```package-order\n(.*?)^```", DOC.read_text(), re.S | re.M)
    assert block, f"{DOC}: no ```package-order block"
    order = [(words[0], tuple(words[1:])) for words in map(str.split, block.group(1).splitlines()) if words]
    named = {n for name, modules in order for n in modules or (name,)}
    stages = [node(line.module) for line in registry.STAGES.values() if line.module.startswith("pipeline.")]
    return [*order[:-1], *((p, ()) for p in dict.fromkeys(stages) if p not in named), order[-1]]


def layers() -> dict[str, int]:
    """Each node (a package of pipeline/, a top-level module of pipeline/, or storage) -> its layer's place."""
    nodes = {}
    for place, (name, modules) in enumerate(declared_order()):
        for node in modules or (name,):
            nodes[node] = place
    return nodes


def node(module: str) -> str:
    """`pipeline.model.transformer` -> model; `pipeline.locate` -> locate; `storage.dataset` -> storage."""
    parts = module.split(".")
    return parts[1] if parts[0] == "pipeline" and len(parts) > 1 else parts[0]


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def targets(imp: ast.Import | ast.ImportFrom) -> list[str]:
    """The project modules an import names: `from pipeline import locate` names pipeline.locate."""
    if isinstance(imp, ast.Import):
        names = [a.name for a in imp.names]
    elif imp.level or not imp.module:
        return []  # relative imports: none in pipeline/, and never across packages
    elif imp.module == "pipeline":
        names = [f"pipeline.{a.name}" for a in imp.names]
    else:
        names = [imp.module]
    return [n for n in names if n.split(".")[0] in OURS]


def imports(tree: ast.AST):
    """(import node, inside a function) for every import that runs: TYPE_CHECKING blocks are left out."""

    def walk(n: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(n):
            if isinstance(child, ast.If) and is_type_checking(child.test):
                for other in child.orelse:
                    yield from walk(other, in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    yield from walk(tree, False)


def violations(root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(imports pointing right in the order or at an undeclared package, function-local project imports) of the
    modules under root/pipeline, each as 'file:line ...'."""
    order, names = layers(), [name for name, _ in declared_order()]
    against, local = [], []
    for path in sorted((root / "pipeline").rglob("*.py")):
        rel = path.relative_to(root)
        parts = rel.with_suffix("").parts
        source = "pipeline" if len(parts) == 2 and parts[1] == "__init__" else node(".".join(parts))
        for imp, in_function in imports(ast.parse(path.read_text(), str(path))):
            for target in targets(imp):
                where = f"{rel}:{imp.lineno}"
                if in_function:
                    local.append(f"{where} imports {target} inside a function")
                tgt = node(target)
                if source == "pipeline" or tgt == source:
                    continue
                for n in (source, tgt):
                    if n not in order and n != "pipeline":
                        against.append(f"{where}: {n} is in no layer of {DOC.name}'s package order")
                if source in order and tgt in order and order[tgt] > order[source]:
                    against.append(
                        f"{where} imports {target}: {source} ({names[order[source]]}) may not import "
                        f"{tgt} ({names[order[tgt]]}), to its right in the package order"
                    )
    return sorted(set(against)), local


def test_every_import_goes_left_in_the_package_order():
    against, _ = violations()
    assert not against, f"{len(against)} imports against the package order:\n" + "\n".join(against)


def test_no_function_imports_the_projects_code():
    _, local = violations()
    assert not local, f"{len(local)} function-local imports of the project's code:\n" + "\n".join(local)


def test_every_package_of_pipeline_is_declared():
    declared = set(layers())
    present = {p.name for p in (ROOT / "pipeline").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    present |= {p.stem for p in (ROOT / "pipeline").glob("*.py") if p.stem != "__init__"}
    assert present <= declared, f"not in {DOC.name}'s package order: {sorted(present - declared)}"


def test_a_new_stages_package_is_placed_by_its_registry_line(tmp_path, monkeypatch):
    """A stage package the block does not name (pipeline/words) may import the declared packages, and no declared
    package but the config's layer may import it, once the registry names its stage; before, it is in no layer."""
    for module, source in {
        "__init__": "",
        "words/__init__": "",
        "words/stage": "from pipeline.filter.stage import SCHEMA\n",
        "filter/__init__": "",
        "filter/stage": "from pipeline.words.stage import STAGE\n",
        "preflight": "from pipeline.words import stage\n",
    }.items():
        (tmp_path / "pipeline" / module).with_suffix(".py").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pipeline" / module).with_suffix(".py").write_text(source)
    assert (
        "pipeline/words/stage.py:1: words is in no layer of contributing.md's package order" in violations(tmp_path)[0]
    )
    line = registry.Line("pipeline.words.stage", "words", "pipeline.words.config.WordsConfig")
    monkeypatch.setattr(registry, "STAGES", {**registry.STAGES, "words": line})
    order = declared_order()
    assert order[-2] == ("words", ()) and order[-1][0] == "top" and "words" in layers()
    assert violations(tmp_path)[0] == [
        "pipeline/filter/stage.py:1 imports pipeline.words.stage: filter (filter) may not import words (words), to "
        "its right in the package order"
    ]


def test_the_check_sees_type_checking_blocks_and_function_imports(tmp_path):
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "from pipeline.errors import InputError\n"
        "if TYPE_CHECKING:\n    from pipeline.config import Config\n"
        "def f():\n    from pipeline import locate\n"
    )
    found = [(targets(i), local) for i, local in imports(tree)]
    assert found == [([], False), (["pipeline.errors"], False), (["pipeline.locate"], True)]
