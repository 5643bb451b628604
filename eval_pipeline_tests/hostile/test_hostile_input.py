"""Hostile or broken agent output on the local sandbox: each ends in a typed outcome, nothing else harmed.

The same cases that need a container's isolation (writes outside the
workspace, a fork bomb, gigabytes of output) are in test_hostile_containers.py.
Hostile strings (lone surrogates, bytes in no encoding, control characters) are
kept, shown and scored as the agent's (common/foreign_text.py); hostile ids are
refused where a dataset is loaded (tasks/dataset.py).
"""

import json
import re
import threading
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import quote

import duckdb
import pytest

from eval_pipeline.agents import make_agent
from eval_pipeline.common.git import git
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.common.settings import Paths
from eval_pipeline.common.text import truncate
from eval_pipeline.datasets.sources import load_benchmark
from eval_pipeline.defs.failures import describe_outcome
from eval_pipeline.results.export import ExportError, write_trial_folder
from eval_pipeline.results.html import write_html_report
from eval_pipeline.results.matrix import trial_id
from eval_pipeline.results.report import build_report
from eval_pipeline.results.trajectory import trajectories_for
from eval_pipeline.results.viewer import TrialPages, serve
from eval_pipeline.results.warehouse import Warehouse, write_warehouse
from eval_pipeline.sandbox.patches import MAX_PATCH_BYTES, MAX_PATCH_FILES, apply_patch
from eval_pipeline.store.artifacts import COUNTED
from eval_pipeline.tasks.dataset import InvalidDatasetError
from eval_pipeline.tasks.swebench.grading import grade
from eval_pipeline.tasks.terminal.task import load_terminal_tasks
from eval_pipeline.testing.scripted_model import ScriptedModelServer, _Handler
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import Generation, generate
from eval_pipeline.trial.records import AttemptRecord, StoredTrial
from eval_pipeline.trial.spec import TrialSpec
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.result_rows import trial as result_row
from eval_pipeline_tests.support.rows import swebench_rows, write_jsonl
from eval_pipeline_tests.support.terminal_tasks import write_terminal_task

FORCE_PASS_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.fixture
def instance(demo_benchmark):
    return demo_benchmark.instances[2]  # calclib: mean([]) must raise ValueError


@pytest.fixture
def spec(demo_benchmark, instance):
    return demo_benchmark.environment_for(instance)


@pytest.fixture
def environment(prepare, instance):
    return prepare(instance)


def trial(instance, spec, environment, sandbox, store, command: str):
    """Generate with a command agent running `command`, then evaluate: the whole trial."""
    generation = generate(instance, make_agent("command", {"command": command}), 0, environment, sandbox, store)
    return generation, evaluate(instance, spec, generation, environment, sandbox, store, 60)


def new_file_patch(path: str, text: str = "pwned") -> str:
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{text}\n"


@pytest.mark.parametrize("where", ["../escape-{tag}.txt", "../../escape-{tag}.txt", "/tmp/escape-{tag}.txt"])
def test_a_patch_naming_paths_outside_the_repository_is_refused(instance, spec, environment, shared_sandbox, where):
    path = where.format(tag=uuid.uuid4().hex[:8])
    patch = new_file_patch(path).replace("+++ b//tmp", "+++ /tmp").replace("a//tmp", "a/tmp")
    with shared_sandbox.workspace(environment, "hostile") as workspace:
        verdict = grade(instance, spec, patch, workspace, 60)
        escaped = [*workspace.root.parent.parent.rglob("escape-*.txt"), *Path("/tmp").glob("escape-*.txt")]
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED
    assert "outside the repository" in verdict.detail and path.lstrip("./") in verdict.detail.replace("../", "")
    assert escaped == [], "nothing was written outside the workspace"


@pytest.mark.parametrize("path", [".git/hooks/post-checkout", "vendor/.git/config"])
def test_a_patch_writing_inside_a_git_directory_is_refused(instance, spec, environment, shared_sandbox, path):
    """GNU patch, the fallback after git apply, would write a hook that the grader's own git checkout runs."""
    patch = new_file_patch(path, "#!/bin/sh\\necho forged > conftest.py")
    with shared_sandbox.workspace(environment, "hooked") as workspace:
        verdict = grade(instance, spec, patch, workspace, 60)
        written = (workspace.repo / path).exists()
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED and "inside a git directory" in verdict.detail
    assert verdict.steps == [] and not written, "no command ran, nothing was written"


