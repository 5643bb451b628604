"""Every planned trial counts unless the harness shows the fault is its own (trial/evaluation.py, intention to treat).

The attacks know the design: a patch that ends the test process at its first real failure (no report: a grading
error, unscored, before), a program that writes its own reward and kills the verifier that runs it (reward 1,
resolved, before), an agent whose command runs out of memory (oom_killed, unscored, before). Each now loses its
trial, because the reference, graded at once in the same environment under the same limits, resolves. Where the
reference fails too, the fault is the harness's and the trial stays out of the score.

The reference must prove something (trial/reference.py): graded once, a reference that passes half the time
let a verifier-killer's trial go unscored half the time. It is graded up to R times (stopping at its first
resolve), or as often as the pass rate validation measured asks; a verifier whose every run's result the test
scripts makes the mechanism exact, with no timing and no chance. Exceptions of any type raised in grading
are in test_grading_fuzz.py.
"""

import itertools
import shlex
import subprocess
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval_pipeline.agents import make_agent
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.grading.verdict import VerifierRun
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.tasks.terminal.task import load_terminal_tasks
from eval_pipeline.tasks.terminal.verifier import score_verifier
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate
from eval_pipeline.trial.limits import CAMPAIGN, VALIDATION, GradingConditions, ReferencePass, reference_pass
from eval_pipeline.trial.reference import MAX_GRADINGS_PER_REPEAT, reference_gradings
from eval_pipeline.trial.validation import leave_limit_evidence, validate_task
from eval_pipeline_tests.support.agent_commands import appending
from eval_pipeline_tests.support.forgeries import fixed_module
from eval_pipeline_tests.support.terminal_tasks import write_terminal_task
from eval_pipeline_tests.support.trials import prepare_on

# Appended to the module a code issue's fix touches (code its tests import): at the first failing report, the
# test process ends with exit 0 before pytest writes any report. The canary, named last, never gets to run.
EXIT_AT_FIRST_FAILURE = """

def _quit_when_failing():
    import os
    import _pytest.reports

    original = _pytest.reports.TestReport.__init__

    def watched(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if self.outcome == "failed":
            os._exit(0)

    _pytest.reports.TestReport.__init__ = watched


_quit_when_failing()
"""


@pytest.fixture
def instance(demo_benchmark):
    return demo_benchmark.instances[2]


ENGINE = pytest.mark.xdist_group("engine")  # with the other tests of the container engine (conftest.py)


@pytest.fixture(params=["local", pytest.param("pod", marks=ENGINE), pytest.param("strict", marks=ENGINE)])
def walled(request, instance, demo_benchmark, shared_sandbox, prepare):
    """The instance's environment within each kind of walls: (sandbox, environment)."""
    if request.param == "local":
        return shared_sandbox, prepare(instance)
    sandbox = request.getfixturevalue("container_sandbox")(mode=request.param)
    return sandbox, prepare_on(sandbox, demo_benchmark, instance)


@pytest.fixture
def own_disk(tmp_path):
    """A directory on a file system of its own (a tmpfs) where this user may mount one. The disk quota's trigger
    is the file system's free space, which other tests deleting files on a shared disk would raise at the very
    moment a trial fills it (seen in CI: a fill passed unjudged); elsewhere the shared directory."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4g", "tmpfs", str(disk)], capture_output=True).returncode
        == 0
    )
    yield disk
    if mounted:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.fixture(params=["local", pytest.param("pod", marks=ENGINE)])
def limited(request, own_disk, instance, demo_benchmark):
    """A factory of the instance's environment under given limits, locally and in a pod: (sandbox, environment).
    (Strict containers count a command's memory and disk as pods do: `walled` and test_hostile_containers.py
    try them.)"""

    def make(limits: ResourceLimits):
        if request.param == "local":
            sandbox = LocalSandbox(own_disk / "sb", limits, SandboxSettings(), "itt")
        else:
            sandbox = request.getfixturevalue("container_sandbox")(mode=request.param, limits=limits)
        return sandbox, prepare_on(sandbox, demo_benchmark, instance)

    return make


def test_a_patch_that_ends_the_tests_at_their_first_failure_loses_its_trial(instance, walled, store, demo_benchmark):
    sandbox, environment = walled
    spec = demo_benchmark.environment_for(instance)
    agent = make_agent("command", {"command": appending(fixed_module(instance), EXIT_AT_FIRST_FAILURE)})
    generation = generate(instance, agent, 0, environment, sandbox, store)
    assert "_quit_when_failing" in generation.patch
    evaluation = evaluate(instance, spec, generation, environment, sandbox, store, 120)
    assert evaluation.outcome_type is Outcome.PATCH_BROKE_TEST_RUN, evaluation.detail
    assert evaluation.outcome_type.is_scored and not evaluation.outcome_type.is_resolved
    assert "scored: the reference, graded at once" in evaluation.detail
    under = GradingConditions.of(instance, environment.key, sandbox, 120)
    assert reference_pass(store, under) is not None, "the reference's pass is kept as evidence"
    assert store.get(evaluation.key) is not None, "scored and final: never retried"


def test_when_the_reference_fails_too_the_fault_is_the_harnesss_and_the_trial_is_not_scored(
    instance, prepare, shared_sandbox, store, demo_benchmark
):
    """A test command that cannot finish in the time given stops every patch, the reference's too."""
    environment = prepare(instance)
    slow = replace(demo_benchmark.environment_for(instance), test_cmd="sleep 30; true")
    generation = generate(instance, make_agent("null"), 0, environment, shared_sandbox, store)
    evaluation = evaluate(instance, slow, generation, environment, shared_sandbox, store, 0.5)
    assert evaluation.outcome_type is Outcome.TEST_TIMEOUT and not evaluation.outcome_type.is_scored
    assert "graded at once 1 time under the same limits, ended test_timeout: the harness's fault" in evaluation.detail
    assert store.get(evaluation.key) is None, "retried, never final"


