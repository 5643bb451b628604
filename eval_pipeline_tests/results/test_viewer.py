"""The trial viewer: its pages served over HTTP from a store of real demo trials, read in headless Chromium."""

import re
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from dataclasses import replace

import pytest

from eval_pipeline.cli import main
from eval_pipeline.common.outcomes import ImageBuildFailed
from eval_pipeline.results.trajectory import as_text
from eval_pipeline.results.viewer import TrialPages, parse_trial_id, serve
from eval_pipeline.store.attempts import environment_attempt
from eval_pipeline.trial.records import read_trials
from eval_pipeline.trial.selection import TrialSelection
from eval_pipeline_tests.support.chromium import CHROMIUM_FLAGS, chromium, png_pixels
from eval_pipeline_tests.support.demo_trials import CAMPAIGN, first_code_issue, run_trial
from eval_pipeline_tests.support.hostile_text import SCRIPT

# What an MCP tool returns: the text the agent saw is inside a structure, with line breaks and a script in it.
TOOL_RESULT = {"content": [{"type": "text", "text": f"line one\nline two {SCRIPT}"}], "isError": False}
TOOL_STEP = {"type": "tool_call", "step": 1, "tool": "bash", "arguments": {"command": "ls"}, "result": TOOL_RESULT}


def test_a_trial_id_names_one_instance_variant_and_seed():
    assert parse_trial_id("repo__x-1|oracle-s12") == TrialSelection(("repo__x-1",), ("oracle",), seeds=(12,))
    assert parse_trial_id("a|b|my-variant-s0") == TrialSelection(("a|b",), ("my-variant",), seeds=(0,))
    for malformed in ("", "x", "x|oracle", "x|oracle-s", "x|oracle-sx", "|oracle-s0", "x|-s0"):
        assert parse_trial_id(malformed) is None, malformed


def test_a_structured_tool_result_reads_as_text_with_its_line_breaks():
    text = as_text(TOOL_RESULT)
    assert "\\n" not in text and "line one\n" in text
    assert text.splitlines() == [
        "content:",
        "  - type: text",
        "    text:",
        "      line one",
        f"      line two {SCRIPT}",
        "isError: false",
    ]
    assert as_text({"empty": {}, "none": None, "n": 2}) == "empty: {}\nnone: null\nn: 2"
    circular: list = []
    circular.append(circular)
    assert "[...]" in as_text(circular), "a circular value is shown, not followed forever"