@pytest.mark.parametrize("path", ["calclib/__pycache__/stats.cpython-311.pyc", "calclib/stats.pyc"])
def test_a_patch_writing_compiled_bytecode_is_refused(instance, spec, environment, shared_sandbox, path):
    """Python may load a .pyc without its source (an unchecked hash-based one always): code no diff shows."""
    with shared_sandbox.workspace(environment, "compiled") as workspace:
        verdict = grade(instance, spec, new_file_patch(path, "forged"), workspace, 60)
        written = (workspace.repo / path).exists()
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED and "compiled bytecode" in verdict.detail
    assert verdict.steps == [] and not written


def test_the_harness_git_runs_no_hook_or_monitor_that_the_repository_names(environment, shared_sandbox):
    """A repository an agent had in hand may name a hook or an fsmonitor command; the harness's git runs neither."""
    with shared_sandbox.workspace(environment, "configured") as workspace:
        marker = workspace.harness_path("ran")
        hook = workspace.repo / ".git" / "hooks" / "post-checkout"
        hook.write_text(f"#!/bin/sh\necho hook >> {marker}\n")
        hook.chmod(0o755)
        monitor = workspace.repo / "monitor.sh"
        monitor.write_text(f"#!/bin/sh\necho monitor >> {marker}\n")
        monitor.chmod(0o755)
        git(["config", "core.fsmonitor", str(monitor)], workspace.repo)
        command = "git checkout -q HEAD -- . && git status --short >/dev/null"
        assert workspace.run(command, timeout_s=60, env=workspace.harness_git_env).ok
        assert not Path(marker).exists(), "the harness's git ran a command the repository named"
        assert workspace.run(command, timeout_s=60, env=workspace.git_env).ok
        assert Path(marker).exists(), "without the harness's settings the same git runs it: the check can fail"


def test_a_huge_patch_is_refused_without_applying_it(instance, spec, environment, shared_sandbox):
    patch = new_file_patch("big.txt", "x" * (MAX_PATCH_BYTES + 1))
    with shared_sandbox.workspace(environment, "huge") as workspace:
        verdict = grade(instance, spec, patch, workspace, 60)
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED and "over the limit" in verdict.detail
    assert verdict.steps == [], "no command ran"


def test_a_patch_touching_more_files_than_the_cap_is_the_patchs_failure(instance, spec, environment, shared_sandbox):
    patch = "".join(new_file_patch(f"tests/test_{i}.py", "") for i in range(MAX_PATCH_FILES + 1))
    with shared_sandbox.workspace(environment, "many") as workspace:
        verdict = grade(instance, spec, patch, workspace, 60)
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED, verdict.detail
    assert f"touches {MAX_PATCH_FILES + 1} files, over the limit" in verdict.detail
    assert verdict.outcome.is_scored and verdict.steps == [], "scored against the patch, and no command ran"


def test_an_agent_whose_changes_make_a_huge_patch_fails_as_the_agent(
    instance, spec, environment, shared_sandbox, store
):
    generation, evaluation = trial(
        instance, spec, environment, shared_sandbox, store, "head -c 12000000 /dev/zero | tr '\\0' x > big.txt"
    )
    assert generation.status == Outcome.AGENT_ERROR and "over the limit" in generation.error
    assert generation.patch == ""
    assert evaluation.outcome_type is Outcome.AGENT_ERROR


def test_a_conftest_that_forces_passes_is_undone_before_the_tests_run(
    instance, spec, environment, shared_sandbox, store
):
    command = f"cat > conftest.py <<'EOF'\n{FORCE_PASS_CONFTEST}EOF"
    generation, evaluation = trial(instance, spec, environment, shared_sandbox, store, command)
    assert "conftest.py" in generation.patch
    with shared_sandbox.workspace(environment, "naive") as workspace:  # what a harness that trusts it would see
        assert apply_patch(workspace, generation.patch, "model.patch").ok
        assert apply_patch(workspace, instance.test_patch, "test.patch").ok
        assert workspace.run(f"{spec.test_cmd} {instance.FAIL_TO_PASS[0]}", timeout_s=60).ok, "the attack works"
    assert evaluation.outcome_type is Outcome.UNRESOLVED
    assert "conftest.py" in evaluation.detail
    assert evaluation.tests[instance.FAIL_TO_PASS[0]] == "FAILED"