# A program the verifier runs: it writes the reward the verifier would write for a right answer, then kills
# test.sh, its ancestor, before test.sh can write its own.
REWARD_THEN_KILL = """import os, signal
with open(os.environ.get("EVAL_REWARD_FILE", "/logs/verifier/reward.txt"), "w") as reward:
    reward.write("1")
pid = os.getpid()
while pid > 1:
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    if b"test.sh" in open(f"/proc/{pid}/cmdline", "rb").read():
        os.kill(pid, signal.SIGKILL)
print(0)
"""
ANSWER_CHECK = (
    "REWARD_FILE=${EVAL_REWARD_FILE:-/logs/verifier/reward.txt}\n"
    'if [ "$(python3 answer.py)" = 42 ]; then echo 1 > "$REWARD_FILE"; else echo 0 > "$REWARD_FILE"; fi\n'
)


@pytest.fixture
def answer_task(tmp_path):
    write_terminal_task(tmp_path / "tasks", "answer", ANSWER_CHECK, "echo 'print(42)' > answer.py\n")
    write_terminal_task(tmp_path / "tasks", "suicidal-verifier", "kill -9 $$\n", "true\n")
    tasks = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors")
    sandbox = LocalSandbox(tmp_path / "sb", ResourceLimits(memory_ceiling_mb=512), SandboxSettings(), "itt")
    return tasks, sandbox


def run_terminal_trial(tasks, sandbox, store, task_id, agent):
    task = tasks.instance(task_id)
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    generation = generate(task, agent, 0, environment, sandbox, store, test_timeout_s=30)
    return evaluate(task, tasks.environment_for(task), generation, environment, sandbox, store, 30)


def test_a_program_that_writes_its_reward_and_kills_the_verifier_loses_its_trial(answer_task, store):
    tasks, sandbox = answer_task
    agent = make_agent("command", {"command": f"printf '%s' {shlex.quote(REWARD_THEN_KILL)} > answer.py"})
    evaluation = run_terminal_trial(tasks, sandbox, store, "answer", agent)
    assert evaluation.outcome_type is Outcome.PATCH_BROKE_TEST_RUN, (evaluation.detail, evaluation.steps)
    assert "ended by signal 9" in evaluation.detail
    oracle = run_terminal_trial(tasks, sandbox, store, "answer", make_agent("oracle"))
    assert oracle.outcome_type is Outcome.RESOLVED, oracle.detail


def test_a_verifier_that_always_dies_leaves_every_trial_unscored(answer_task, store):
    tasks, sandbox = answer_task
    evaluation = run_terminal_trial(tasks, sandbox, store, "suicidal-verifier", make_agent("null"))
    assert evaluation.outcome_type is Outcome.GRADING_ERROR and not evaluation.outcome_type.is_scored
    assert "1 time under the same limits, ended grading_error: the harness's fault" in evaluation.detail


@pytest.mark.parametrize("exit_code", [-9, 137])
def test_a_verifier_ended_by_a_signal_judges_nothing_whatever_reward_it_left(exit_code):
    run = {"exit_code": exit_code, "timed_out": False, "oom_killed": False}
    verdict = score_verifier(VerifierRun(run, "1", None, 30.0))
    assert verdict.outcome is Outcome.GRADING_ERROR and "signal 9" in verdict.detail


