"""A trial's page says which tests were graded (SWE-bench's FAIL_TO_PASS and PASS_TO_PASS, with their statuses)
and which were the harness's own checks that ran beside them (the canary, each graded test renamed among its
twins, sealed assertions), so that the log's "2 failed, 4 passed" of a resolved trial reads right. Rendered
from real trials: a demo code issue's, graded with its canary, twins and a sealed test, and a terminal task's."""

import re
from html import unescape

from eval_pipeline.results.viewer import render_trial_page
from eval_pipeline.trial.records import read_trials
from eval_pipeline.trial.selection import TrialSelection
from eval_pipeline_tests.support.demo_trials import CAMPAIGN, run_trial


def rows(page: str, table_class: str) -> list[list[str]]:
    """The cells of a table's rows (its header row left out), as text."""
    [table] = re.findall(rf'<table class="{table_class}">(.*?)</table>', page, re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
    return [[unescape(re.sub(r"<[^>]+>", "", cell)) for cell in row] for row in cells if row]


def rendered(identity, portfolio, sandbox, store):
    """Run the trial as the campaign's assets do, then read it back from the store as the viewer does: its
    records and its page."""
    run_trial(identity, portfolio, sandbox, store)
    selection = TrialSelection((identity.instance_id,), (identity.variant,), seeds=(identity.seed,))
    [records] = read_trials(CAMPAIGN, portfolio, lambda task: sandbox, store, selection)
    return records, render_trial_page(records, portfolio.instance(identity.instance_id))


def test_a_resolved_code_issues_page_names_its_graded_tests_and_the_harness_checks_beside_them(
    portfolio, identities, shared_sandbox, store
):
    identity = next(i for i in identities if i.slice == "code-issues" and i.trial == "oracle-s0")
    instance = portfolio.instance(identity.instance_id)
    records, page = rendered(identity, portfolio, shared_sandbox, store)
    assert 'data-outcome="resolved"' in page

    graded = {test: (kind.split(":")[0], status) for test, kind, status in rows(page, "tests")}
    assert graded == {test: ("FAIL_TO_PASS", "PASSED") for test in instance.FAIL_TO_PASS} | {
        test: ("PASS_TO_PASS", "PASSED") for test in instance.PASS_TO_PASS
    }
    [run_tests] = [step for step in records.evaluation.steps if step["step"] == "run_tests"]
    checks = rows(page, "checks")
    by_kind: dict[str, list[list[str]]] = {}
    for check in checks:
        by_kind.setdefault(check[0], []).append(check)
    [canary] = by_kind["canary"]
    assert canary[1] == run_tests["canary"] and canary[3] == "FAILED", "the canary, meant to fail, failed"
    twins = [twin for group in run_tests["twins"] for twin in group["twins"]]
    assert twins and sorted(row[1] for row in by_kind["twin"]) == sorted(twins)
    renamed = {row[1]: row for row in by_kind["renamed graded test"]}
    for group in run_tests["twins"]:
        assert group["original"] in renamed[group["renamed"]][2], "which graded test ran under the log's name"
        assert renamed[group["renamed"]][3] == "PASSED"
    assert sorted(row[1] for row in by_kind.get("sealed assertions", [])) == sorted(run_tests.get("sealed", {}))
    # What the issue saw: the log's summary line counts the harness's checks with the graded tests, and the page
    # says so beside the table that lists them.
    failed, passed = map(int, re.search(r"(\d+) failed, (\d+) passed", run_tests["log_tail"]).groups())
    assert failed == 1 + len(twins) and passed == len(graded), "the canary and the twins are the failures"
    assert "counts them with the graded tests: the canary and the twins are meant to fail" in unescape(page)


def test_a_terminal_tasks_page_says_its_tests_are_the_verifiers(portfolio, identities, shared_sandbox, store):
    identity = next(i for i in identities if i.slice == "terminal" and i.trial == "oracle-s0")
    _, page = rendered(identity, portfolio, shared_sandbox, store)
    graded = rows(page, "tests")
    assert graded and {kind for _, kind, _ in graded} == {"the task verifier’s test"}
    assert '<table class="checks">' not in page, "a verifier's run holds no check of the harness's"
