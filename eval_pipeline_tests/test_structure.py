"""The package's shape: packages by concept in layers that only point down, no import circle anywhere, a plain
core that never loads Dagster, and only Dagster's public API in the layer that uses it, but in the one module
that documents each private name it takes (defs/dagster_internals.py).

Imports are read from the source, including those inside functions (which is where a circle hides) and those
under `if TYPE_CHECKING:`: a type a module names is one it depends on, executed or not.
"""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import eval_pipeline

PACKAGE = Path(eval_pipeline.__file__).parent
# Bottom to top: a module may import its own layer and the layers below it, never one above. A module's layer
# is that of the longest prefix naming it: a task's data (tasks.data) is below the sandboxes and grading, and the
# Task protocol (a task's data and what it does: tasks.task), datasets of tasks and the task kinds above them.
LAYERS = (
    ("eval_pipeline", "eval_pipeline.common"),
    ("eval_pipeline.store",),
    ("eval_pipeline.tasks",),
    ("eval_pipeline.sandbox",),
    ("eval_pipeline.grading",),
    (
        "eval_pipeline.tasks.task",
        "eval_pipeline.tasks.dataset",
        "eval_pipeline.tasks.swebench",
        "eval_pipeline.tasks.terminal",
        "eval_pipeline.tasks.demo",
        "eval_pipeline.datasets",
    ),
    ("eval_pipeline.agents",),
    ("eval_pipeline.config",),
    ("eval_pipeline.trial",),
    ("eval_pipeline.results",),
    ("eval_pipeline.testing",),
    ("eval_pipeline.defs",),
    ("eval_pipeline.orchestration",),
    ("eval_pipeline.cli", "eval_pipeline.definitions"),
)
DAGSTER_LAYERS = 3  # the last three: the definitions, the drivers of their runs, the command and the location


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _named_modules(node: ast.AST) -> list[str]:
    """Modules a node loads by name: `importlib.import_module("a.b")`, and `"a.b:attr"` (an entry point, as
    the sandbox backends are loaded)."""
    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args:
        argument = node.args[0]
        return [argument.value] if isinstance(argument, ast.Constant) and isinstance(argument.value, str) else []
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and ":" in node.value:
        module = node.value.partition(":")[0]
        return [module] if module.startswith("eval_pipeline.") else []
    return []


def _imports(tree: ast.AST) -> list[str]:
    """Every module imported, at run time or for type checkers: `from a.b import c` gives a.b and a.b.c (c may
    be a module); a relative import gives `relative:` and the module, which the tests refuse."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.append(f"relative:{node.module}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        found += _named_modules(node) + _imports(node)
    return found


MODULES = {
    _module_name(path): _imports(ast.parse(path.read_text()))
    for path in PACKAGE.rglob("*.py")
    if "demo_tasks" not in path.parts
}
GRAPH = {name: {m for m in imports if m in MODULES} - {name} for name, imports in MODULES.items()}


def _layer(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int | None:
    """The index of the module's layer: that of the longest prefix naming it (None when none does)."""
    matches = [
        (len(prefix), index)
        for index, prefixes in enumerate(layers)
        for prefix in prefixes
        if module == prefix or module.startswith(f"{prefix}.")
    ]
    return max(matches)[1] if matches else None


