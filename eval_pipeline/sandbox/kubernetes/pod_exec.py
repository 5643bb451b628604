"""The Kubernetes backend's exec transport: an exec in a pod's environment container through the API's `exec`
subresource (`KubernetesExec`), a tool server's stdin and stdout over its websocket (`KubernetesChannel`)."""

import json
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL
from urllib3.exceptions import HTTPError as Urllib3Error
from websocket import WebSocketException

from eval_pipeline.common.outcomes import InfrastructureError, SandboxLost
from eval_pipeline.sandbox.base import SandboxError, ToolChannel
from eval_pipeline.sandbox.kubernetes.manifest import CONTAINER
from eval_pipeline.sandbox.pods.exec_transport import HARNESS_COMMAND_TIMEOUT_S, PodExec

API_FAILURES = (ApiException, Urllib3Error, WebSocketException, OSError)
API_TIMEOUT_S = 60  # one API request; a hung API server is an infrastructure error, not a hung trial


def exit_code_of(status: str, failure: Callable[[str], InfrastructureError]) -> int:
    """The exit code in an exec's final status message (its error channel); none means the exec was cut off."""
    try:
        message = json.loads(status)
        if message["status"] == "Success":
            return 0
        return int(message["details"]["causes"][0]["message"])
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise failure(f"the exec ended without an exit status ({status[:200]!r})") from error


class KubernetesChannel(ToolChannel):
    """A tool server's stdin and stdout over a Kubernetes exec stream (a websocket)."""

    def __init__(self, session: Any, pod: "KubernetesExec") -> None:
        self.session, self.pod, self.name = session, pod, pod.name
        self.stderr = ""  # the server's last words, for a broken session's message

    def send(self, data: bytes) -> None:
        if not self.session.is_open():
            raise SandboxLost(f"the tool server in pod {self.name} is gone")
        self.session.write_stdin(data.decode())

    def receive(self) -> bytes:
        try:
            while self.session.is_open():
                self.session.update(timeout=1)
                # Taken here, by the stream's one reader: websocket-client's reads are not thread-safe.
                self.stderr = (self.stderr + self.session.read_stderr(timeout=0))[-self.DIAGNOSTICS_CHARS :]
                if self.session.peek_stdout():
                    return self.session.read_stdout().encode()
        except (WebSocketException, OSError):  # closed under the read: the session ended
            return b""
        except TypeError:
            # `close` from the client's thread sets the socket to None between the read's poll and its
            # unregister, which websocket-client turns into a TypeError: an ended session, not a failure.
            if self.session.is_open():
                raise
            return b""
        return self.session.read_stdout().encode() if self.session.peek_stdout() else b""

    def close(self) -> None:
        self.session.close()

    def diagnostics(self) -> str:
        return self.stderr

    def failure(self, message: str) -> InfrastructureError:
        return self.pod.failure(message)


class KubernetesExec(PodExec):
    """Exec into a pod's environment container through the Kubernetes API (the `exec` subresource)."""

    def __init__(self, core: k8s.CoreV1Api, namespace: str, name: str) -> None:
        self.core, self.namespace, self.name = core, namespace, name

    def run(
        self, argv: list[str], timeout_s: float = HARNESS_COMMAND_TIMEOUT_S, private: str | None = None
    ) -> tuple[int, bytes, bytes]:
        """An exec has no environment of its own to give: `private` goes as one line on the command's stdin."""
        try:
            session = self._exec_stream(argv, stdin=private is not None)
            if private is not None:
                session.write_stdin(private + "\n")
            session.run_forever(timeout=timeout_s)
            if session.is_open():
                session.close()
                raise self.failure(f"no answer within {timeout_s:.0f} s: the connection to the pod was lost")
            stdout, stderr = session.read_stdout(), session.read_stderr()
            status = session.read_channel(ERROR_CHANNEL)
            session.close()
        except API_FAILURES as error:
            raise self.failure(f"exec failed: {error}") from error
        return exit_code_of(status, self.failure), stdout.encode(), stderr.encode()

    def _exec_stream(self, command: list[str], stdin: bool) -> Any:
        """An exec of `command` in the pod's container, its output streamed (not read whole)."""
        return stream(
            self.core.connect_get_namespaced_pod_exec,
            self.name,
            self.namespace,
            container=CONTAINER,
            command=command,
            stdin=stdin,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
        )

    def open_channel(self, argv: list[str], env: Mapping[str, str], first_line: str) -> ToolChannel:
        """An exec stream; the exec subresource takes no environment, so `env` is set by `/usr/bin/env` in argv
        (by path: the environment's venv comes first on PATH), where it names a variable."""
        variables = ["/usr/bin/env", *(f"{k}={v}" for k, v in env.items())] if env else []
        try:
            session = self._exec_stream([*variables, *argv], stdin=True)
        except API_FAILURES as error:
            raise self.failure(f"starting the tool server failed: {error}") from error
        channel = KubernetesChannel(session, self)
        channel.send(first_line.encode() + b"\n")
        return channel

    def failure(self, message: str) -> InfrastructureError:
        try:
            pod = self.core.read_namespaced_pod(self.name, self.namespace, _request_timeout=API_TIMEOUT_S)
        except ApiException as error:
            if error.status == 404:
                return SandboxLost(f"pod {self.name} is gone: {message}")
            return SandboxError(f"pod {self.name}: {message} (and reading it failed: {error.reason})")
        except API_FAILURES as error:
            return SandboxError(f"pod {self.name}: {message} (the API is unreachable: {error})")
        if pod.status.phase != "Running" or pod.metadata.deletion_timestamp:
            return SandboxLost(f"pod {self.name} is {pod.status.phase}: {message}")
        return SandboxError(f"pod {self.name}: {message}")
