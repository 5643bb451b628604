"""Patches written to forge a verdict, on every backend: none resolves a demo code issue, the oracle resolves all.

The doors (forgeries.py): a root `pytest.py` that replaces `python -m pytest`,
a `.pytest.ini` or `pytest.toml` that loads a force-pass plugin, a conftest.py
beside the tests, and code the tests import that rewrites pytest's reports
from inside the test process. The first four meet a runner imported from the
environment and configuration restored to the base commit; the last, which no
runner can keep out, meets the canary and ends `report_forged`. Every one is
flagged by the patch audit.
"""

import pytest

from eval_pipeline import swebench_specs
from eval_pipeline.grading import REPORT_NAME, grade, parse_junit
from eval_pipeline.outcomes import Outcome
from eval_pipeline.patches import apply_patch
from eval_pipeline_tests.conftest import prepare_on
from eval_pipeline_tests.forgeries import FORGERIES

IN_PROCESS = "in-process report rewriting"


def code_issues(benchmark):
    return [instance for instance in benchmark.instances if instance.own_image is None]


def verdicts(sandbox, benchmark) -> dict[tuple[str, str], tuple[Outcome, set[str]]]:
    """{(instance, case): (outcome, audit flag kinds)} for every demo code issue, every forgery and the oracle."""
    found = {}
    for instance in code_issues(benchmark):
        spec = benchmark.environment_for(instance)
        environment = prepare_on(sandbox, benchmark, instance)
        patches = {case: forge(benchmark, instance) for case, forge in FORGERIES.items()}
        for case, patch in {**patches, "oracle": instance.patch}.items():
            with sandbox.workspace(environment, "forged") as workspace:
                verdict = grade(instance, spec, patch, workspace, 120)
            found[instance.instance_id, case] = verdict.outcome, {flag.kind for flag in verdict.audit}
    return found


def assert_nothing_forged(found) -> None:
    resolved = [key for key, (outcome, _) in found.items() if outcome is Outcome.RESOLVED and key[1] != "oracle"]
    assert resolved == [], f"forged passes: {resolved}"
    oracle = {key: outcome for key, (outcome, _) in found.items() if key[1] == "oracle"}
    assert len(oracle) == 8 and set(oracle.values()) == {Outcome.RESOLVED}, oracle
    in_process = {outcome for (_, case), (outcome, _) in found.items() if case == IN_PROCESS}
    assert in_process == {Outcome.REPORT_FORGED}
    unflagged = [key for key, (_, flags) in found.items() if key[1] != "oracle" and not flags]
    assert unflagged == [], f"forgeries the audit missed: {unflagged}"
    assert all(not flags for (_, case), (_, flags) in found.items() if case == "oracle")


def test_every_forgery_would_pass_under_the_datasets_own_test_command(demo_benchmark, prepare, shared_sandbox):
    """The doors are real: run as the dataset gives the command, with nothing restored, each forgery passes."""
    instance = code_issues(demo_benchmark)[0]
    spec = demo_benchmark.environment_for(instance)
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


def test_no_forgery_resolves_on_the_local_backend(demo_benchmark, shared_sandbox):
    assert_nothing_forged(verdicts(shared_sandbox, demo_benchmark))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pod", "strict"])
def test_no_forgery_resolves_in_containers(demo_benchmark, container_sandbox, mode):
    assert_nothing_forged(verdicts(container_sandbox(mode=mode), demo_benchmark))
