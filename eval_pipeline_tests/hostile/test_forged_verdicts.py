"""Patches written to forge a verdict, on every backend: none resolves a demo code issue, the oracle resolves all.

The doors (forgeries.py): a root `pytest.py` that replaces `python -m pytest`,
a `.pytest.ini` or `pytest.toml` that loads a force-pass plugin, a conftest.py
beside the tests, a distribution's metadata whose `pytest11` entry point
pytest autoloads, and code the tests import that rewrites pytest's reports
from inside the test process. All run under the demo's command with plugin
autoloading on, as SWE-bench's commands run. The first five meet a runner
imported from the environment and configuration restored to the base commit;
the last, which no runner can keep out, meets the canary and ends
`report_forged`. Every one is
flagged by the patch audit.

Issue 49's round (`STATUS_FORGERIES`) forges the statuses the grader counts
for a patch: an xfail, a skip, a pass written over the results once pytest is
done, lines written on the launcher's report channel before, after, in place
of or past the cap of the real ones, and xfails and skips made by code under
test. None resolves on any backend.
"""

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.sandbox.patches import apply_patch
from eval_pipeline.tasks.swebench import specs as swebench_specs
from eval_pipeline.tasks.swebench.grading import REPORT_NAME, grade, parse_junit
from eval_pipeline_tests.support.forgeries import EVASIONS, FORGERIES, STATUS_FORGERIES, as_swebench_runs_it
from eval_pipeline_tests.support.trials import prepare_on

IN_PROCESS = "in-process report rewriting"


def code_issues(benchmark):
    return [instance for instance in benchmark.instances if instance.own_image is None]


def one_per_repository(benchmark):
    """A code issue of each demo repository: in containers, where a grading costs seconds, the doors are the
    same for every issue of a repository (benchmarks/forged_verdicts.py grades all of them)."""
    return list({instance.repo: instance for instance in code_issues(benchmark)}.values())


def verdicts(sandbox, benchmark, instances, forgeries=FORGERIES) -> dict[tuple[str, str], tuple[Outcome, set[str]]]:
    """{(instance, case): (outcome, audit flag kinds)} for each instance, every forgery and the oracle."""
    found = {}
    for instance in instances:
        spec = as_swebench_runs_it(benchmark.environment_for(instance))
        environment = prepare_on(sandbox, benchmark, instance)
        patches = {case: forge(benchmark, instance) for case, forge in forgeries.items()}
        for case, patch in {**patches, "oracle": instance.patch}.items():
            with sandbox.workspace(environment, "forged") as workspace:
                verdict = grade(instance, spec, patch, workspace, 120)
            found[instance.instance_id, case] = verdict.outcome, {flag.kind for flag in verdict.audit}
    return found


def assert_nothing_forged(found, instances) -> None:
    resolved = [key for key, (outcome, _) in found.items() if outcome is Outcome.RESOLVED and key[1] != "oracle"]
    assert resolved == [], f"forged passes: {resolved}"
    oracle = {key: outcome for key, (outcome, _) in found.items() if key[1] == "oracle"}
    assert len(oracle) == len(instances) and set(oracle.values()) == {Outcome.RESOLVED}, oracle
    in_process = {outcome for (_, case), (outcome, _) in found.items() if case == IN_PROCESS}
    assert in_process == {Outcome.REPORT_FORGED}
    unflagged = [key for key, (_, flags) in found.items() if key[1] != "oracle" and not flags]
    assert unflagged == [], f"forgeries the audit missed: {unflagged}"
    assert all(not flags for (_, case), (_, flags) in found.items() if case == "oracle")


def test_every_forgery_would_pass_under_the_datasets_own_test_command(demo_benchmark, prepare, shared_sandbox):
    """The doors are real: run as the dataset gives the command, with nothing restored, each forgery passes."""
    instance = code_issues(demo_benchmark)[0]
    spec = as_swebench_runs_it(demo_benchmark.environment_for(instance))
    environment = prepare(instance)
    for case, forge in FORGERIES.items():
        with shared_sandbox.workspace(environment, "naive") as workspace:
            assert apply_patch(workspace, forge(demo_benchmark, instance), "model.patch").ok
            assert apply_patch(workspace, instance.test_patch, "test.patch").ok
            junit = workspace.harness_path(REPORT_NAME)
            files = " ".join(swebench_specs.test_directives(instance, spec))
            workspace.run(f"mkdir -p $(dirname {junit}) && {spec.test_cmd} --junitxml={junit} {files}", timeout_s=120)
            statuses = parse_junit(workspace.read_harness_file(REPORT_NAME) or b"<testsuite/>")
        assert statuses.get(instance.FAIL_TO_PASS[0]) == "PASSED", case


