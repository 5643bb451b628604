"""The container backend's exec transport: an exec in a container through the Docker Engine API (`EngineExec`),
and an exec's stdin and stdout as a channel on the engine's socket (`EngineChannel`)."""

import socket
import struct
from collections.abc import Mapping

import docker.errors
from docker.models.containers import Container

from eval_pipeline.common.outcomes import InfrastructureError, SandboxLost
from eval_pipeline.sandbox.base import SandboxError, ToolChannel
from eval_pipeline.sandbox.pods.engine import ENGINE_FAILURES, engine_errors
from eval_pipeline.sandbox.pods.exec_transport import HARNESS_COMMAND_TIMEOUT_S, PodExec


class EngineExec(PodExec):
    """Exec into a container through the Docker Engine API."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.name = container.name

    def run(
        self, argv: list[str], timeout_s: float = HARNESS_COMMAND_TIMEOUT_S, private: str | None = None
    ) -> tuple[int, bytes, bytes]:
        """Without `private`, the engine's socket has its own long timeout (CLIENT_TIMEOUT_S); with it, the
        exec's own socket waits `timeout_s` at most. `private` goes as one line on the exec's stdin: a root process's, which no trial uid can read, and of
        any length (an exec's environment holds at most 128 KiB a variable, so an agent's long command there
        failed as the engine's error, unscored)."""
        api = self.container.client.api
        try:
            exec_id = api.exec_create(self.container.id, argv, user="0", stdin=private is not None)["Id"]
            if private is None:
                stdout, stderr = api.exec_start(exec_id, demux=True)
            else:
                stdout, stderr = self._answer_to(api.exec_start(exec_id, socket=True)._sock, private, timeout_s)
            return api.exec_inspect(exec_id)["ExitCode"], stdout or b"", stderr or b""
        except ENGINE_FAILURES as error:
            raise self.failure(f"exec failed: {error}") from error

    def _answer_to(self, exec_socket: socket.socket, line: str, timeout_s: float) -> tuple[bytes, bytes]:
        """Send `line` to the exec's stdin and read its output to the end: stdout whole, stderr's tail. An answer
        cut short (the socket closed or silent past `timeout_s`) fails to parse where it is read."""
        exec_socket.settimeout(timeout_s)
        channel = EngineChannel(exec_socket, self)
        try:
            channel.send(line.encode() + b"\n")
            stdout = b"".join(iter(channel.receive, b""))
        finally:
            channel.close()
        return stdout, channel.stderr

    def open_channel(self, argv: list[str], env: Mapping[str, str], first_line: str) -> ToolChannel:
        api = self.container.client.api
        try:
            exec_id = api.exec_create(self.container.id, argv, stdin=True, user="0", environment=dict(env))["Id"]
            channel = EngineChannel(api.exec_start(exec_id, socket=True)._sock, self)
        except ENGINE_FAILURES as error:
            raise self.failure(f"starting the tool server failed: {error}") from error
        channel.send(first_line.encode() + b"\n")
        return channel

    def failure(self, message: str) -> InfrastructureError:
        with engine_errors(self.name):
            try:
                self.container.reload()
                state = self.container.status
            except docker.errors.NotFound:
                state = "removed"
        if state != "running":
            return SandboxLost(f"{self.name} is {state}: {message}")
        return SandboxError(f"{self.name}: {message}")


class EngineChannel(ToolChannel):
    """An exec's stdin and stdout on the engine's socket, which carries the output in frames (an 8-byte
    header: stream, padding, big-endian size) since the exec has no terminal; stderr frames are dropped."""

    def __init__(self, exec_socket: socket.socket, engine_exec: "EngineExec") -> None:
        self.socket, self.engine_exec, self.name = exec_socket, engine_exec, engine_exec.name
        self.pending = b""
        self.stderr = b""

    def send(self, data: bytes) -> None:
        try:
            self.socket.sendall(data)
        except OSError as error:
            raise SandboxLost(f"the tool server in {self.name} is gone: {error}") from error

    def _read(self, size: int) -> bytes:
        while len(self.pending) < size:
            try:
                chunk = self.socket.recv(65536)
            except OSError:  # closed under the read: the session ended
                return b""
            if not chunk:
                return b""
            self.pending += chunk
        data, self.pending = self.pending[:size], self.pending[size:]
        return data

    def receive(self) -> bytes:
        while header := self._read(8):
            stream, size = header[0], struct.unpack(">I", header[4:])[0]
            payload = self._read(size)
            if stream == 1 or not payload:
                return payload
            self.stderr = (self.stderr + payload)[-self.DIAGNOSTICS_CHARS :]
        return b""

    def diagnostics(self) -> str:
        return self.stderr.decode(errors="replace")

    def failure(self, message: str) -> InfrastructureError:
        return self.engine_exec.failure(message)

    def close(self) -> None:
        try:
            self.socket.shutdown(socket.SHUT_RDWR)  # the server sees its stdin end; a read under way returns
        except OSError:
            pass
        self.socket.close()
