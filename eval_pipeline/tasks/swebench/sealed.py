"""Sealed expectations: a failing graded test's expected values kept out of the test process, compared outside it.

Code under test runs in the test process and can make any test report any
status. Twins (canaries.py) make it guess which of k + 1 tests to pass, but a
forger that runs a group's code and compares what it returns with each
member's expected value can often tell the original (benchmarks/twin_forger.py).
So where the launcher runs pytest (pytest_run.py), an equality assertion of a
FAIL_TO_PASS test whose expected side is a literal (`assert actual == 2.5`,
`self.assertEqual(actual, "hello-world")`) is sealed: the harness rewrites the
statement to hand the actual side's value to the launcher,

    __import__("_eval_pipeline_seal").seal(SITE, (actual))

which sends it on the report channel with the test's reports, and keeps the
literal itself. The test passes only if its run passed and each of its sealed
sites reported, once, a value equal to the literal (`judge`). The literal is
nowhere the test process can read: the test patch is removed before the run,
the rewritten file replaces the patched one, and the values are compared in the
harness. So the process can lie about what the code returned, but to pass it must
report the very value the test expects: forging a sealed test takes what
passing it honestly takes, the value, and a forger that reports what the code
returns fails where the code does.

A value reaches the harness as plain data (`decoded`): None, booleans, numbers
(int, float, complex, Decimal: numbers of other types by the ABC they register
with, numpy scalars by their `item()`), strings and bytes (subclasses as their
plain value), and tuples, lists, sets and dicts of them. Anything else is
`opaque` and equals nothing, so a sealed test whose code returns such a value
fails where the unsealed comparison might have passed (a custom `__eq__`).

A sealed statement's literal is out of reach only if the test patch wrote it: a
test is sealed where one of its statements is not in the file's version at the
base commit (which git shows), and left to the twins otherwise. A statement is
sealed only where an honest passing run reaches it exactly once:
a statement of the test function's own body, in a function that neither returns
nor yields, carries no skip or expected-failure mark (nor its class, nor its
module's `pytestmark`), and is defined once in the test patch's files. A sealed
test gets no twins: its expected values are out of reach, which is more than twins give.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from eval_pipeline.grading.verdict import FAILED
from eval_pipeline.tasks.swebench.canaries import SourceFile, graded_name
from eval_pipeline.tasks.swebench.pytest_launcher import SEAL_MODULE

__all__ = ["Sealed", "decoded", "judge", "seal_expectations"]

_ASSERTING_CALLS = {"assertEqual", "assertEquals"}
_MARKED = re.compile(r"skip|xfail")


@dataclass(frozen=True)
class Sealed:
    """The test files' new texts (path -> text, those that changed) and each sealed test's expected values (its
    function's name -> the literal of each site, in site order)."""

    files: dict[str, str] = field(default_factory=dict)
    expected: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def record(self) -> dict[str, object]:
        """What a verdict keeps: each sealed test and how many sites it has (never the values)."""
        return {"sealed": {name: len(values) for name, values in self.expected.items()}}


@dataclass(frozen=True)
class _Site:
    """A statement to rewrite: its span in the file (1-based lines, byte columns), its actual side's source and
    the expected side's value."""

    first: int
    start: int
    last: int
    end: int
    actual: str
    expected: Any


def _literal(node: ast.expr) -> tuple[bool, Any]:
    """Whether `node` is a literal (what `ast.literal_eval` takes), and its value."""
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _sides(statement: ast.stmt) -> tuple[ast.expr, ast.expr] | None:
    """The two sides an equality assertion statement compares, or None if it is not one."""
    if isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Compare):
        test = statement.test
        if len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            return test.left, test.comparators[0]
    if isinstance(statement, ast.Expr) and isinstance(call := statement.value, ast.Call):
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        if name in _ASSERTING_CALLS and len(call.args) == 2 and all(k.arg == "msg" for k in call.keywords):
            return call.args[0], call.args[1]
    return None


