"""The runner's loops: the local backend's runner process (`serve`) and a container workspace's (`serve_session`).

A request arrives as one line on stdin, never as an argument or in the exec's environment: a process's command
line is readable by every uid in the pod, and the request carries the agent's secrets (`pass_env`), while a
root process's stdin is not; and an environment variable holds at most 128 KiB, which an agent's command may
pass.
"""

import json
import os
import select
import signal
import sys
import traceback
from typing import Any

from eval_pipeline.sandbox.runner.libc import LIBC, PR_SET_PDEATHSIG, set_dumpable
from eval_pipeline.sandbox.runner.namespaces import ViewUnavailable
from eval_pipeline.sandbox.runner.request import RunRequest
from eval_pipeline.sandbox.runner.run import run_limited

__all__ = ["answer", "serve", "serve_session"]

_SESSION_POLL_S = 0.1  # how often a session runner looks whether the child answering it was stopped


def answer(fields: object) -> dict[str, Any]:
    """{"result": `run_limited`'s result} for the request whose fields (JSON's types) are `fields`; a
    ViewUnavailable as {"view_unavailable": why}, any other error (`request.RequestError` for a request that is
    none among them) as {"error": its traceback}."""
    try:
        return {"result": run_limited(RunRequest.from_fields(fields))}
    except ViewUnavailable as error:
        return {"view_unavailable": str(error)}
    except Exception:  # noqa: BLE001 - the caller raises it, with this process's traceback
        return {"error": traceback.format_exc()}


def serve() -> None:
    """`--serve`: answer requests in turn, one JSON line in and one out (`answer`), until stdin closes.

    The local backend's command runner (sandbox/command_runner.py): a fork copies the whole page table of
    the process that forks, and this process is small (about 20 MB) where a run worker with Dagster loaded
    is 260 MB and more, 20 ms a command or more. It dies with the thread that started it (Linux)."""
    if sys.platform == "linux":
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # Not dumpable: /proc/<this pid>/fd is then closed to every process without CAP_SYS_PTRACE here, so a
        # trial's command (its child, of the same uid) cannot write requests into this process's stdin.
        set_dumpable(False)
    for line in sys.stdin:
        sys.stdout.write(json.dumps(answer(json.loads(line))) + "\n")
        sys.stdout.flush()


def serve_session() -> None:
    """`--session`: a container workspace's runner, answering requests in turn until stdin closes: one JSON line
    in ({"id": n, "request": {...}}) and one out ({"id": n, ...the result's fields, or `answer`'s error}), so
    that a workspace's commands share one exec of the engine. Each request is answered by a child forked for
    it, as an exec of its own would answer it: the subreaper of its command's orphans, which pass to the
    container's PID 1 when it exits, so that nothing a terminal task's agent leaves running is this process's
    to wait for. This process alone writes to stdout, relaying a child's answer only once the child has exited
    whole: a child killed or stopped (by the trial's processes, root in a task's container) is answered for as
    {"runner_ended": why}, never half an answer. Not dumpable: nothing reaches its stdin or stdout through
    /proc."""
    if sys.platform == "linux":
        set_dumpable(False)
    sys.stdout.write(json.dumps({"id": 0, "pid": os.getpid()}) + "\n")  # where the harness finds it stopped
    sys.stdout.flush()
    for line in sys.stdin:
        message = json.loads(line)
        answered, why = _answer_in_child(message["request"])
        reply = json.loads(answered) if answered is not None else {"runner_ended": why}
        sys.stdout.write(json.dumps({**reply, "id": message["id"]}) + "\n")
        sys.stdout.flush()


def _answer_in_child(request: object) -> tuple[bytes | None, str | None]:
    """(the answer's JSON, None) from a child forked to answer `request`, or (None, why) when the child did not
    end whole: killed, or stopped (then killed: it would hold the session for ever)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        _answer_then_exit(request, write_end)
    os.close(write_end)
    chunks, status = [], None
    with os.fdopen(read_end, "rb", buffering=0) as answers:
        while True:
            if select.select([answers], [], [], _SESSION_POLL_S)[0]:
                if not (chunk := answers.read(65536)):
                    break
                chunks.append(chunk)
            elif status is None and (found := os.waitpid(child, os.WNOHANG | os.WUNTRACED))[0]:
                if os.WIFSTOPPED(found[1]):
                    os.kill(child, signal.SIGKILL)
                    os.waitpid(child, 0)
                    return None, "stopped"
                status = found[1]  # ended; the pipe's end follows
    status = os.waitpid(child, 0)[1] if status is None else status
    answered = b"".join(chunks)
    if status or not answered.endswith(b"\n"):
        return None, f"wait status {status}" if status else "no whole answer"
    return answered, None


def _answer_then_exit(request: object, answers: int) -> None:
    """In the child: the result's fields (or the error that stopped it) written whole to `answers`, then exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing else of this child's reaches the session's stdout
    reply = answer(request)
    data = (json.dumps(reply.get("result", reply)) + "\n").encode()
    while data:
        data = data[os.write(answers, data) :]
    os._exit(0)
