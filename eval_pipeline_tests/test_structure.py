"""The package's shape: a plain core, a thin Dagster layer over it, no import circle in that layer, and only
Dagster's public API.

Imports are read from the source, including those inside functions (which is where a circle hides), but not
those under `if TYPE_CHECKING:` (never executed).
"""

import ast
from pathlib import Path

import eval_pipeline

PACKAGE = Path(eval_pipeline.__file__).parent
DAGSTER_LAYER = ("eval_pipeline.defs", "eval_pipeline.orchestration")
# The only modules outside the Dagster layer that may use it: the command line, the code location and the
# instance's settings.
DAGSTER_ENTRY_POINTS = {"eval_pipeline.cli", "eval_pipeline.definitions", "eval_pipeline.orchestration.instance_config"}


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST) -> list[str]:
    """Every module imported at run time: `from a.b import c` gives a.b and a.b.c (c may be a module)."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if _is_type_checking_block(node):
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        found += _imports(node)
    return found


MODULES = {
    _module_name(path): _imports(ast.parse(path.read_text()))
    for path in PACKAGE.rglob("*.py")
    if "demo_tasks" not in path.parts
}


def _in_layer(module: str) -> bool:
    return module.startswith(DAGSTER_LAYER)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in `graph`, or None (depth-first search for a back edge)."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for dependency in sorted(graph[module]):
            if state.get(dependency) == "open":
                return path[path.index(dependency) :] + [dependency]
            if dependency not in state and (found := visit(dependency)):
                return found
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_the_dagster_layer_has_no_import_circle_even_through_imports_inside_functions():
    layer = {name: {m for m in imports if m in MODULES and _in_layer(m)} for name, imports in MODULES.items()}
    layer = {name: deps - {name} for name, deps in layer.items() if _in_layer(name)}
    assert len(layer) >= 8, "the layer's modules were found"
    assert _cycle(layer) is None


def test_the_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_imports_a_private_dagster_module():
    private = {
        name: [m for m in imports if m.split(".")[0].startswith("dagster") and "._" in m]
        for name, imports in MODULES.items()
    }
    assert {name: found for name, found in private.items() if found} == {}


def test_the_core_uses_neither_dagster_nor_the_dagster_layer():
    core = {name: imports for name, imports in MODULES.items() if not _in_layer(name)}
    assert "eval_pipeline.tasks.swebench.grading" in core and "eval_pipeline.results.statistics" in core
    leaks = {
        name: sorted({m for m in imports if m.split(".")[0] == "dagster" or _in_layer(m)})
        for name, imports in core.items()
        if name not in DAGSTER_ENTRY_POINTS
    }
    assert {name: found for name, found in leaks.items() if found} == {}