def _upward_imports(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    return sorted(
        f"{module} -> {imported}"
        for module, imported_modules in graph.items()
        for imported in imported_modules
        if _layer(imported, layers) > _layer(module, layers)
    )


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


def _in_dagster_layer(module: str) -> bool:
    return _layer(module) >= len(LAYERS) - DAGSTER_LAYERS


def test_every_module_is_in_a_layer_and_every_layer_has_modules():
    assert len(MODULES) > 90, "the package's modules were found"
    assert {name for name in MODULES if _layer(name) is None} == set()
    assert {index for index in map(_layer, MODULES)} == set(range(len(LAYERS)))


def test_imports_only_point_down_the_layers_even_inside_functions():
    assert _upward_imports(GRAPH) == []


def test_there_is_no_import_circle_anywhere_even_through_imports_inside_functions_or_for_types():
    assert _cycle(GRAPH) is None


def test_the_checks_find_a_circle_an_upward_import_and_every_way_of_importing():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    layers = (("p.low",), ("p.high",))
    assert _upward_imports({"p.low.x": {"p.high.y"}, "p.high.y": {"p.low.x"}}, layers) == ["p.low.x -> p.high.y"]
    source = """
if TYPE_CHECKING:
    import hidden
else:
    import shown
def f():
    from .sibling import x
    importlib.import_module("by.name")
    return {"a": "eval_pipeline.entry:Point", "label": "eval_pipeline.layer"}
"""
    found = ["by.name", "eval_pipeline.entry", "hidden", "relative:sibling", "shown"]
    assert sorted(_imports(ast.parse(source))) == found
    type_only = {"p.low": "if TYPE_CHECKING:\n    from p.high import Verdict\n", "p.high": "from p.low import Task\n"}
    graph = {name: set(_imports(ast.parse(text))) & type_only.keys() for name, text in type_only.items()}
    assert _cycle(graph) == ["p.high", "p.low", "p.high"]


def test_no_module_imports_relatively():
    assert {name: [m for m in imports if m.startswith("relative:")] for name, imports in MODULES.items()} == {
        name: [] for name in MODULES
    }


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    waiting = [start]
    while waiting:
        for imported in graph[waiting.pop()] - seen:
            seen.add(imported)
            waiting.append(imported)
    return seen


def test_the_kubernetes_backend_imports_nothing_of_the_container_backend():
    """What the two backends share (the exec transport, the workspace in a pod, the images and the engine's
    client) lives in sandbox/pods/, below both: no module of the Kubernetes backend reaches one of the container
    backend's, directly or through another module."""
    kubernetes = sorted(name for name in GRAPH if name.startswith("eval_pipeline.sandbox.kubernetes."))
    assert "eval_pipeline.sandbox.kubernetes.sandbox" in kubernetes
    assert _reachable({"a": {"b"}, "b": {"c", "a"}, "c": set()}, "a") == {"a", "b", "c"}
    container = {
        name: sorted(m for m in _reachable(GRAPH, name) if m.startswith("eval_pipeline.sandbox.container"))
        for name in kubernetes
    }
    assert container == {name: [] for name in kubernetes}


def test_the_code_location_loads_no_backend_it_does_not_use():
    """The sandbox backends are loaded by name when first used: the Kubernetes client alone takes half a second
    to import, which every run worker of an embedded-default campaign would otherwise pay. So are the libraries
    only the results step or a snapshot's writer needs (SciPy's statistics, pandas) and pytest (a version
    number in a Dockerfile): together they were 1.1 of the 2.6 s a worker took to import its definitions. The
    MCP SDK is imported by an agent when it opens a tool session: half a second more, in the command too."""
    code = (
        "import sys, eval_pipeline.definitions, eval_pipeline.orchestration.launchers, eval_pipeline.cli\n"
        "import eval_pipeline.orchestration.campaign_run\n"
        "print(sorted(name for name in ('kubernetes', 'scipy', 'pandas', 'pytest', 'mcp') if name in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


# The one module that takes names from Dagster's private modules; its docstring says, for each, the behaviour
# relied on and the public API that would replace it, and test_dagster_internals.py pins that behaviour.
PRIVATE_DAGSTER_ALLOWED = "eval_pipeline.defs.dagster_internals"


def test_only_one_module_imports_a_private_dagster_module():
    private = {
        name: [m for m in imports if m.split(".")[0].startswith("dagster") and "._" in m]
        for name, imports in MODULES.items()
    }
    assert {name for name, found in private.items() if found} == {PRIVATE_DAGSTER_ALLOWED}


def test_only_the_dagster_layer_imports_dagster():
    leaks = {
        name: sorted({m for m in imports if m.split(".")[0].startswith("dagster")})
        for name, imports in MODULES.items()
        if not _in_dagster_layer(name)
    }
    assert "eval_pipeline.tasks.swebench.grading" in leaks and "eval_pipeline.results.statistics" in leaks
    assert {name: found for name, found in leaks.items() if found} == {}


def test_importing_every_core_module_loads_neither_dagster_nor_the_asset_graph():
    core = sorted(name for name in MODULES if not _in_dagster_layer(name))
    code = "".join(f"import {name}\n" for name in core) + (
        "import sys\nprint(sorted(m for m in sys.modules if m.split('.')[0].startswith('dagster')"
        " or m.startswith('eval_pipeline.defs')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_every_package_says_what_it_holds_and_exports_its_public_face():
    packages = sorted(name for name in MODULES if (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists())
    assert len(packages) >= 16
    for name in packages:
        package = importlib.import_module(name)
        assert package.__doc__, f"{name} has no docstring"
        assert hasattr(package, "__all__"), f"{name} has no __all__"
        missing = [export for export in package.__all__ if not hasattr(package, export)]
        assert missing == [], f"{name}.__all__ names what it does not have"


def test_importing_the_tool_server_leaves_the_kubernetes_client_findable():
    """The tool server runs as a script beside the runner's directory; imported as a module (the tests do), it
    must not put its own directory on sys.path, where the sandbox's kubernetes/ package would then shadow the
    Kubernetes client in every process spawned from this one (a campaign's run workers were: BrokenProcessPool)."""
    code = (
        "import sys, eval_pipeline.sandbox.tool_server, kubernetes.client\n"
        "print(any(path.endswith('sandbox') for path in sys.path), 'eval_pipeline' in kubernetes.__file__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "False False\n"
