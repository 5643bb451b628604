"""A terminal task's verifier: run tests/test.sh on the workspace, as Harbor does, and score its reward.

A terminal task gets its tests only when its verifier runs (at /tests where the
workspace keeps Harbor's paths, hidden from every agent command until then)
and runs tests/test.sh (`run_verifier`); its reward file decides
(`score_verifier`), and a verifier that wrote none is a grading error. On the
container backend the verifier runs in the agent's own container right after
it (trial/generation.py keeps that run); `grade_terminal` replays a patch, or
re-grades a snapshot of that container with the empty patch.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.grading.verdict import FAILED, PASSED, Verdict, VerifierRun, apply_model_patch, stopped_by_a_limit
from eval_pipeline.sandbox import Workspace

if TYPE_CHECKING:
    from eval_pipeline.tasks.terminal.task import TerminalTask

__all__ = ["REWARD_FILE", "REWARD_JSON", "grade_terminal", "run_verifier", "score_verifier"]

REWARD_FILE = "verifier/reward.txt"
REWARD_JSON = "verifier/reward.json"


def _text(content: bytes | None) -> str | None:
    return None if content is None else content.decode("utf-8", errors="replace")


def run_verifier(
    task: TerminalTask, workspace: Workspace, test_timeout_s: float, in_place: bool = False
) -> VerifierRun:
    """Run tests/test.sh on the workspace as it is, as Harbor does: its tests and an empty reward directory put
    in place only now (at /tests and /logs/verifier where the workspace keeps Harbor's paths, which the agent's
    commands never saw), root in the WORKDIR, with the task's [verifier] env. test.sh is the command's own
    process (`exec`), so a signal that ends it shows as the command's. It has the network its task's
    `allow_internet` gives the container (Harbor's verifiers install their tools: curl, uv, pytest), which
    the run records; a code task's tests never have one."""
    tests_dir = workspace.write_harness_tree("tests", task.tests)
    reward_file = workspace.harness_path(REWARD_FILE)
    reward_dir = shlex.quote(reward_file.rsplit("/", 1)[0])
    tests, rewards = workspace.run_then_read(
        f"rm -rf {reward_dir} && mkdir -p {reward_dir} && exec bash {shlex.quote(tests_dir + '/test.sh')}",
        (REWARD_FILE, REWARD_JSON),
        timeout_s=test_timeout_s,
        env={**task.verifier_env, "EVAL_TESTS_DIR": tests_dir, "EVAL_REWARD_FILE": reward_file},
        verifier=True,
    )
    reward_txt, reward_json = _text(rewards[REWARD_FILE]), _text(rewards[REWARD_JSON])
    run = {**tests.summary(), "network": task.allow_internet}
    return VerifierRun(run, reward_txt, reward_json, test_timeout_s, in_place)


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
    as root, can write the reward file and kill test.sh before its own verdict. Evaluation then grades the
    reference at once (intention to treat), so such a run is scored against the patch when the reference passes.
    """
    verdict = Verdict(outcome=Outcome.GRADING_ERROR, steps=[{"step": "run_tests", **run.run}])
    if stopped_by_a_limit(verdict, run.run, run.test_timeout_s):
        return verdict
    try:
        reward = _reward(run)
    except (ValueError, KeyError, TypeError) as error:
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
    return verdict


def grade_terminal(task: TerminalTask, model_patch: str, workspace: Workspace, test_timeout_s: float) -> Verdict:
    """Judge `model_patch` on a pristine workspace of the terminal task (patch replay), or the empty patch on a
    snapshot of the agent's container (a re-grade): apply it, run the verifier and score its run."""
    verdict = Verdict(outcome=Outcome.GRADING_ERROR)
    if not apply_model_patch(verdict, model_patch, workspace):
        return verdict
    scored = score_verifier(run_verifier(task, workspace, test_timeout_s))
    scored.steps[:0], scored.audit = verdict.steps, verdict.audit
    return scored