def _site(statement: ast.stmt, text: str) -> _Site | None:
    """The statement as a site: an equality assertion one side of which (only) is a literal."""
    sides = _sides(statement)
    if sides is None:
        return None
    (left_literal, left), (right_literal, right) = _literal(sides[0]), _literal(sides[1])
    if left_literal == right_literal:
        return None
    actual, expected = (sides[1], left) if left_literal else (sides[0], right)
    source = ast.get_source_segment(text, actual)
    if source is None or statement.end_lineno is None or statement.end_col_offset is None:
        return None
    return _Site(
        statement.lineno, statement.col_offset, statement.end_lineno, statement.end_col_offset, source, expected
    )


def _marked(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, whole: bool) -> bool:
    """Whether a decorator of `node` (or, `whole`, any of its source) mentions a skip or an expected failure."""
    first = (node.decorator_list[0] if node.decorator_list else node).lineno - 1
    last = node.end_lineno if whole else node.lineno
    return bool(_MARKED.search("".join(lines[first:last])))


def _module_marked(tree: ast.Module, text: str) -> bool:
    """Whether the module sets a `pytestmark` that mentions a skip or an expected failure."""
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and "pytestmark" in ast.dump(node):
            if _MARKED.search(ast.get_source_segment(text, node) or ""):
                return True
    return False


def _leaves_early(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the function may return or yield (an honest run could pass without reaching a site)."""
    return any(isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) for node in ast.walk(function))


def _test_functions(tree: ast.Module) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None]]:
    """Test functions at module level and in classes at module level, with their class."""
    found = []
    for node in tree.body:
        owner = node if isinstance(node, ast.ClassDef) else None
        for member in node.body if isinstance(node, ast.ClassDef) else [node]:
            if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((member, owner))
    return found


def _rewritten(text: str, sites: Sequence[_Site], numbers: Sequence[int]) -> str:
    """`text` with each site's statement replaced by the seal of its actual side, on as many lines."""
    lines = text.splitlines(keepends=True)
    for site, number in sorted(zip(sites, numbers, strict=True), key=lambda pair: -pair[0].first):
        head = lines[site.first - 1].encode()[: site.start].decode()
        tail = lines[site.last - 1].encode()[site.end :].decode()
        padding = "\n" * (site.last - site.first - site.actual.count("\n"))
        call = f"__import__({SEAL_MODULE!r}).seal({number}, ({site.actual}{padding}))"
        lines[site.first - 1 : site.last] = [head + call + tail]
    return "".join(lines)


def _readable(site: _Site, lines: list[str], base: str) -> bool:
    """Whether the site's statement, as written, is in the file's version at the base commit (`base`, its
    whitespace collapsed), which git shows a forger."""
    statement = "".join(lines[site.first - 1 : site.last])
    return " ".join(statement.split()) in base


def seal_expectations(files: Mapping[str, SourceFile], failing: Sequence[str]) -> Sealed:
    """Seal the sites of the `failing` graded tests (function names) that the test `files` (path -> its texts)
    define once, where a site's statement is not in the file's base version (a test whose every site is there is
    left to the twins); a file that cannot be parsed is left as it is."""
    texts = {path: source.text for path, source in files.items()}
    bases = {path: " ".join((source.base or "").split()) for path, source in files.items()}
    parsed: dict[str, tuple[ast.Module, list[str]]] = {}
    for path, text in texts.items():
        try:
            parsed[path] = (ast.parse(text), text.splitlines(keepends=True))
        except (SyntaxError, ValueError):
            continue
    defined: dict[str, list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None]]] = {}
    for path, (tree, _) in parsed.items():
        for function, owner in _test_functions(tree):
            defined.setdefault(function.name, []).append((path, function, owner))
    by_file: dict[str, list[tuple[str, _Site]]] = {}
    expected: dict[str, tuple[Any, ...]] = {}
    for name in dict.fromkeys(failing):
        if len(defined.get(name, [])) != 1:
            continue
        path, function, owner = defined[name][0]
        tree, lines = parsed[path]
        if _leaves_early(function) or _marked(lines, function, True) or (owner and _marked(lines, owner, False)):
            continue
        if _module_marked(tree, texts[path]):
            continue
        sites = [site for statement in function.body if (site := _site(statement, texts[path]))]
        if sites and not all(_readable(site, lines, bases[path]) for site in sites):
            by_file.setdefault(path, []).extend((name, site) for site in sites)
            expected[name] = tuple(site.expected for site in sites)
    written = {}
    for path, named in by_file.items():
        numbering: dict[str, int] = {}
        numbers = []
        for name, _ in named:
            numbers.append(numbering.get(name, 0))
            numbering[name] = numbers[-1] + 1
        written[path] = _rewritten(texts[path], [site for _, site in named], numbers)
    return Sealed(written, expected)