@pytest.fixture
def viewer(portfolio, shared_sandbox, store, identities):
    """The viewer of a store holding one instance's four trials (oracle and null, two seeds each), another
    instance's environment that failed to build, and the oracle's s1 trajectory holding a structured tool result;
    served on a free port."""
    first = first_code_issue(identities)
    instance_id = first.instance_id
    for identity in identities:
        if identity.instance_id == instance_id:
            run_trial(identity, portfolio, shared_sandbox, store)
    # another repository's instance: its environment is not the one the first instance's trials were run in
    broken = next(i for i in identities if i.slice == "code-issues" and i.environment_key != first.environment_key)
    with pytest.raises(ImageBuildFailed), environment_attempt(store, broken.instance_id, broken.environment_key):
        raise ImageBuildFailed("no such base image: python:2.4")

    def read(selection):
        trials = read_trials(CAMPAIGN, portfolio, lambda task: shared_sandbox, store, selection)
        return [with_tool_step(t) if t.result.trial == "oracle-s1" and t.generation else t for t in trials]

    def with_tool_step(trial):
        return replace(trial, generation=trial.generation.model_copy(update={"trajectory": [TOOL_STEP]}))

    pages = TrialPages(CAMPAIGN.name, read, portfolio.instance)
    server = serve(pages, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", instance_id, broken.instance_id
    server.shutdown()
    server.server_close()


def dom(url: str, profile) -> str:
    return subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout


def screenshot(url: str, path, profile) -> tuple[int, int, list]:
    subprocess.run(
        [
            chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--window-size=1000,1400",
            f"--screenshot={path}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return png_pixels(path)


def test_the_matrix_links_every_trial_and_names_the_unscored_ones(viewer, identities, tmp_path):
    base, instance_id, broken = viewer
    page = dom(f"{base}/", tmp_path / "profile")
    links = re.findall(r'<span class="trial" data-outcome="(\w+)"><a href="([^"]+)">', page)
    assert len(links) == len(identities) + len([i for i in identities if i.instance_id != instance_id]), (
        "each trial once in the matrix, and each unscored one again in the list"
    )
    cells = dict((href, outcome) for outcome, href in links)
    assert cells[f"/trial?id={instance_id}%7Coracle-s0"] == "resolved"
    assert cells[f"/trial?id={instance_id}%7Cnone-s1"] == "unresolved"
    assert cells[f"/trial?id={broken}%7Coracle-s0"] == "image_build_failed"
    [unscored] = re.findall(r'<ul class="unscored">.*?</ul>', page, re.S)
    assert f"{broken}|oracle-s0</a></span>: <strong>image_build_failed</strong>: no such base image: python:2.4" in (
        unscored
    )
    assert "not run yet" in unscored, "an instance never run is named too"
    assert "<td>1/4 resolved</td>" not in page and "<td>2/" in page, "the totals row counts each variant"
    width, height, pixels = screenshot(f"{base}/", tmp_path / "matrix.png", tmp_path / "profile")
    assert (width, height) == (1000, 1400)
    assert sum(pixel == (0x2F, 0x85, 0x5A) for pixel in pixels) > 100, "resolved trials' green swatches are drawn"


def test_a_trial_page_shows_the_verdict_patch_tests_trajectory_lineage_and_attempts(viewer, portfolio, tmp_path):
    base, instance_id, _ = viewer
    page = dom(f"{base}/trial?id={instance_id}%7Coracle-s1", tmp_path / "profile")
    assert re.search(r'<span class="outcome" data-outcome="resolved">resolved</span> \(agent\), scored', page)
    instruction = portfolio.instance(instance_id).instruction
    assert instruction.splitlines()[0] in page
    assert re.search(r'<pre class="diff"><span class="file">diff --git', page) and '<span class="add">+' in page
    assert re.findall(r'<td class="PASSED">PASSED</td>', page), "the graded tests with their statuses"
    assert "run_tests" in page, "the grading's steps and output"
    # The tool's result: text with its line breaks, the agent's script escaped, never a `\n` or a script element
    assert f"line one\n      line two {SCRIPT.replace('<', '&lt;').replace('>', '&gt;')}" in page
    assert "\\n" not in page and "<script" not in page.lower()
    assert f"campaign: {CAMPAIGN.name}" in page and "grading_version:" in page, "the lineage, as text"
    [attempts] = re.findall(r'<table class="attempts">.*?</table>', page, re.S)
    assert re.findall(r"<tr><td>(\w+)</td><td>(\w+)</td><td>(\w*)</td>", attempts) == [
        ("generation", "completed", "yes"),
        ("evaluation", "resolved", "yes"),
    ]
    width, height, pixels = screenshot(f"{base}/trial?id={instance_id}%7Coracle-s1", tmp_path / "t.png", tmp_path / "p")
    assert sum(pixel != (255, 255, 255) for pixel in pixels) > 0.03 * width * height, "text, tables and the diff"


def test_an_unknown_trial_is_not_found_and_a_failed_environment_says_why(viewer, tmp_path):
    base, _, broken = viewer
    for identifier in ("nope%7Coracle-s0", f"{broken}%7Coracle-s9", "garbage"):
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(f"{base}/trial?id={identifier}", timeout=30)
        assert error.value.code == 404
    page = urllib.request.urlopen(f"{base}/trial?id={broken}%7Coracle-s0", timeout=30).read().decode()
    assert "image_build_failed</span> (infrastructure), not scored" in page
    assert "no such base image: python:2.4" in page and "No patch." in page and "Not graded yet." in page


def test_the_command_says_when_its_port_is_taken(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVAL_PIPELINE_DATA_DIR", raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["view", "--campaign", "demo", "--port", str(port)]) == 2
    assert f"eval-pipeline view: cannot serve on 127.0.0.1:{port}: Address already in use" in capsys.readouterr().err
