"""The runner's command line, on the harness's interpreter (the local backend's) or the tool runtime's
(tool_runtime.py: in every container and pod, as root):

- no option: run the request on stdin's first line (`request.RunRequest.from_json`) and print its result as one
  line of JSON, the command dropping to the request's uid;
- `--serve`: the local backend's runner (`serve.serve`); `--session`: a container workspace's
  (`serve.serve_session`);
- `--reap`: an environment pod's PID 1 (`processes.reap_forever`);
- `--sweep UID`: end a trial in a pod (`processes.sweep_uid`);
- `--usage PATH...`: print what the files under the paths take of the disk (`quota.allocated_bytes`).
"""

import json
import sys

from eval_pipeline.sandbox.runner.namespaces import ViewUnavailable
from eval_pipeline.sandbox.runner.processes import reap_forever, sweep_uid
from eval_pipeline.sandbox.runner.quota import allocated_bytes
from eval_pipeline.sandbox.runner.request import RunRequest
from eval_pipeline.sandbox.runner.run import run_limited
from eval_pipeline.sandbox.runner.serve import serve, serve_session

__all__ = ["main"]


def main(arguments: list[str]) -> str | None:
    """Do what `arguments` ask; what `sys.exit` is given (a message where the view could not be given)."""
    option = arguments[:1]
    if option == ["--reap"]:
        reap_forever()
    elif option == ["--sweep"]:
        sweep_uid(int(arguments[1]))
    elif option == ["--serve"]:
        serve()
    elif option == ["--session"]:
        serve_session()
    elif option == ["--usage"]:
        print(allocated_bytes(arguments[1:]))
    else:
        try:
            print(json.dumps(run_limited(RunRequest.from_json(sys.stdin.readline()))))
        except ViewUnavailable as error:
            return f"{error} (the engine's seccomp profile or the kernel forbids user namespaces)"
    return None
