"""The runner's command line (cli.py), run as `python -I <the runner's directory> [option]`.

Run by path, the directory is sys.path's first entry: it is taken off (its modules' names would shadow any
module of the same name) and entered as the package `eval_pipeline.sandbox.runner` (entry.py).
"""

import importlib
import sys

if __name__ == "__main__":
    if not __package__:  # run by path, not as `python -m eval_pipeline.sandbox.runner`
        from entry import enter_package

        enter_package(sys.path.pop(0))
    sys.exit(importlib.import_module("eval_pipeline.sandbox.runner.cli").main(sys.argv[1:]))