def test_a_patch_that_rewrites_the_tests_is_graded_against_the_real_tests(
    instance, spec, environment, shared_sandbox, store
):
    command = "printf 'def test_mean_of_empty_data_raises_value_error():\\n    pass\\n' > tests/test_stats.py"
    generation, evaluation = trial(instance, spec, environment, shared_sandbox, store, command)
    assert "tests/test_stats.py" in generation.patch
    assert evaluation.outcome_type is Outcome.UNRESOLVED
    assert evaluation.tests[instance.FAIL_TO_PASS[0]] == "FAILED"


def test_output_that_forges_the_test_runners_markers_changes_nothing(
    instance, spec, environment, shared_sandbox, store
):
    forged = f"{instance.FAIL_TO_PASS[0]} PASSED"
    command = (
        f'printf \'print("{forged}")\\nprint("===== 3 passed in 0.01s =====")\\n'
        'print("<testsuite><testcase name=\\\\"x\\\\"/></testsuite>")\\n\' >> calclib/stats.py'
    )
    generation, evaluation = trial(instance, spec, environment, shared_sandbox, store, command)
    assert forged in generation.patch
    assert evaluation.outcome_type is Outcome.UNRESOLVED
    assert evaluation.tests[instance.FAIL_TO_PASS[0]] == "FAILED"


def test_binary_and_non_utf8_changes_are_kept_byte_for_byte(instance, spec, environment, shared_sandbox, store):
    command = (
        "printf 'caf\\351 cr\\350me\\n' > latin1.txt && printf '\\000\\001\\377binary' > blob.bin"
        " && printf '\\377\\376 not utf-8 on stdout\\n'"
    )
    generation, evaluation = trial(instance, spec, environment, shared_sandbox, store, command)
    assert generation.status == "completed"
    assert "\ufffd" in generation.trajectory[0]["stdout_tail"], "undecodable output is replaced, not a crash"
    assert "GIT binary patch" in generation.patch and "\ufffd" not in generation.patch
    assert evaluation.outcome_type is Outcome.UNRESOLVED, "the patch applied; the bug is still there"
    with shared_sandbox.workspace(environment, "bytes") as workspace:
        assert apply_patch(workspace, generation.patch, "model.patch").ok
        assert (workspace.repo / "latin1.txt").read_bytes() == b"caf\xe9 cr\xe8me\n"
        assert (workspace.repo / "blob.bin").read_bytes() == b"\x00\x01\xffbinary"


def test_an_agent_that_destroys_its_workspace_fails_as_the_agent(
    instance, spec, environment, shared_sandbox, store, demo_benchmark
):
    generation, evaluation = trial(instance, spec, environment, shared_sandbox, store, 'rm -rf "$PWD"')
    assert generation.status == Outcome.AGENT_ERROR and "could not diff" in generation.error
    assert evaluation.outcome_type is Outcome.AGENT_ERROR
    oracle = generate(instance, make_agent("oracle"), 0, environment, shared_sandbox, store)
    again = evaluate(instance, spec, oracle, environment, shared_sandbox, store, 60)
    assert again.outcome_type is Outcome.RESOLVED, "the shared environment is unharmed"


