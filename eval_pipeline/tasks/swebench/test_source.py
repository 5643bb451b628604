"""What a graded test's restored source can report of it besides a pass or a failure: an expected failure, a skip.

SWE-bench counts an expected failure (XFAIL) as a pass and a skip as no
regression. Code under test runs in the test process and can make a test
either (`pytest.xfail()`, `pytest.skip()`, a marker added to the item, a
report rewritten), so the grader believes a graded test (or a twin of one)
XFAIL or SKIPPED only where the source the patch cannot change can make it so:
the test files as restored and patched by the test patch, and the
`conftest.py` files on their path (grading.py restores both before the run).
A graded test passed in the environment SWE-bench validated, so an honest
skip of one comes from the test side meeting another environment (a module
missing, no network), never from the code under test.

A test's scope is where such a status can come from: the test function
(decorators, parameters' marks, body); each class it is in and the classes they
derive from in the file (decorators, `pytestmark`, set-up methods, fixtures,
every member but the other tests); the module's own statements that are not
imports or definitions (`pytestmark`, `pytest.importorskip(...)` at import);
autouse fixtures; every definition of the file any of these names, by name,
to a fixpoint (helpers, fixtures by parameter name, marker variables); and,
of the `conftest.py` files from the repository's root to the test's directory,
what acts on every test (hooks, autouse fixtures, code run at import) and the
fixtures and helpers the test names.
The scope can report XFAIL where it says `xfail` (a marker, `pytest.xfail`,
`xfail_strict`), `expectedFailure` or `knownfail`, and SKIPPED where it says
`skip` (`skip`, `skipif`, `importorskip`, `skipTest`, `SkipTest`) or `knownfail`.

A decorator the file imports and cannot show (`@requires_dask`,
matplotlib's `@image_comparison`, a plugin's marker) may do either: the test
is believed. So is a test whose function is not in the files (made at run
time). Those are the patch's to change when they come from the library: what
the twins and the canary still bound.
"""

import ast
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import PurePosixPath

from eval_pipeline.grading.verdict import SKIPPED, XFAIL

__all__ = ["RestoredSource", "conftests_above"]

_WORDS = {
    XFAIL: re.compile(r"xfail|expectedfailure|known_?fail", re.IGNORECASE),
    SKIPPED: re.compile(r"skip|known_?fail", re.IGNORECASE),
}
# Decorators that cannot skip or expect a failure whatever module they come from.
_PLAIN_DECORATORS = {
    "classmethod",
    "dict",
    "filterwarnings",
    "modify_settings",
    "multiple",
    "object",
    "override_settings",
    "parametrize",
    "patch",
    "property",
    "staticmethod",
    "usefixtures",
    "wraps",
}
_DJANGO_ID = re.compile(r"(\w+) \(([\w.]+)\)")
_Function = ast.FunctionDef | ast.AsyncFunctionDef
_Positioned = ast.stmt | ast.expr  # a node with a place in the source: line numbers


def conftests_above(path: str) -> list[str]:
    """The `conftest.py` files pytest may load for a test file at `path`: its directory's and every parent's."""
    parents = reversed(PurePosixPath(path).parents)
    return [str(parent / "conftest.py") if str(parent) != "." else "conftest.py" for parent in parents]


def _locate(test_id: str, name: str | None) -> tuple[str | None, list[str], str]:
    """A test id's file (None when the id does not say), classes and function name: pytest's
    `path::Class::name[params]`, django's `name (module.Class)` (`module.Class.name` from Python 3.11), sympy's
    `name`. `name` replaces the function's (a twin is judged by its original's source)."""
    if "::" in test_id:
        path, *rest = [part for part in test_id.split("::") if part != "()"]
        own = rest[-1].split("[")[0].split(" ")[0] if rest else ""
        return path, rest[:-1], name or own
    if django := _DJANGO_ID.fullmatch(test_id):
        dotted = django[2].split(".")
        classes = dotted[-2:-1] if dotted[-1] == django[1] else dotted[-1:]
        return None, classes, name or django[1]
    return None, [], name or test_id.split(" ")[0]


