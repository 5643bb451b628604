"""A terminal task's verifier: run tests/test.sh on the workspace, as Harbor does, and score its reward.

A terminal task gets its tests only when its verifier runs (at /tests where the
workspace keeps Harbor's paths, hidden from every agent command until then)
and runs tests/test.sh (`run_verifier`); its reward file decides
(`score_verifier`), and a verifier that wrote none is a grading error. On the
container backend the verifier runs in the agent's own container right after
it (trial/generation.py keeps that run); a task's `grade` (task.py) replays a
patch, or re-grades a snapshot of that container with the empty patch.

There the agent was root, so the tools test.sh runs are checked against the image, by the engine, as the
verifier starts (verifier_tools.py): a run on tools the agent changed carries each finding as an
audit flag (`verifier_tools`), and its reward of 1 is `report_forged` (scored, not resolved, counted apart);
what the check cannot judge (programs a package install upgraded, processes the agent left beside the
verifier) is flagged `verifier_exposed` and changes no verdict. A re-grade carries what the run in the agent's
container found (`with_in_place_findings`): its own container starts from the agent's snapshot, against which
only the re-grade's own changes show. A patch replay reaches only the working tree, which the patch audit reads.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.grading.patch_audit import AuditFlag
from eval_pipeline.grading.verdict import FAILED, PASSED, Verdict, VerifierRun, stopped_by_a_limit
from eval_pipeline.sandbox import Workspace
from eval_pipeline.sandbox.base import ImageChange, SandboxError
from eval_pipeline.tasks.terminal.verifier_tools import check_tools, path_dirs, processes_exposure, shell_commands

__all__ = ["REWARD_FILE", "REWARD_JSON", "VerifiedTask", "run_verifier", "score_verifier", "with_in_place_findings"]

REWARD_FILE = "verifier/reward.txt"
RUNNER_SHELL = "/bin/sh"  # what runs the verifier's command line (sandbox/runner/run.py: run_limited)
REWARD_JSON = "verifier/reward.json"


class VerifiedTask(Protocol):
    """What the verifier reads of a terminal task (task.py's `TerminalTask`): its tests (tests/), its [verifier]
    env, whether its containers have the network, and its WORKDIR."""

    @property
    def tests(self) -> Mapping[str, str | bytes]: ...

    @property
    def verifier_env(self) -> Mapping[str, str]: ...

    @property
    def allow_internet(self) -> bool: ...

    @property
    def workdir(self) -> str: ...


def _text(content: bytes | None) -> str | None:
    return None if content is None else content.decode("utf-8", errors="replace")


def run_verifier(
    task: VerifiedTask, workspace: Workspace, test_timeout_s: float, in_place: bool = False
) -> VerifierRun:
    """Run tests/test.sh on the workspace as it is, as Harbor does: its tests and an empty reward directory put
    in place only now (at /tests and /logs/verifier where the workspace keeps Harbor's paths, which the agent's
    commands never saw), root in the WORKDIR, with the task's [verifier] env. test.sh is the command's own
    process (`exec`), so a signal that ends it shows as the command's. It has the network its task's
    `allow_internet` gives the container (Harbor's verifiers install their tools: curl, uv, pytest), which
    the run records; a code task's tests never have one.

    In a container, what the agent changed of the tools it runs is read from the engine as it starts
    (verifier_tools.py), with the processes the agent left beside it (`in_place`), and the run records both."""
    tests_dir = workspace.write_harness_tree("tests", task.tests)
    reward_file = workspace.harness_path(REWARD_FILE)
    reward_dir = shlex.quote(reward_file.rsplit("/", 1)[0])
    command = f"rm -rf {reward_dir} && mkdir -p {reward_dir} && exec bash {shlex.quote(tests_dir + '/test.sh')}"
    try:
        before, unread = workspace.image_changes(), ""
        processes = workspace.processes_left() if in_place and before is not None else 0
    except SandboxError as error:  # the container runs (else SandboxLost): what the agent left may be the cause
        before, processes, unread = [], 0, str(error)
    tests, rewards = workspace.run_then_read(
        command,
        (REWARD_FILE, REWARD_JSON),
        timeout_s=test_timeout_s,
        env={**task.verifier_env, "EVAL_TESTS_DIR": tests_dir, "EVAL_REWARD_FILE": reward_file},
        verifier=True,
    )
    reward_txt, reward_json = _text(rewards[REWARD_FILE]), _text(rewards[REWARD_JSON])
    run = {**tests.summary(), "network": task.allow_internet}
    if before is not None:
        run |= {"processes_beside": processes, **_checked(task, workspace, before, command, tests_dir, unread)}
    return VerifierRun(run, reward_txt, reward_json, test_timeout_s, in_place)


def _checked(
    task: VerifiedTask, workspace: Workspace, before: list[ImageChange], command: str, tests_dir: str, unread: str
) -> dict[str, Any]:
    """The run's record of the tool check (verifier_tools.py) on the changes `before` the verifier, asked where paths
    lead after it: its findings and exposures, or why the engine could not answer (`tools_unread`: a Podman asked for the changes
    of a container where the agent put a directory in place of an image's file fails so)."""
    if not unread:
        verifier_path = {**workspace.command_placement()["env"], **task.verifier_env}.get("PATH")
        dirs = path_dirs(verifier_path, task.workdir)
        scripts = [text for name, text in task.tests.items() if name.endswith(".sh") and isinstance(text, str)]
        commands = shell_commands([RUNNER_SHELL, command, *scripts])
        try:
            check = check_tools(before, dirs, commands, tests_dir, task.workdir, workspace.real_path)
            return {
                "tool_findings": [flag.as_record() for flag in check.findings],
                "tool_exposures": [flag.as_record() for flag in check.exposures],
            }
        except SandboxError as error:
            unread = str(error)
    return {"tools_unread": unread[-2000:]}


def _flags(run: Mapping[str, Any], name: str) -> list[AuditFlag]:
    """The audit flags a verifier's run recorded under `name`: `tool_findings` or `tool_exposures` (verifier_tools.py)."""
    return [AuditFlag(**record) for record in run.get(name, [])]


def _forged_if_resolved(verdict: Verdict, findings: list[AuditFlag]) -> Verdict:
    """`verdict`, unless it resolved on tools the agent changed (`findings`): then its reward of 1 is no pass but
    `report_forged` (scored, not resolved, counted apart)."""
    if not (findings and verdict.outcome.is_resolved):
        return verdict
    detail = f"{verdict.detail}, from tools the agent changed: {', '.join(flag.path for flag in findings)}"
    return replace(verdict, outcome=Outcome.REPORT_FORGED, detail=detail)


def _reward(run: VerifierRun) -> float | None:
    """The verifier's reward: reward.txt (a number) or reward.json ({"reward": number}); None if it wrote none."""
    if run.reward_txt is not None:
        return float(run.reward_txt.strip())
    if run.reward_json is not None:
        return float(json.loads(run.reward_json)["reward"])
    return None


def _ending_signal(exit_code: int) -> int | None:
    """The signal that ended a command: a negative exit code is the runner's report of one, and above 128 a
    shell's report of a child it lost to one (128 + N)."""
    if exit_code < 0:
        return -exit_code
    return exit_code - 128 if exit_code > 128 else None


def score_verifier(run: VerifierRun) -> Verdict:
    """The verdict on a verifier's run: resolved at reward 1.

    The reward file decides, as in Harbor; a verifier that wrote none is a grading error, whatever its exit
    code (Harbor's test.sh scripts exit 0 after writing a reward of 0, and a missing file must never pass). A
    verifier ended by a signal is a grading error too, whatever reward it left: code under test, run by test.sh
    as root, can write the reward file and kill test.sh before its own verdict. So is a run whose changes to the
    image the engine could not list (`tools_unread`: the agent can make Podman's listing fail). Evaluation then
    grades the reference at once (intention to treat), so such a run is scored against the patch when the
    reference passes.
    """
    findings, exposures = _flags(run.run, "tool_findings"), _flags(run.run, "tool_exposures")
    if processes := run.run.get("processes_beside"):
        exposures.append(processes_exposure(processes))
    steps = [{"step": "run_tests", **run.run}]
    verdict = Verdict(Outcome.GRADING_ERROR, steps=steps, audit=[*findings, *exposures])
    if stopped_by_a_limit(verdict, run.run, run.test_timeout_s):
        return verdict
    if unread := run.run.get("tools_unread"):
        verdict.detail = f"the engine could not tell what the agent changed of the verifier's tools: {unread}"
        return verdict
    try:
        reward = _reward(run)
    except (ValueError, KeyError, TypeError, RecursionError) as error:  # RecursionError: JSON nested past the stack
        verdict.detail = f"the reward file is not a number: {error!r}"
        return verdict
    if (signal := _ending_signal(run.run["exit_code"])) is not None:
        verdict.detail = (
            f"test.sh was ended by signal {signal} (exit {run.run['exit_code']}), neither by the time limit nor the"
            " OOM killer: a verifier that does not finish judges nothing, whatever reward it left"
        )
        return verdict
    if reward is None:
        verdict.detail = f"the verifier wrote no reward file (test.sh exited {run.run['exit_code']})"
        return verdict
    verdict.tests = {"tests/test.sh": PASSED if reward >= 1.0 else FAILED}
    verdict.detail = f"reward {reward:g}"
    verdict.outcome = Outcome.RESOLVED if reward >= 1.0 else Outcome.UNRESOLVED
    return _forged_if_resolved(verdict, findings)


def with_in_place_findings(verdict: Verdict, in_place: Mapping[str, Any] | None) -> Verdict:
    """A re-grade's verdict, from the agent's snapshot, judged with what the run in the agent's container found of
    its changes to the verifier's tools and could not judge (`in_place`: that run's record): the snapshot holds
    them. The processes the agent left are not in a snapshot. Where the engine could not tell the agent's changes
    there, a pass is no verdict either: a grading error, which the reference judges (intention to treat)."""
    run = VerifierRun.from_record(in_place).run if in_place else {}
    if (unread := run.get("tools_unread")) and verdict.outcome.is_resolved:
        detail = f"the engine could not tell what the agent changed of the verifier's tools in its container: {unread}"
        return replace(verdict, outcome=Outcome.GRADING_ERROR, detail=detail)
    findings = _flags(run, "tool_findings")
    return _forged_if_resolved(
        replace(verdict, audit=[*verdict.audit, *findings, *_flags(run, "tool_exposures")]), findings
    )