def test_no_workspace_reaches_a_later_commit_hints_or_the_patches(demo_benchmark, shared_sandbox, prepare):
    """The demo's mirrors hold every later stage (the fixes among them): a workspace holds none of them."""
    hidden = 0
    for instance in demo_benchmark.instances:
        if not hasattr(instance, "FAIL_TO_PASS"):
            continue
        mirror = Path(demo_benchmark.source.location(instance.repo))
        later = set(git(["rev-list", "--all"], mirror).split()) - set(
            git(["rev-list", instance.base_commit], mirror).split()
        )
        hidden += len(later)
        assert "Hints" not in instance.instruction, "hints stay off unless the campaign asks for them"
        with shared_sandbox.workspace(prepare(instance), "agent") as workspace:
            reachable = workspace.run("git log --all --format=%H; git for-each-ref; git stash list", timeout_s=30)
            assert set(reachable.stdout.split()) <= set(git(["rev-list", instance.base_commit], mirror).split())
            objects = workspace.run("git cat-file --batch-all-objects --batch-check='%(objectname)'", timeout_s=30)
            assert not later & set(objects.stdout.split()), f"{instance.instance_id}: a later commit is in the store"
            leaked = workspace.run("grep -rlF 'FAIL_TO_PASS' . $HOME $TMPDIR", timeout_s=30)
            assert leaked.stdout.strip() == "", leaked.stdout
    assert hidden, "the mirrors do hold later commits for the check to find"


# ---------------------------------------------------------------------------------------------------------------
# Agent output is data: whatever a model, a tool or a file name holds is kept, shown and scored as the agent's.

# What no UTF-8 encoder takes (lone surrogates, as a model's JSON may say them), what a terminal or a page acts on
# (NUL, ESC sequences, BEL, DEL, a C1 control), and a very long line.
HOSTILE_TEXT = "lone \ud800 and \udcff, NUL \x00, ESC \x1b[2J\x1b]0;title\x07, DEL \x7f, C1 \x9b; " + "long " * 4000
HOSTILE_SHOWN = "lone \ufffd and \ufffd, NUL \u2400, ESC \u241b[2J\u241b]0;title\u2407, DEL \u2421, C1 \ufffd; long"
RAW_MARKER = "<raw bytes>"
RAW_BYTES = b"\xff\xfe\xc3("  # no UTF-8 at all: a model server passing on the bytes its model made
RAW_READ = "\ufffd\ufffd\ufffd("  # what a reader of them as UTF-8 gets, each invalid sequence replaced
# What no page of the harness's may hold: a control character but tab, newline and carriage return.
HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class _RawBytesHandler(_Handler):
    """The scripted model's HTTP side, with RAW_MARKER sent as RAW_BYTES: JSON whose string holds no UTF-8."""

    def _send(self, response):
        payload = json.dumps(response.body).encode().replace(RAW_MARKER.encode(), RAW_BYTES)
        self._send_bytes(response.status, payload, "application/json", response.headers)


class HostileModel(ScriptedModelServer):
    """A model whose every answer says HOSTILE_TEXT (after bytes in no encoding, with `raw_bytes`), and which makes
    `calls` (name, arguments) in turn, then answers without a call."""

    def __init__(self, calls: list[tuple[str, dict]], raw_bytes: bool = True) -> None:
        super().__init__(script="chatter")
        self.calls, self.said = calls, (RAW_MARKER if raw_bytes else "") + HOSTILE_TEXT
        if raw_bytes:
            self._httpd.RequestHandlerClass = _RawBytesHandler

    def chat_completion(self, body):
        response = super().chat_completion(body)
        made = sum(len(m.get("tool_calls") or []) for m in body["messages"] if m.get("role") == "assistant")
        choice = response.body["choices"][0]
        choice["message"]["content"] = self.said
        if made < len(self.calls):
            name, arguments = self.calls[made]
            function = {"name": name, "arguments": json.dumps(arguments)}
            choice["message"]["tool_calls"] = [{"id": f"call_{made}", "type": "function", "function": function}]
            choice["finish_reason"] = "tool_calls"
        return response


def _shown_right(page: bytes) -> None:
    """A page as a person's browser reads it: valid UTF-8 (decoding raises otherwise) with no control character
    in it, the agent's control characters shown as their pictures and its lone surrogates as U+FFFD."""
    text = page.decode("utf-8")
    assert not HIDDEN.search(text), f"a control character reached the page: {HIDDEN.search(text)[0]!r}"
    assert RAW_READ + HOSTILE_SHOWN in text