def _defined_names(statement: ast.stmt) -> list[str]:
    if isinstance(statement, _Function | ast.ClassDef):
        return [statement.name]
    if isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return [node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)]
    return []


def _names_used(nodes: Sequence[ast.AST]) -> set[str]:
    """Every identifier the nodes use: names, attributes, parameters, and strings that are identifiers (fixture
    names in `usefixtures`)."""
    used = set()
    for node in (inner for outer in nodes for inner in ast.walk(outer)):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.arg):
            used.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            used.add(node.value)
    return used


def _is_marker(node: ast.expr) -> bool:
    """Whether an expression only makes a pytest marker (`pytest.mark.skipif(...)`), which acts where it is used."""
    return any(isinstance(inner, ast.Attribute) and inner.attr == "mark" for inner in ast.walk(node))


def _runs_for_every_test(statement: ast.stmt) -> bool:
    """Whether a module statement acts on each of its tests: not an import or a definition (those act where they
    are named), a docstring or a marker variable, but `pytestmark`, code run at import, and autouse fixtures."""
    if isinstance(statement, ast.Import | ast.ImportFrom | ast.ClassDef):
        return False
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return False
    if isinstance(statement, _Function):
        return any(
            isinstance(keyword, ast.keyword) and keyword.arg == "autouse"
            for decorator in statement.decorator_list
            for keyword in ast.walk(decorator)
        )
    if isinstance(statement, ast.Assign | ast.AnnAssign):
        return "pytestmark" in _defined_names(statement) or not (statement.value and _is_marker(statement.value))
    return True


