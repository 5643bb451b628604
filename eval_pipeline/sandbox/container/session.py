"""The container backend's runner transport: a workspace's command runner in one long-lived exec of its container
(`RunnerSession`), every command of the workspace a numbered request on that exec's stdin and its answer a
numbered line on its stdout; `SessionTransport` keeps one session per workspace, started again after a failure."""

import json
import threading
import time
from typing import Any

from eval_pipeline.common.outcomes import InfrastructureError, SandboxLost
from eval_pipeline.sandbox.base import RunnerEnded, SandboxError
from eval_pipeline.sandbox.container.engine_exec import EngineChannel, EngineExec
from eval_pipeline.sandbox.pods.engine import ENGINE_FAILURES
from eval_pipeline.sandbox.pods.exec_transport import HARNESS, RunnerTransport
from eval_pipeline.sandbox.runner.request import RunRequest

STOPPED_CHECK_TIMEOUT_S = 60.0  # for the exec asking whether a runner that gave no answer in time is stopped
EXEC_END_POLLS = 20  # times a session's exec is asked whether it ended, 0.1 s apart, once its stream closed


class RunnerSession:
    """A workspace's command runner in one exec (runner/serve.py: serve_session): a request and its answer are JSON
    lines on the exec's stdin and stdout, each numbered, so that an answer meant for an earlier request (one
    that timed out) is never taken for the current one."""

    def __init__(self, engine_exec: EngineExec) -> None:
        self.engine_exec = engine_exec
        api = engine_exec.container.client.api
        argv = HARNESS.runner("--session")
        try:
            self.exec_id = api.exec_create(engine_exec.container.id, argv, stdin=True, user="0")["Id"]
            self.channel = EngineChannel(api.exec_start(self.exec_id, socket=True)._sock, engine_exec)
        except ENGINE_FAILURES as error:
            raise engine_exec.failure(f"starting the command runner failed: {error}") from error
        self.asked = 0
        self.pending = b""
        self.pid: int | None = None  # the runner's, in the container (its first line)

    def ask(self, request: RunRequest, timeout_s: float) -> dict[str, Any]:
        """The answer to `request`. A runner whose answer never comes raises: RunnerEnded when it ended (the trial's
        processes may kill it: root in a task's container) while its container runs, the transport's failure
        otherwise; either way the session is done."""
        self.asked += 1
        deadline = time.monotonic() + timeout_s
        self.channel.socket.settimeout(timeout_s)
        try:
            self.channel.send(json.dumps({"id": self.asked, "request": request.to_fields()}).encode() + b"\n")
        except SandboxLost:  # its end of the stream closed: killed since the last command, or the container gone
            raise self._ended("the command runner had ended before the command") from None
        while (line := self._line()) is not None:
            try:
                answer = json.loads(line)
            except ValueError:
                raise self.engine_exec.failure(f"the command runner's answer was cut off: {line[-200:]!r}") from None
            number = answer.pop("id", None)
            if number == 0:
                self.pid = answer.get("pid")
            if number != self.asked:
                continue  # the runner's first line, or a late answer to an earlier request
            if not ({"runner_ended", "error", "view_unavailable"} & answer.keys()):
                return answer
            failure = self.engine_exec.failure(f"the command runner ended: {answer}")
            raise RunnerEnded(str(failure)) if type(failure) is SandboxError else failure
        if time.monotonic() < deadline:
            raise self._ended(f"the command runner ended: {self.channel.diagnostics()[-2000:]!r}")
        if self._stopped():  # by the trial's processes: SIGSTOP holds a runner until any timeout
            raise self._ended(f"the command runner (pid {self.pid}) was stopped")
        raise self.engine_exec.failure(f"no answer from the command runner within {timeout_s:.0f} s")

    def _stopped(self) -> bool:
        """Whether the runner is stopped; if so it is killed, and its exec ends."""
        if self.pid is None:
            return False
        script = f"grep -q '^State:[[:space:]]*[tT]' /proc/{self.pid}/status && kill -9 {self.pid}"
        exit_code, _, _ = self.engine_exec.run(["sh", "-c", script], timeout_s=STOPPED_CHECK_TIMEOUT_S)
        return exit_code == 0

    def _ended(self, message: str) -> InfrastructureError:
        """RunnerEnded when the engine reports the runner's exec ended while its container runs; the container's
        or the transport's failure otherwise."""
        failure = self.engine_exec.failure(message)
        if type(failure) is SandboxError and self._exec_ended():
            return RunnerEnded(str(failure))
        return failure

    def _exec_ended(self) -> bool:
        api = self.engine_exec.container.client.api
        for _ in range(EXEC_END_POLLS):  # the engine notes the end a moment after the stream closes
            try:
                if not api.exec_inspect(self.exec_id)["Running"]:
                    return True
            except ENGINE_FAILURES:
                return False
            time.sleep(0.1)
        return False

    def _line(self) -> bytes | None:
        while b"\n" not in self.pending:
            chunk = self.channel.receive()  # b"" once the exec's output ends, or its socket times out
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line

    def close(self) -> None:
        self.channel.close()  # the runner's stdin ends, and with it the runner


class SessionTransport(RunnerTransport):
    """A workspace's requests, one at a time, to one runner session, started by the first request and again by the
    first after a failure."""

    def __init__(self, engine_exec: EngineExec) -> None:
        self.engine_exec = engine_exec
        self._session: RunnerSession | None = None
        self._asking = threading.Lock()

    def ask(self, request: RunRequest, timeout_s: float) -> dict[str, Any]:
        with self._asking:
            self._session = self._session or RunnerSession(self.engine_exec)
            try:
                return self._session.ask(request, timeout_s)
            except InfrastructureError:
                self.close()  # the next command starts another runner
                raise

    def close(self) -> None:
        if self._session:
            self._session.close()
            self._session = None