def test_a_model_answering_lone_surrogates_raw_bytes_and_control_characters_is_scored_stored_and_shown(
    instance, spec, environment, shared_sandbox, store, tmp_path
):
    """The model says what no encoder takes, its commands print bytes in no encoding and name a file in none,
    its arguments hold lone surrogates; then it applies the fix. The trial is graded and scored (storing such a
    trajectory raised, and the trial ended `missing`), its trajectory kept exactly, and shown as valid UTF-8
    without a control character in the HTML report and the viewer, and exactly in an export."""
    named = r"printf 'caf\351 \377\376 nul:\000 esc:\033[2J\n'; printf x > \"$(printf 'name-\377\033[1m')\""
    calls = [
        ("run_command", {"command": named}),
        ("list_directory", {"path": "."}),
        ("write_file", {"path": "notes-\ud800.txt", "content": "lone \udcff, NUL \x00, ESC \x1b[31m\n"}),
        ("run_command", {"command": f"git apply - <<'EOF'\n{instance.patch}EOF"}),
    ]
    with HostileModel(calls) as server:
        agent = make_agent("llm", {"model": "scripted-chatter", "base_url": server.base_url, "api_key_env": "NO_KEY"})
        generation = generate(instance, agent, 0, environment, shared_sandbox, store)
        evaluation = evaluate(instance, spec, generation, environment, shared_sandbox, store, 60)
    assert generation.status == "completed", generation.error
    assert evaluation.outcome_type is Outcome.RESOLVED, evaluation.detail  # scored, and the fix is graded

    stored = store.get(generation.key)
    said = [step["content"] for step in stored["trajectory"] if step["type"] == "model_call"]
    assert said == [truncate(RAW_READ + HOSTILE_TEXT)] * (len(calls) + 1), "kept exactly: lone surrogates too"
    steps = {step.get("tool"): step for step in stored["trajectory"] if step["type"] == "tool_call"}
    assert steps["write_file"]["arguments"] == calls[2][1], "the model's arguments as it sent them"
    assert json.loads(steps["write_file"]["result"])["path"] == "notes-\ufffd.txt", "the file it could be given"
    listing = json.loads(steps["list_directory"]["result"])["listing"]
    assert "name-\ufffd\x1b[1m" in listing, "a name in no encoding reaches the model as U+FFFD"

    row = result_row(
        instance.instance_id, "hostile", 0, "resolved", generation_key=generation.key, evaluation_key=evaluation.key
    )
    report = build_report("hostile", "d" * 64, "p" * 64, [row], directory=tmp_path)
    views = trajectories_for([row], store.reading_only(), {trial_id(row)})
    _shown_right(write_html_report(report, [row], views).read_bytes())

    identity = TrialSpec("hostile", row.slice, row.instance_id, row.trial, "hostile", "llm", 0, "h", "g", "e", 60, {})
    kept = Generation.from_payload(stored, key=generation.key, reused=True)
    records = StoredTrial(identity, row, [], kept, evaluation)
    server = serve(TrialPages("hostile", lambda selection: [records], lambda _: instance), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/trial?id={quote(trial_id(row), safe='')}"
        with urllib.request.urlopen(url, timeout=30) as page:
            _shown_right(page.read())
    finally:
        server.shutdown()
        server.server_close()

    folder = write_trial_folder(records, instance.instruction, tmp_path / "export")
    assert json.loads((folder / "trajectory.json").read_bytes().decode("utf-8")) == stored["trajectory"]


def test_mini_swe_agent_keeps_a_models_lone_surrogates_and_sends_them_on_as_valid_unicode(
    instance, environment, shared_sandbox, store
):
    """mini-swe-agent's requests (litellm's) and its commands (the tool server's) take only valid Unicode: a lone
    surrogate in the model's command is sent as U+FFFD, kept as the model sent it, and the agent goes on (it had
    crashed, `agent_error`, its trajectory lost). A body in no encoding is its client's failure to read, the
    endpoint's (`model_api_error`), so this model sends none."""
    calls = [
        ("bash", {"command": "printf 'caf\\351 \\033[2J'; echo \ud800"}),
        ("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"}),
    ]
    with HostileModel(calls, raw_bytes=False) as server:
        params = {"model": "scripted-chatter", "base_url": server.base_url, "api_key_env": "NO_KEY", "step_limit": 5}
        generation = generate(instance, make_agent("mini-swe-agent", params), 0, environment, shared_sandbox, store)
    assert generation.status == "completed", generation.error
    stored = store.get(generation.key)["trajectory"]
    assert [step["content"] for step in stored if step["type"] == "model_call"] == [truncate(HOSTILE_TEXT)] * 2
    ran = next(step for step in stored if step["type"] == "tool_call")
    assert ran["arguments"] == {"command": calls[0][1]["command"]}, "kept as the model sent it"
    assert "caf\ufffd \x1b[2J\ufffd" in ran["result"], "run with U+FFFD for the surrogate; its output read as UTF-8"