def test_an_agent_whose_command_runs_out_of_memory_is_scored(limited, instance, demo_benchmark, store):
    sandbox, environment = limited(ResourceLimits(memory_floor_mb=64, memory_ceiling_mb=256))
    hog = make_agent("command", {"command": "python3 -c 'x = bytearray(1024 * 2**20); print(len(x))'"})
    generation = generate(instance, hog, 0, environment, sandbox, store)
    assert generation.status == Outcome.AGENT_ERROR.value and "memory ceiling" in generation.error
    assert store.get(generation.key) is not None, "the agent's failure is final: never retried"
    evaluation = evaluate(
        instance, demo_benchmark.environment_for(instance), generation, environment, sandbox, store, 60
    )
    assert evaluation.outcome_type is Outcome.AGENT_ERROR and evaluation.outcome_type.is_scored


# Writes 64 MiB of random bytes (no file system compresses or dedups them away) into the workspace, in files of
# 1 MiB, each under any single-file limit, as a disk-filling agent or patch would.
FILL_DISK = "python3 -c \"import os\nfor i in range(64): open(f'fill{i}', 'wb').write(os.urandom(2**20))\""


def test_an_agent_that_fills_the_disk_is_stopped_at_its_quota_and_scored(tmp_path, instance, demo_benchmark, store):
    sandbox = LocalSandbox(tmp_path / "sb", ResourceLimits(storage_mb=16), SandboxSettings(), "itt")
    environment = sandbox.prepare(instance, demo_benchmark.environment_for(instance), demo_benchmark.source)
    filler = make_agent("command", {"command": FILL_DISK})
    generation = generate(instance, filler, 0, environment, sandbox, store)
    assert generation.status == Outcome.AGENT_ERROR.value and "quota" in generation.error
    assert store.get(generation.key) is not None, "the agent's failure is final: never retried"


def test_a_patch_whose_code_fills_the_disk_at_grading_loses_its_trial(limited, instance, demo_benchmark, store):
    """The patch's module writes past the quota when the tests import it: stopped, and (the reference passing
    within the same quota) scored against the patch."""
    sandbox, environment = limited(ResourceLimits(storage_mb=16))
    spec = demo_benchmark.environment_for(instance)
    fill = "\nimport os\nfor _i in range(64):\n    open(f'fill{_i}', 'wb').write(os.urandom(2**20))\n"
    agent = make_agent("command", {"command": appending(fixed_module(instance), fill)})
    generation = generate(instance, agent, 0, environment, sandbox, store)
    evaluation = evaluate(instance, spec, generation, environment, sandbox, store, 120)
    assert evaluation.outcome_type is Outcome.PATCH_BROKE_TEST_RUN, evaluation.detail
    assert "quota" in evaluation.detail


class ScriptedVerifier:
    """A terminal task's verifier whose every run's result the test sets: run n (counted in a file outside the
    workspace) rewards a right answer only where line n of the script says `pass`."""

    def __init__(self, directory):
        self.script_file, self.counter = directory / "script", directory / "runs"

    @property
    def test_sh(self) -> str:
        counter, script = shlex.quote(str(self.counter)), shlex.quote(str(self.script_file))
        return (
            "REWARD_FILE=${EVAL_REWARD_FILE:-/logs/verifier/reward.txt}\n"
            f"run=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo $run > {counter}\n"
            f'if [ "$(python3 answer.py)" = 42 ] && [ "$(sed -n "${{run}}p" {script})" = pass ]; '
            'then echo 1 > "$REWARD_FILE"; else echo 0 > "$REWARD_FILE"; fi\n'
        )

    def script(self, results: list[str]) -> None:
        """The results of the next runs, in order, counted from 1 again."""
        self.script_file.write_text("\n".join(results) + "\n")
        self.counter.unlink(missing_ok=True)

    def runs(self) -> int:
        return int(self.counter.read_text()) if self.counter.exists() else 0


@pytest.fixture
def scripted(tmp_path):
    """A task whose reference passes only where the script says (`answer`'s check, scripted), its environment, and
    the generation of an agent whose answer writes reward 1 and kills the verifier: (task, spec, environment,
    sandbox, generation, verifier)."""
    verifier = ScriptedVerifier(tmp_path)
    write_terminal_task(tmp_path / "tasks", "scripted", verifier.test_sh, "echo 'print(42)' > answer.py\n")
    tasks = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors")
    task = tasks.instance("scripted")
    sandbox = LocalSandbox(tmp_path / "sb", ResourceLimits(memory_ceiling_mb=512), SandboxSettings(), "itt")
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    killer = make_agent("command", {"command": f"printf '%s' {shlex.quote(REWARD_THEN_KILL)} > answer.py"})
    generation = generate(
        task, killer, 0, environment, sandbox, LocalArtifactStore(tmp_path / "gen"), test_timeout_s=30
    )
    return task, tasks.environment_for(task), environment, sandbox, generation, verifier


