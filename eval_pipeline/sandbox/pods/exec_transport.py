"""The exec transport: how a harness command reaches a process in an environment pod, and its answer comes back.

Every command runs as root in the pod through one exec (`PodExec.run`): its argv on the exec's command line,
anything private (a runner's request, a chunk of a harness file) as one line on the exec's stdin, which no
trial's uid can read; its exit code, stdout and stderr come back. A tool server's session is an exec whose stdin
and stdout stay open (`PodExec.open_channel`). A workspace's
requests reach the command runner in the pod through a `RunnerTransport`: an exec of their own each
(`ExecPerRequest`), or one long-lived runner session (container/session.py). The container backend reaches its
pods through the Docker Engine API (container/engine_exec.py), the Kubernetes backend through the API's exec
subresource (kubernetes/pod_exec.py); the workspace built on either (workspace.py) is the same.
"""

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from eval_pipeline.common.outcomes import InfrastructureError
from eval_pipeline.sandbox.base import RunnerEnded, SandboxError, ToolChannel
from eval_pipeline.sandbox.runner.request import RunRequest
from eval_pipeline.sandbox.tool_runtime import ToolRuntime

# Every harness process in a pod runs on the runtime's own interpreter, never on the environment's `python3`
# (first on PATH, and possibly Python 3.6, or a trial's own): tool_runtime.py.
HARNESS = ToolRuntime()
# How long a harness command (a workspace copy, a file transfer) may take before its exec counts as hung.
HARNESS_COMMAND_TIMEOUT_S = 1800.0


class PodExec(ABC):
    """Runs a command as root in one pod and returns (exit code, stdout, stderr)."""

    name: str

    @abstractmethod
    def run(
        self, argv: list[str], timeout_s: float = HARNESS_COMMAND_TIMEOUT_S, private: str | None = None
    ) -> tuple[int, bytes, bytes]:
        """Run `argv`; a failure to reach the pod, or no answer within `timeout_s`, raises a typed
        InfrastructureError. Commands time themselves out in the pod; `timeout_s` catches a lost connection.

        `private` (one line: a request, a file's chunk) reaches `argv`'s root process and no other uid, as a
        line on its stdin (the runner's command line reads a request so: runner/cli.py), of any length.
        """

    @abstractmethod
    def failure(self, message: str) -> InfrastructureError:
        """Why a command failed for reasons other than itself: SandboxLost when the pod is gone, else SandboxError."""

    @abstractmethod
    def open_channel(self, argv: list[str], env: Mapping[str, str], first_line: str) -> ToolChannel:
        """Start `argv` as root in the pod with `env`, its stdin and stdout a channel; `first_line` is its
        first line of input (private, like `run`'s)."""


class RunnerTransport(ABC):
    """How a workspace's requests reach the command runner in its pod (runner/) and the answers come back."""

    @abstractmethod
    def ask(self, request: RunRequest, timeout_s: float) -> dict[str, Any]:
        """The runner's answer to `request`, within `timeout_s`. A runner that ended with an exit of its own while
        its pod runs raises RunnerEnded; an answer lost or cut off on its way is the transport's failure."""

    def close(self) -> None:  # noqa: B027 - a no-op for a transport that keeps nothing open
        """Nothing more will be asked: what serves the requests may go."""


class ExecPerRequest(RunnerTransport):
    """Each request to a runner in an exec of its own (runner/cli.py), on the exec's private input."""

    def __init__(self, pod: PodExec) -> None:
        self.pod = pod

    def ask(self, request: RunRequest, timeout_s: float) -> dict[str, Any]:
        exit_code, stdout, stderr = self.pod.run(HARNESS.runner(), timeout_s=timeout_s, private=request.to_json())
        if exit_code != 0 or not stdout:
            failure = self.pod.failure(f"the command runner failed (exit {exit_code}): {stderr[-2000:]!r}")
            if exit_code is not None and type(failure) is SandboxError:  # the engine reported the runner's own end
                raise RunnerEnded(str(failure)) from None
            raise failure
        try:
            answer = json.loads(stdout)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):  # cut off on its way: the transport's failure, retried
            raise self.pod.failure(f"the command runner's answer was cut off: {stdout[-200:]!r}")
        return answer