class _Opaque:
    """A value the launcher could not send as data: equal to nothing."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<opaque {self.kind}>"


def decoded(encoded: Any) -> Any:
    """The plain value the launcher sent (pytest_launcher.py, `sealed_value`); an opaque value where it sent
    none or the encoding is not one it makes."""
    try:
        return _decoded(encoded)
    except (TypeError, ValueError, KeyError, IndexError, InvalidOperation, OverflowError, RecursionError):
        return _Opaque("malformed")


def _decoded(encoded: Any) -> Any:
    kind, *rest = encoded
    if kind == "none":
        return None
    value = rest[0]
    scalars = {
        "bool": lambda: bool(value) if isinstance(value, bool) else _Opaque("malformed"),
        "int": lambda: int(value) if isinstance(value, str) and len(value) < 5000 else _Opaque("malformed"),
        "float": lambda: float(value),
        "complex": lambda: complex(value),
        "decimal": lambda: Decimal(value),
        "str": lambda: value if isinstance(value, str) else _Opaque("malformed"),
        "bytes": lambda: bytes.fromhex(value),
        "opaque": lambda: _Opaque(str(value)),
    }
    if kind in scalars:
        return scalars[kind]()
    containers = {"tuple": tuple, "list": list, "set": frozenset}
    if kind in containers:
        return containers[kind](_decoded(item) for item in value)
    if kind == "dict":
        return {_decoded(pair[0]): _decoded(pair[1]) for pair in value}
    raise ValueError(kind)


def _equal(reported: Any, expected: Any) -> bool:
    """Whether the reported value equals the literal, as `==` between them would say (a NaN equals nothing)."""
    try:
        return bool(reported == expected)
    except Exception:  # a comparison of plain values that raises: not equal
        return False


def judge(
    statuses: dict[str, str], sealed_values: Mapping[str, list[Any]], sealed: Sealed, passed: Sequence[str]
) -> dict[str, str]:
    """Fail each sealed test reported as one of the `passed` statuses whose sites did not each report, once, the
    value its literal holds; `sealed_values` is what the channel carried by test id. Returns why each failed."""
    failed = {}
    for test_id, status in statuses.items():
        expected = sealed.expected.get(graded_name(test_id))
        if expected is None or status not in passed:
            continue
        reported: dict[int, list[Any]] = {}
        for record in sealed_values.get(test_id, []):
            if isinstance(record, list) and len(record) == 2 and isinstance(record[0], int):
                reported.setdefault(record[0], []).append(decoded(record[1]))
        for site, value in enumerate(expected):
            values = reported.get(site, [])
            if len(values) != 1 or not _equal(values[0], value):
                shown = "no value" if not values else f"{len(values)} values" if len(values) > 1 else "another value"
                failed[test_id] = f"sealed assertion {site + 1} of {len(expected)} reported {shown}"
                break
    for test_id in failed:
        statuses[test_id] = FAILED
    return failed