def test_a_reference_passing_half_the_time_leaves_a_verifier_killer_unscored_one_time_in_eight(scripted, tmp_path):
    """Every sequence of a fair coin's first three tosses as the reference's next three gradings: graded once, the
    reference left the four sequences that start with a failure unscored (1/2); graded up to three times, only
    the one of three failures is (1/8 = (1 - 1/2)^3), and grading stops at the reference's first pass."""
    task, spec, environment, sandbox, generation, verifier = scripted
    ends = {}
    for number, tosses in enumerate(itertools.product(("fail", "pass"), repeat=3)):
        verifier.script(["killed", *tosses])  # run 1 is the killer's own grading
        store = LocalArtifactStore(tmp_path / f"store-{number}")
        evaluation = evaluate(task, spec, generation, environment, sandbox, store, 30)
        assert "ended by signal 9" in evaluation.detail
        ends[tosses] = (evaluation.outcome_type, verifier.runs())
    unscored = [tosses for tosses, (outcome, _) in ends.items() if not outcome.is_scored]
    assert unscored == [("fail", "fail", "fail")], ends
    assert ends.pop(("fail", "fail", "fail"))[1] == 4
    for tosses, (outcome, runs) in ends.items():
        assert outcome is Outcome.PATCH_BROKE_TEST_RUN
        assert runs == 2 + tosses.index("pass"), "the killer's run, then the reference's until its first pass"


def test_the_pass_rate_validation_measured_sets_how_often_the_reference_is_graded(scripted, store):
    """Validation saw the reference resolve 1 of its 3 runs (a rate estimated at 2/5): five gradings bring the
    chance that each fails to at most 1/8, as three do for a reference passing half the time. A verifier-killer
    whose reference passes only at its fifth grading is scored."""
    task, spec, environment, sandbox, generation, verifier = scripted
    verifier.script(["pass", "fail", "fail", *["fail"] * 3, "killed", *["fail"] * 4, "pass"])
    validation = validate_task("terminal", task, spec, environment, sandbox, repeats=3, test_timeout_s=30)
    assert (validation.status, validation.gold_resolved, validation.gold_runs) == ("flaky", 1, 3)
    leave_limit_evidence(store, validation, GradingConditions.of(task, environment.key, sandbox, 30))
    evaluation = evaluate(task, spec, generation, environment, sandbox, store, 30)
    assert evaluation.outcome_type is Outcome.PATCH_BROKE_TEST_RUN, evaluation.detail
    assert verifier.runs() == 12, "3 + 3 validation runs, the killer's, then the reference's five"


def reference_passed(resolved_runs: int, runs: int, source: str = VALIDATION) -> ReferencePass:
    return ReferencePass(
        instance_id="row",
        content_hash="content",
        environment_key="environment",
        resources={},
        test_timeout_s=30.0,
        grading_version="any",
        source=source,
        reference=f"{resolved_runs} of {runs}",
        recorded_at="now",
        resolved_runs=resolved_runs,
        runs=runs,
    )


def test_the_reference_is_graded_r_times_where_no_validation_measured_its_rate():
    assert reference_gradings(3, None) == 3
    assert reference_gradings(5, reference_passed(0, 0, CAMPAIGN)) == 5, "one oracle pass measures no rate"
    assert [reference_gradings(3, reference_passed(k, 3)) for k in (3, 2, 1)] == [2, 3, 5]


@given(resolved=st.integers(1, 30), failed=st.integers(0, 30), repeats=st.integers(1, 6))
def test_a_validated_rate_asks_for_the_fewest_gradings_that_reach_what_r_gives_a_coin_flip(resolved, failed, repeats):
    """(1 - p)^n <= 2^-R with n as small as it can be, p the rate estimated from k of K runs, (k + 1) / (K + 2);
    at most MAX_GRADINGS_PER_REPEAT x R."""
    chance_failure = 1 - (resolved + 1) / (resolved + failed + 2)
    gradings = reference_gradings(repeats, reference_passed(resolved, resolved + failed))
    cap = MAX_GRADINGS_PER_REPEAT * repeats
    assert 1 <= gradings <= cap
    assert gradings == cap or chance_failure**gradings <= 2**-repeats * (1 + 1e-9)
    assert gradings == 1 or chance_failure ** (gradings - 1) > 2**-repeats
