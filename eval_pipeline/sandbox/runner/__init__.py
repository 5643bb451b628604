"""The command runner: one shell command run under limits, and a report of what it did.

Every command of a trial goes through it: the local backend's in a small process of its own
(sandbox/command_runner.py), the container and Kubernetes backends' inside the container, as root on the tool
runtime's interpreter (tool_runtime.py ships this directory), the tool server's in its own process. Standard
library only: it runs where neither the harness nor its dependencies are installed.

One module per concern, each usable alone:
- `request`: what is asked (`RunRequest`, its `View` and `Quota`), crossing processes as one line of JSON;
- `result`: what is reported (`RunResult`);
- `capture`: the output, capped; `drainer`: the output that processes left running still hold, read on;
  `processes`: the process group, the timeout, the processes left running, a trial uid's processes; `memory`:
  the memory ceiling and OOM kills; `quota`: the disk quota;
- `namespaces`, `mounts`, `sockets`: the command's own view of the system; `read_back`: files read back;
- `run`: `run_limited`, composing them; `serve` and `cli`: the loops and the command line; `entry`: how the
  directory is entered when run by path.
"""

from eval_pipeline.sandbox.runner.namespaces import ViewUnavailable
from eval_pipeline.sandbox.runner.request import Quota, RequestError, RunRequest, View
from eval_pipeline.sandbox.runner.result import ReadBackResult, RunResult
from eval_pipeline.sandbox.runner.run import run_limited

__all__ = [
    "Quota",
    "ReadBackResult",
    "RequestError",
    "RunRequest",
    "RunResult",
    "View",
    "ViewUnavailable",
    "run_limited",
]
