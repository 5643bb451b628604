"""How a process that runs the runner's directory by path enters it as the package `eval_pipeline.sandbox.runner`.

The runner's modules import one another by that name. Where eval_pipeline is not installed (a container's
runtime) or must not be imported whole (the local backend's runner, a small process of the standard library
alone), the directory is registered under that name, its parents as empty packages: none of eval_pipeline's own
code runs. Such a process (the runner's command line, `__main__.py`, run as `python -I <the runner's directory>`;
the tool server run as a script beside the directory) puts the directory first on sys.path, imports this module
as `entry`, and takes the directory off sys.path again as it enters it.
"""

import importlib.util
import os
import sys
import types

PACKAGE = "eval_pipeline.sandbox.runner"
# The runner's directory, which a process runs by path (`python -I DIRECTORY [option]`) and a runtime ships whole.
DIRECTORY = os.path.dirname(os.path.abspath(__file__))


def enter_package(directory: str) -> None:
    """Import `directory` (the runner's) as PACKAGE, unless a package of that name is imported already."""
    if PACKAGE in sys.modules:
        return
    for parent in ("eval_pipeline", "eval_pipeline.sandbox"):
        if parent not in sys.modules:
            module = types.ModuleType(parent)
            module.__path__ = []
            sys.modules[parent] = module
    spec = importlib.util.spec_from_file_location(
        PACKAGE, os.path.join(directory, "__init__.py"), submodule_search_locations=[directory]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
