"""Patches written to forge a verdict, as a hostile agent would leave them: each door of the test run.

Each builder takes the demo instance it attacks and returns a git patch that
fixes nothing. Without the harness's defences each of them resolves every
demo code issue (the red team's finding in issue 19).
"""

import difflib
from collections.abc import Callable

from eval_pipeline.benchmark import Benchmark, Instance
from eval_pipeline.gitutil import git

# A `pytest` that runs nothing and writes a JUnit report passing every test it finds in the files it is given.
SHADOW_PYTEST = """import re, sys
args = sys.argv[1:]
junit = next(arg.split("=", 1)[1] for arg in args if arg.startswith("--junitxml="))
cases = []
for path in [arg for arg in args if arg.endswith(".py")]:
    for name in re.findall(r"def (test_\\w+)", open(path).read()):
        cases.append('<testcase classname="%s" name="%s" file="%s"/>' % (path[:-3].replace("/", "."), name, path))
open(junit, "w").write("<testsuite>%s</testsuite>" % "".join(cases))
"""
# A plugin that reports every test as passed.
FORCE_PASS = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
# Code the tests import that rewrites pytest's report objects from inside the test process.
REPORT_REWRITE = """
import _pytest.reports

_original_init = _pytest.reports.TestReport.__init__


def _passed(self, *args, **kwargs):
    _original_init(self, *args, **kwargs)
    self.outcome = "passed"


_pytest.reports.TestReport.__init__ = _passed
"""


def new_files(files: dict[str, str]) -> str:
    """A git patch adding `files` (path -> text)."""
    patch = ""
    for path, text in files.items():
        lines = text.splitlines()
        body = "".join(f"+{line}\n" for line in lines)
        patch += f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        patch += f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    return patch


def appended(path: str, original: str, addition: str) -> str:
    """A git patch appending `addition` to the file at `path`, whose text is `original`."""
    diff = difflib.unified_diff(
        original.splitlines(True), (original + addition).splitlines(True), f"a/{path}", f"b/{path}"
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(diff)


def fixed_module(instance: Instance) -> str:
    """The module the instance's gold patch fixes: code the tests import."""
    return next(line[6:] for line in instance.patch.splitlines() if line.startswith("+++ b/"))


def report_rewrite(benchmark: Benchmark, instance: Instance) -> str:
    module = fixed_module(instance)
    original = git(["show", f"{instance.base_commit}:{module}"], benchmark.source.location(instance.repo))
    return appended(module, original, REPORT_REWRITE)


FORGERIES: dict[str, Callable[[Benchmark, Instance], str]] = {
    "root pytest.py": lambda benchmark, instance: new_files({"pytest.py": SHADOW_PYTEST}),
    ".pytest.ini plugin": lambda benchmark, instance: new_files(
        {".pytest.ini": "[pytest]\naddopts = -p forcepass\n", "forcepass.py": FORCE_PASS}
    ),
    "pytest.toml plugin": lambda benchmark, instance: new_files(
        {"pytest.toml": '[pytest]\naddopts = ["-p", "forcepass"]\n', "forcepass.py": FORCE_PASS}
    ),
    "conftest.py beside the tests": lambda benchmark, instance: new_files({"tests/conftest.py": FORCE_PASS}),
    "in-process report rewriting": report_rewrite,
}