class _Module:
    """A test file's definitions, for scopes."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines()
        try:
            self.tree: ast.Module | None = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # another Python's syntax, or too deep
            self.tree = None
        body = self.tree.body if self.tree else []
        self.definitions = {name: statement for statement in body for name in _defined_names(statement)}

    def classes(self, names: list[str]) -> list[ast.ClassDef] | None:
        """The chain of classes `names` (outermost first), or None where the file does not define it."""
        chain: list[ast.ClassDef] = []
        body = self.tree.body if self.tree else []
        for name in names:
            found = next((s for s in body if isinstance(s, ast.ClassDef) and s.name == name), None)
            if found is None:
                return None
            chain.append(found)
            body = found.body
        return chain

    def bases(self, classes: list[ast.ClassDef]) -> list[ast.ClassDef]:
        """`classes` and every class they derive from that the file defines."""
        found: list[ast.ClassDef] = []
        waiting = list(classes)
        while waiting:
            cls = waiting.pop()
            if cls not in found:
                found.append(cls)
                names = [base.id for base in cls.bases if isinstance(base, ast.Name)]
                waiting += [d for n in names if isinstance(d := self.definitions.get(n), ast.ClassDef)]
        return found

    def tests_named(
        self, classes: list[str], name: str, anywhere: bool
    ) -> Iterator[tuple[list[ast.ClassDef], _Function]]:
        """Each function `name` with the classes it is collected in: in `classes` (or a class they derive from in
        the file) where given; else at module level, and, `anywhere`, in a module-level class too."""
        if self.tree is None:
            return
        if classes:
            chains = [chain] if (chain := self.classes(classes)) else []
        else:
            chains = [[]] + ([[s] for s in self.tree.body if isinstance(s, ast.ClassDef)] if anywhere else [])
        for chain in chains:
            for owner in self.bases(chain[-1:]) if chain else [self.tree]:
                for member in owner.body:
                    if isinstance(member, _Function) and member.name == name:
                        yield chain, member

    def scope(self, chain: list[ast.ClassDef], function: _Function) -> list[_Positioned]:
        """The nodes that can act on `function`, collected in the classes `chain` (module docstring)."""
        nodes: list[_Positioned] = [function]
        for cls in self.bases(chain):
            nodes += cls.decorator_list + cls.bases
            for member in cls.body:
                test = isinstance(member, _Function | ast.ClassDef) and member.name.lower().startswith("test")
                if member is not function and (not test or member in chain):
                    nodes.append(member)
        nodes += [statement for statement in (self.tree.body if self.tree else []) if _runs_for_every_test(statement)]
        return self._with_named(nodes)

    def shared_scope(self, used: set[str]) -> list[_Positioned]:
        """What of a conftest acts on a test that uses the names `used` (its fixtures among them): the hooks
        (`pytest_*`), autouse fixtures and code run at import, and the definitions they or the test name."""
        body = self.tree.body if self.tree else []
        hooks = [s for s in body if isinstance(s, _Function) and s.name.startswith("pytest_")]
        named = [self.definitions[name] for name in sorted(used & set(self.definitions))]
        return self._with_named([*(s for s in body if _runs_for_every_test(s)), *hooks, *named])

    def _with_named(self, nodes: list[_Positioned]) -> list[_Positioned]:
        """`nodes` and every definition of the file they name, and those name, to a fixpoint."""
        nodes = list(dict.fromkeys(nodes))
        named: set[str] = set()
        added = nodes
        while added:
            used = (_names_used(added) & set(self.definitions)) - named
            named |= used
            added = [self.definitions[name] for name in sorted(used) if self.definitions[name] not in nodes]
            nodes += added
        return nodes

    def text_of(self, nodes: list[_Positioned]) -> str:
        """The source of `nodes`; the whole file where it does not parse."""
        return "\n".join(self.source(node) for node in nodes) if self.tree else self.text

    def source(self, node: _Positioned) -> str:
        """The lines of a node, its decorators' first (slices: nothing is rebuilt from the tree)."""
        first = min([node.lineno] + [decorator.lineno for decorator in getattr(node, "decorator_list", [])])
        return "\n".join(self.lines[first - 1 : node.end_lineno])

    def opaque_decorators(self, chain: list[ast.ClassDef], function: _Function) -> list[str]:
        """The decorators of the test and its classes that come from elsewhere and may skip or expect a failure:
        neither defined in the file (read in the scope), nor saying what they do (`pytest.mark.skipif`,
        `unittest.expectedFailure`, `skip_if_32bit`), nor one that cannot (`parametrize`, `mock.patch`)."""
        opaque = []
        for decorator in [*function.decorator_list, *(d for cls in chain for d in cls.decorator_list)]:
            called = decorator.func if isinstance(decorator, ast.Call) else decorator
            root = called
            while isinstance(root, ast.Attribute | ast.Call):
                root = root.value if isinstance(root, ast.Attribute) else root.func
            last = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            defined = isinstance(root, ast.Name) and root.id in self.definitions
            text = self.source(decorator)
            said = any(words.search(text) for words in _WORDS.values())  # its own words say what it does
            if not (defined or said or last in _PLAIN_DECORATORS):
                opaque.append(text)
        return opaque


class RestoredSource:
    """The test side's source as restored before the run: `files`, test file or `conftest.py` path -> text."""

    def __init__(self, files: Mapping[str, str]) -> None:
        self._modules = {path: _Module(text) for path, text in files.items() if path.endswith(".py")}

    def can_report(self, test_id: str, status: str, name: str | None = None) -> bool:
        """Whether the restored source can make the test `test_id` report `status` (XFAIL or SKIPPED); `name`
        is the function to judge it by (a twin's original). A test whose function no file defines is believed."""
        path, classes, function_name = _locate(test_id, name)
        tests = [p for p in self._modules if PurePosixPath(p).name != "conftest.py"]
        found = False
        for module_path in [path] if path in tests else tests:
            module = self._modules[module_path]
            conftests = [self._modules[c] for c in conftests_above(module_path) if c in self._modules]
            scopes = [([], None)] if module.tree is None else module.tests_named(classes, function_name, path is None)
            for chain, function in scopes:
                found = True
                nodes = module.scope(chain, function) if function else []
                shared = "".join(conftest.text_of(conftest.shared_scope(_names_used(nodes))) for conftest in conftests)
                if _WORDS[status].search(module.text_of(nodes) + shared):
                    return True
                if function and module.opaque_decorators(chain, function):
                    return True
        return not found