def test_a_record_holding_any_str_is_stored_exactly_and_counted(store):
    """The canonical JSON that a record's checksum and MAC are taken of holds a lone surrogate as its escape; a
    surrogate pair split in two code points is the one character JSON reads it as, so the record read back is
    counted, not refused as altered."""
    said = ["lone \ud800", "low \udcff", "a pair in two code points \ud83d\ude00", "NUL \x00 ESC \x1b"]
    assert store.put("generation/said.json", {"said": said})
    assert store.get("generation/said.json") == {"said": [*said[:2], "a pair in two code points \U0001f600", said[3]]}
    assert store.reads == {COUNTED: 1}


def test_agent_text_reaches_the_warehouse_and_dagster_as_valid_unicode(tmp_path):
    """A stop reason and an attempt's detail are an agent's words: DuckDB refuses a lone surrogate (the warehouse
    would not be written), and Dagster's UI serves a failure's description as UTF-8 JSON."""
    words = "stopped \ud800 here, NUL \x00, ESC \x1b[2J"
    row = result_row("org__repo-1", "v", 0, "agent_error", stop_reason=words)
    attempt = AttemptRecord("c", "org__repo-1", "v-s0", "generation", "agent_error", "agent", True, "t", 1.0, words)
    warehouse = Warehouse([row], [attempt], [{"instance_id": "org__repo-1"}], [{"variant": "v"}], {"campaign": "c"})
    path = write_warehouse(warehouse, tmp_path / "results.duckdb")
    with duckdb.connect(str(path), read_only=True) as connection:
        [(stop_reason,)] = connection.execute("SELECT stop_reason FROM trials").fetchall()
        [(detail,)] = connection.execute("SELECT detail FROM attempts").fetchall()
    assert stop_reason == detail == "stopped \ufffd here, NUL \x00, ESC \x1b[2J", "data: only the surrogate replaced"
    described = describe_outcome(Outcome.AGENT_ERROR, words)
    assert described == "agent_error: stopped \ufffd here, NUL \u2400, ESC \u241b[2J"
    json.dumps({"description": described}, ensure_ascii=False).encode("utf-8")  # what the UI's server does


# ---------------------------------------------------------------------------------------------------------------
# Ids are not paths: a dataset's ids become directories, partition keys and command arguments, so a row whose id
# is no id is refused where the dataset is loaded, before anything runs or is written.


def hostile_rows(demo_benchmark, outside: Path) -> tuple[list[dict], list[tuple[int, str, str]]]:
    """The demo's rows as a SWE-bench file, each with an id (or a repository) that is no id: a path up, an
    absolute path (`outside`), Dagster's separators and range, a newline, nothing. With each row's
    (index, field, value)."""
    hostile = [
        ("instance_id", "../../x"),
        ("instance_id", str(outside)),
        ("instance_id", "a|b"),
        ("instance_id", "a,b"),
        ("instance_id", "a\nb"),
        ("instance_id", "a...b"),
        ("repo", "../../escape"),
        ("instance_id", ""),  # last: alone it refuses the whole file whether ids are checked or not
    ]
    rows = swebench_rows(demo_benchmark)
    for row, (field, value) in zip(rows, hostile, strict=True):
        row[field] = value
    return rows, [(index, field, value) for index, (field, value) in enumerate(hostile)]


