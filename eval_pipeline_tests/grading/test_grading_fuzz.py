"""Every abnormal end of grading goes through one choke point (grading/verdict.py `graded`; trial/evaluation.py):
whatever a grading meets, its trial ends scored, or unscored only where the reference, graded at once, failed too.

The attacks know the design. A name or a byte the harness choked on raised an exception that was neither the
infrastructure's nor the patch's, and the trial became a `grading_error` that no reference judged: unscored,
out of the denominator, by the agent's choice (a file named with a quote and a non-Latin-1 character; a test
report declaring an encoding expat does not know). Hypothesis throws at every step of grading what an agent or
its patch can leave there:

- names in the workspace, which the generation's diff, the model patch's checks and application, and the
  restoring of test files all read: quotes, newlines, tabs, backslashes, characters beyond Latin-1, bytes that
  are no UTF-8, leading dashes, shell syntax; with contents that are no UTF-8 either;
- where grading reads files back (a code task's test report and log, a terminal task's reward files): bytes
  (XML declaring unknown or odd encodings, UTF-16, byte order marks, no UTF-8; JSON nested past the stack), a
  FIFO (whose opening waits for a writer), a sparse file past what the harness reads (it takes no disk, so no
  quota stops it), a directory, a link, or nothing at all.

Every trial must end scored: the reference resolves in each (the demo's), so a trial left unscored is a door.
Names and encodings must also be graded without interruption: their bugs are fixed where they raised. The
local backend runs them (no engine); the name attack runs in a pod and a strict container too.
"""

import base64
import json
import shlex
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from eval_pipeline.agents import make_agent
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.grading.verdict import GRADING_INTERRUPTED
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.base import HARNESS_FILE_CAP_BYTES
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.tasks.terminal.task import load_terminal_tasks
from eval_pipeline.trial.evaluation import Evaluation, evaluate
from eval_pipeline.trial.generation import COMPLETED, generate
from eval_pipeline_tests.support.agent_commands import appending
from eval_pipeline_tests.support.forgeries import fixed_module
from eval_pipeline_tests.support.terminal_tasks import write_terminal_task
from eval_pipeline_tests.support.trials import prepare_on