@pytest.mark.slow
def test_no_forgery_resolves_on_the_local_backend(demo_benchmark, shared_sandbox):
    instances = code_issues(demo_benchmark)
    assert len(instances) == 8
    assert_nothing_forged(verdicts(shared_sandbox, demo_benchmark, instances), instances)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pod", "strict"])
def test_no_forgery_resolves_in_containers(demo_benchmark, container_sandbox, mode):
    instances = one_per_repository(demo_benchmark)
    assert_nothing_forged(verdicts(container_sandbox(mode=mode), demo_benchmark, instances), instances)


def assert_no_evasion_resolves(found, instances) -> None:
    """The second round: none resolves, the in-process ones are caught by the canary or the xfail label, and the
    oracle still resolves every instance."""
    outcomes = {key: outcome for key, (outcome, _) in found.items()}
    resolved = [key for key, outcome in outcomes.items() if outcome is Outcome.RESOLVED and key[1] != "oracle"]
    assert resolved == [], f"forged passes: {resolved}"
    assert [outcomes[i.instance_id, "oracle"] for i in instances] == [Outcome.RESOLVED] * len(instances)
    for case in ("JUnit report rewritten at exit", "canary-aware report rewriting", "root pdb.py"):
        assert {outcomes[i.instance_id, case] for i in instances} <= {Outcome.REPORT_FORGED, Outcome.UNRESOLVED}
    refused = ("unchecked .pyc under a quoted name", ".git/config filter under an escaped name")
    assert {outcomes[i.instance_id, case] for i in instances for case in refused} == {Outcome.PATCH_APPLY_FAILED}


@pytest.mark.slow
def test_no_evasion_resolves_on_the_local_backend(demo_benchmark, shared_sandbox):
    instances = code_issues(demo_benchmark)
    assert_no_evasion_resolves(verdicts(shared_sandbox, demo_benchmark, instances, EVASIONS), instances)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pod", "strict"])
def test_no_evasion_resolves_in_containers(demo_benchmark, container_sandbox, mode):
    instances = one_per_repository(demo_benchmark)
    assert_no_evasion_resolves(verdicts(container_sandbox(mode=mode), demo_benchmark, instances, EVASIONS), instances)


# Issue 49's forgeries that end abnormally rather than forged: the reference judges them (intention to treat).
CUT_SHORT = {"channel flooded past the output cap"}


def assert_no_status_forgery_resolves(found, instances) -> None:
    """Every status forgery ends `report_forged`, but the flood, which only cuts the channel short: a grading
    error with its run recorded, which intention to treat scores against the patch when the reference passes."""
    outcomes = {key: outcome for key, (outcome, _) in found.items()}
    assert [outcomes[i.instance_id, "oracle"] for i in instances] == [Outcome.RESOLVED] * len(instances)
    for case in STATUS_FORGERIES:
        expected = Outcome.GRADING_ERROR if case in CUT_SHORT else Outcome.REPORT_FORGED
        assert {outcomes[i.instance_id, case] for i in instances} == {expected}, case


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "pod", "strict"])
def test_no_status_forgery_resolves(demo_benchmark, shared_sandbox, request, backend):
    """On ad50ec1 the exit-time xfail and skip, the channel forgers (whose JUnit rewrite was then what counted)
    and the code-made xfail and skip resolved every issue; the pass and xpass rewrites met the twins there too."""
    sandbox = shared_sandbox if backend == "local" else request.getfixturevalue("container_sandbox")(mode=backend)
    instances = one_per_repository(demo_benchmark)
    assert_no_status_forgery_resolves(verdicts(sandbox, demo_benchmark, instances, STATUS_FORGERIES), instances)