def test_a_dataset_row_whose_id_is_no_id_is_refused_at_load_naming_dataset_row_and_field(demo_benchmark, tmp_path):
    rows, hostile = hostile_rows(demo_benchmark, tmp_path / "abs")
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(InvalidDatasetError) as refused:
        load_benchmark({"kind": "swebench", "path": str(path)}, Paths(tmp_path / "data"))
    message = str(refused.value)
    assert f"dataset {str(path)!r}: {len(rows)} invalid row(s)" in message
    for index, field, value in hostile:
        named = f"row {index} ({rows[index]['instance_id']!r}): field {field}: "
        assert named + ("missing or empty" if value == "" else repr(value)) in message, (named, message)
    commit = {**swebench_rows(demo_benchmark)[0], "base_commit": "--output=/tmp/pwned"}
    with pytest.raises(InvalidDatasetError, match=r"field base_commit: '--output=/tmp/pwned' is not a commit"):
        load_benchmark(
            {"kind": "swebench", "path": str(write_jsonl(tmp_path / "commit.jsonl", [commit]))}, Paths(tmp_path)
        )


def test_a_terminal_task_whose_name_is_no_id_is_refused_at_load(tmp_path):
    """`...` is the Dagster UI's partition range: a task directory may be named so, never an instance."""
    write_terminal_task(tmp_path / "tasks", "fine-task", "echo 1 > $EVAL_REWARD_FILE\n")
    write_terminal_task(tmp_path / "tasks", "a...b", "echo 1 > $EVAL_REWARD_FILE\n")
    with pytest.raises(InvalidDatasetError, match=r"\('a\.\.\.b'\): field directory name: 'a\.\.\.b' is not an id"):
        load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors")


def test_run_and_export_refuse_hostile_ids_before_anything_runs_or_is_written(demo_benchmark, campaign_env, tmp_path):
    """`export --to DEST` writes nothing (`../../x`'s folder would be above DEST, the absolute id's at its own
    path) and `run` runs nothing (`a|b`'s trials would end `missing` with nothing said): both name every row.
    The empty id is left out: it refuses the file on its own."""
    outside = tmp_path / "abs"
    rows, hostile = hostile_rows(demo_benchmark, outside)
    rows, hostile = rows[:-1], hostile[:-1]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    campaign = tmp_path / "hostile.yaml"
    campaign.write_text(
        f"name: hostile\nbenchmark: {{kind: swebench, path: rows.jsonl, mirror_dir: {demo_benchmark.source.mirror_dir}}}"
        "\nvariants: [{name: o, agent: oracle}]\n"
    )
    destination = tmp_path / "export" / "here"
    exported = eval_pipeline_cli(campaign_env, "export", "--campaign", str(campaign), "--to", str(destination))
    assert not (tmp_path / "export").exists() and not outside.exists(), "nothing is written, above DEST or at /abs"
    ran = eval_pipeline_cli(campaign_env, "run", "--campaign", str(campaign))
    assert not list((Path(campaign_env["DAGSTER_HOME"]) / "eval_pipeline").glob("artifacts/generation/*"))
    for command in (exported, ran):
        assert command.returncode != 0 and "Traceback" not in command.stderr, command.stderr[-3000:]
        for index, field, _ in hostile:
            assert f"row {index} ({rows[index]['instance_id']!r}): field {field}: " in command.stderr


def test_export_writes_nothing_outside_its_destination_whatever_it_is_given(tmp_path):
    """A folder's names are checked ids, yet a link inside the destination (or an id from a store written before
    the check) could lead out: each folder is checked once its links are followed."""
    outside, destination = tmp_path / "outside", tmp_path / "export"
    outside.mkdir()
    destination.mkdir()
    (destination / "code").symlink_to(outside, target_is_directory=True)

    def stored(instance_id: str, slice_name: str) -> StoredTrial:
        row = result_row(instance_id, "v", 0, "unresolved", slice=slice_name)
        identity = TrialSpec("c", slice_name, instance_id, row.trial, "v", "null", 0, "h", "g", "e", 60, {})
        return StoredTrial(identity, row, [], None, None)

    for records in (stored("org__repo-1", "code"), stored("../../x", "other"), stored(str(outside), "other")):
        with pytest.raises(ExportError, match="outside the destination"):
            write_trial_folder(records, "the instruction", destination)
    assert list(outside.iterdir()) == [] and not (tmp_path / "x").exists()
    assert write_trial_folder(stored("org__repo-1", "other"), "the instruction", destination).is_dir()