# Examples are drawn the same way on every run (a fuzz that fails at random would be a flaky test); each is a trial
# (a second or more), so each test draws a few beyond its explicit examples.
FUZZ = settings(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

# Pieces of hostile names; hypothesis joins them, with bytes of its own.
NAME_PIECES = (
    b'"',
    b"'",
    b"\\",
    b"\n",
    b"\t",
    b" ",
    b"-",
    b"--",
    b"$(id)",
    b"`",
    b"*",
    "€".encode(),
    "𝄞".encode(),
    "中".encode(),
    "é".encode(),
    b"\xff",  # no UTF-8 from here on: a lone byte, a cut sequence, an encoded surrogate, a continuation byte
    b"\xc3",
    b"\xed\xa0\x80",
    b"\x80",
    b"\x1b",
    b"a",
    b".py",
)
name_component = (
    st.lists(st.sampled_from(NAME_PIECES) | st.binary(min_size=1, max_size=3), min_size=1, max_size=6)
    .map(lambda pieces: b"".join(pieces).replace(b"/", b"_").replace(b"\0", b"_")[:120])
    .filter(lambda name: name not in (b".", b".."))
)
# A name alone, or a directory of that name holding a conftest.py: test infrastructure, which grading restores.
hostile_path = st.tuples(name_component, st.booleans()).map(lambda pair: pair[0] + b"/conftest.py" * pair[1])
hostile_files = st.lists(st.tuples(hostile_path, st.binary(max_size=40)), min_size=1, max_size=5)

THE_RED_TEAMS_NAME = 'a"€'.encode()

# Encodings an XML declaration may name that expat cannot read, and some it can.
ENCODINGS = ("x-unknown", "rot13", "base64", "utf-32", "utf-7", "idna", "punycode", "cp037", "utf-16", "latin-1")
REPORT_BODY = b'<testsuites><testsuite><testcase classname="t" name="test_x" file="t.py"/></testsuite></testsuites>'
declared = st.builds(
    lambda encoding, body: f'<?xml version="1.0" encoding="{encoding}"?>'.encode() + body,
    st.sampled_from(ENCODINGS),
    st.sampled_from([REPORT_BODY, b"", b"<a>\xff</a>"]),
)
hostile_bytes = st.one_of(
    declared,
    declared.map(lambda xml: b"\xef\xbb\xbf" + xml),  # a UTF-8 byte order mark before any declaration
    st.sampled_from(["utf-16", "utf-16-le", "utf-32"]).map(lambda encoding: REPORT_BODY.decode().encode(encoding)),
    st.binary(max_size=256),
)
# What a file grading reads back may be instead of the file it expects.
file_kind = st.one_of(
    st.tuples(st.just("bytes"), hostile_bytes.map(lambda data: base64.b64encode(data).decode())),
    st.sampled_from(["fifo", "huge", "missing", "directory", "link"]).map(lambda kind: (kind, "")),
)
HUGE_BYTES = HARNESS_FILE_CAP_BYTES + 1

# Puts each of `targets` (a file's name in `directory` -> its `file_kind`) in place of the file grading reads back:
# run by a code task's test process as it exits, and by a terminal task's answer program (which then kills test.sh,
# its ancestor, before test.sh writes its own reward).
REPLACE = """
def _replace(directory, targets):
    import base64, os, shutil
    for name, (kind, data) in targets.items():
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)
        if kind == "bytes":
            with open(path, "wb") as written:
                written.write(base64.b64decode(data))
        elif kind == "nested":  # JSON opened past any parser's stack
            with open(path, "w") as written:
                written.write(data * 100_000)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "huge":  # sparse: no disk taken, no quota hit
            with open(path, "wb") as written:
                written.truncate({huge})
        elif kind == "directory":
            os.mkdir(path)
        elif kind == "link":
            os.symlink("/dev/zero", path)
""".replace("{huge}", str(HUGE_BYTES))
# The test process's output goes to the run's log in the harness's `out/`, beside its report.
AT_TEST_EXIT = """

{replace}

def _hostile_at_exit():
    import atexit, os, sys

    def replace():
        seen = [arg.split("=", 1)[-1] for arg in sys.argv] + [os.readlink(f"/proc/self/fd/{fd}") for fd in (1, 2)]
        outs = {os.path.dirname(path) for path in seen if os.path.basename(os.path.dirname(path)) == "out"}
        for out in outs:
            _replace(out, TARGETS)

    atexit.register(replace)


TARGETS = {targets}
_hostile_at_exit()
"""


def at_test_exit(targets: dict[str, tuple[str, str]]) -> str:
    return AT_TEST_EXIT.replace("{replace}", REPLACE).replace("{targets}", repr(targets))


def writing_files(files: list[tuple[bytes, bytes]]) -> str:
    """A command that writes each (name, content) pair, bytes as they are, into the workspace: a name that collides
    with a directory the repository holds is skipped."""
    pairs = [(name.hex(), content.hex()) for name, content in files]
    script = (
        "import os\n"
        f"for name, content in {pairs!r}:\n"
        "    path = os.fsdecode(bytes.fromhex(name))\n"
        "    try:\n"
        "        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
        "        open(path, 'wb').write(bytes.fromhex(content))\n"
        "    except (IsADirectoryError, NotADirectoryError, FileExistsError):\n"
        "        pass\n"
    )
    return f"python3 -c {shlex.quote(script)}"


def assert_scored(evaluation: Evaluation, uninterrupted: bool = False) -> None:
    """Scored (the demo's reference resolves, so an unscored trial is one the reference did not judge); with
    `uninterrupted`, graded without anything raised."""
    assert evaluation.outcome_type.is_scored, (evaluation.outcome, evaluation.detail[-3000:])
    if uninterrupted:
        assert not [step for step in evaluation.steps if step.get("step") == GRADING_INTERRUPTED], evaluation.detail


@pytest.fixture(scope="module")
def code_task(demo_benchmark, shared_sandbox, tmp_path_factory):
    """A demo code issue prepared locally, and a directory for each trial's store: (instance, spec, sandbox,
    environment, scratch)."""
    instance = demo_benchmark.instances[2]
    environment = prepare_on(shared_sandbox, demo_benchmark, instance)
    spec = demo_benchmark.environment_for(instance)
    return instance, spec, shared_sandbox, environment, tmp_path_factory.mktemp("fuzz")


def code_trial(code_task, agent) -> tuple[str, Evaluation]:
    """A trial of `agent` in a store of its own: (its generation's status, its evaluation)."""
    instance, spec, sandbox, environment, scratch = code_task
    store = LocalArtifactStore(Path(tempfile.mkdtemp(dir=scratch)))
    generation = generate(instance, agent, 0, environment, sandbox, store)
    return generation.status, evaluate(instance, spec, generation, environment, sandbox, store, 120)


@settings(FUZZ, max_examples=6)
@given(files=hostile_files)
@example(files=[(THE_RED_TEAMS_NAME, b"x\n")])
@example(files=[(b"\xff\xfe", b"x\n")])
@example(files=[(b"-x/conftest.py", b"raise SystemExit(0)\n"), (b"\xe2\x82\xac\n/conftest.py", b"\xff\n")])
def test_hostile_names_in_the_workspace_are_graded(code_task, files):
    status, evaluation = code_trial(code_task, make_agent("command", {"command": writing_files(files)}))
    assert status == COMPLETED, "the diff holds every name and byte"
    assert_scored(evaluation, uninterrupted=True)
    restored = [step for step in evaluation.steps if step.get("step") == "restore_test_files"]
    assert all(step["exit_code"] == 0 for step in restored), restored  # a name is never read as an option


@settings(FUZZ, max_examples=5)
@given(report=file_kind, log=file_kind)
@example(
    report=("bytes", base64.b64encode(b'<?xml version="1.0" encoding="x-unknown"?><a/>').decode()), log=("missing", "")
)
@example(report=("fifo", ""), log=("huge", ""))
def test_whatever_the_patch_leaves_where_the_report_and_log_are_read_its_trial_is_scored(code_task, report, log):
    instance = code_task[0]
    targets = {"junit.xml": report, "tests.log": log}
    agent = make_agent("command", {"command": appending(fixed_module(instance), at_test_exit(targets))})
    status, evaluation = code_trial(code_task, agent)
    assert status == COMPLETED
    assert_scored(evaluation, uninterrupted="huge" not in (report[0], log[0]))


def test_a_predictions_file_whose_patch_names_a_hostile_file_is_graded(code_task, tmp_path):
    """`eval-pipeline grade`'s agent: the prediction's patch, applied in the workspace, is diffed and graded."""
    instance = code_task[0]
    patch = 'diff --git "a/a\\"€" "b/a\\"€"\nnew file mode 100644\n'
    patch += '--- /dev/null\n+++ "b/a\\"€"\n@@ -0,0 +1 @@\n+x\n'
    predictions = tmp_path / "predictions.jsonl"
    row = {"instance_id": instance.instance_id, "model_name_or_path": "m", "model_patch": patch}
    predictions.write_text(json.dumps(row) + "\n")
    status, evaluation = code_trial(code_task, make_agent("predictions", {"path": str(predictions)}))
    assert status == COMPLETED
    assert_scored(evaluation, uninterrupted=True)
    assert evaluation.outcome_type is Outcome.UNRESOLVED


# The terminal task's answer program: replaces the reward files, then kills test.sh before it writes its own.
REPLACE_REWARDS_THEN_KILL = """import os, signal
{replace}
_replace(os.path.dirname(os.environ["EVAL_REWARD_FILE"]), {targets})
pid = os.getpid()
while pid > 1:
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    if b"test.sh" in open(f"/proc/{pid}/cmdline", "rb").read():
        os.kill(pid, signal.SIGKILL)
"""
ANSWER_CHECK = (
    "REWARD_FILE=${EVAL_REWARD_FILE:-/logs/verifier/reward.txt}\n"
    'if [ "$(python3 answer.py)" = 42 ]; then echo 1 > "$REWARD_FILE"; else echo 0 > "$REWARD_FILE"; fi\n'
)
reward_json = st.one_of(
    file_kind,
    st.sampled_from(["[", '{"reward": ']).map(lambda opening: ("nested", opening)),
    st.sampled_from([b'{"reward": "1"}', b'{"reward": [1]}', b'{"reward": null}', b"1e999", b"nan"]).map(
        lambda data: ("bytes", base64.b64encode(data).decode())
    ),
)


@pytest.fixture(scope="module")
def terminal_task(tmp_path_factory):
    """A terminal task whose verifier checks an answer, prepared locally: (task, spec, sandbox, environment,
    scratch)."""
    root = tmp_path_factory.mktemp("terminal")
    write_terminal_task(root / "tasks", "answer", ANSWER_CHECK, "echo 'print(42)' > answer.py\n")
    tasks = load_terminal_tasks(root / "tasks", root / "mirrors")
    task = tasks.instance("answer")
    sandbox = LocalSandbox(root / "sb", ResourceLimits(memory_ceiling_mb=512), SandboxSettings(), "fuzz")
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    return task, tasks.environment_for(task), sandbox, environment, root


@settings(FUZZ, max_examples=8)
@given(text=file_kind, data=reward_json)
@example(text=("missing", ""), data=("nested", "["))
@example(text=("fifo", ""), data=("huge", ""))
def test_whatever_an_answer_leaves_where_the_rewards_are_read_its_trial_is_scored(terminal_task, text, data):
    task, spec, sandbox, environment, root = terminal_task
    program = REPLACE_REWARDS_THEN_KILL.replace("{replace}", REPLACE).replace(
        "{targets}", repr({"reward.txt": text, "reward.json": data})
    )
    agent = make_agent("command", {"command": f"printf '%s' {shlex.quote(program)} > answer.py"})
    store = LocalArtifactStore(Path(tempfile.mkdtemp(dir=root)))
    generation = generate(task, agent, 0, environment, sandbox, store, test_timeout_s=30)
    evaluation = evaluate(task, spec, generation, environment, sandbox, store, 30)
    assert_scored(evaluation, uninterrupted="huge" not in (text[0], data[0]))
    assert evaluation.outcome_type is Outcome.PATCH_BROKE_TEST_RUN, evaluation.detail


ENGINE = pytest.mark.xdist_group("engine")  # with the other tests of the container engine (conftest.py)


@pytest.mark.slow  # containers
@pytest.mark.parametrize("mode", [pytest.param("pod", marks=ENGINE), pytest.param("strict", marks=ENGINE)])
def test_the_red_teams_name_in_a_container_s_workspace_is_graded(mode, container_sandbox, demo_benchmark, store):
    """The red team's file, a quote and a non-Latin-1 character in its name, left by a code agent in a pod or a
    strict container: graded, not a grading error no reference judged."""
    instance = demo_benchmark.instances[2]
    sandbox = container_sandbox(mode=mode)
    environment = prepare_on(sandbox, demo_benchmark, instance)
    agent = make_agent("command", {"command": writing_files([(THE_RED_TEAMS_NAME, b"x\n"), (b"\xff", b"\xfe\n")])})
    generation = generate(instance, agent, 0, environment, sandbox, store)
    assert generation.status == COMPLETED, generation.error
    evaluation = evaluate(
        instance, demo_benchmark.environment_for(instance), generation, environment, sandbox, store, 120
    )
    assert_scored(evaluation, uninterrupted=True)
    assert evaluation.outcome_type is Outcome.UNRESOLVED, evaluation.detail
