"""The harness's way into pytest, copied into each grading workspace and run there by the environment's Python.

    python pytest_launcher.py (module|script) PYTEST_ARGS...

`python -m pytest` puts the repository first on sys.path before it imports
pytest, so a patch's `pytest.py` at the root replaces the runner. Here pytest,
the plugins it ships and the modules it imports late (pdb and its kin) are
imported while sys.path holds only the environment; the repository is put on
the path afterwards, as `python -m` would (`module`), or not at all, as the
`pytest` script runs (`script`).

An expected failure declared by a call (`pytest.xfail()`), not by a marker,
is labelled in the report: code under test can make that call, and the grader
does not count such a test as passing (grading.py).

Runs on every Python and pytest an environment may have (SWE-bench's go back
to Python 3.6 and pytest 4): no syntax or API newer than those.
"""

import os
import sys

XFAIL_CALLED = ("eval_pipeline", "xfail_called")
# Standard modules pytest imports only when it needs them: imported now, before the repository can shadow them.
LATE_IMPORTS = ("pdb", "bdb", "cmd", "code", "codeop", "doctest", "readline", "unittest")


def _import_runner():
    """pytest, its built-in plugins and the modules they import late, from the environment only."""
    sys.path.pop(0)  # this file's directory: nothing of the harness's is for the tests to import
    import pytest
    from _pytest.config import default_plugins

    for name in ["_pytest." + plugin for plugin in default_plugins] + list(LATE_IMPORTS):
        try:
            __import__(name)
        except ImportError:  # a name this pytest lists but ships elsewhere, a module this Python lacks
            pass
    return pytest


def _xfail_label(pytest):
    class XfailLabel:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(self, item, call):
            outcome = yield
            report = outcome.get_result()
            marked = item.get_closest_marker("xfail") if hasattr(item, "get_closest_marker") else None
            if hasattr(report, "wasxfail") and marked is None and hasattr(item, "user_properties"):
                item.user_properties.append(XFAIL_CALLED)

    return XfailLabel()


def main(argv):
    mode = argv[0]
    pytest = _import_runner()
    if mode == "module":
        sys.path.insert(0, os.getcwd())
    return pytest.main(argv[1:], plugins=[_xfail_label(pytest)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
