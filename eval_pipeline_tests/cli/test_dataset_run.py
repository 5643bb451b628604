"""Harbor's one-liner: `eval-pipeline run --dataset D --agent A [--model M] [--seeds N]` runs an agent on a
dataset without a campaign file; the campaign it writes under its run id is printed, resumed by the same
command, refused over another's, and read by the other commands by its name."""

import re
from pathlib import Path

import pytest
import yaml

from eval_pipeline.cli import main
from eval_pipeline.common.settings import Paths
from eval_pipeline.config.dataset_run import dataset_run
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR
from eval_pipeline_tests.support.cli import eval_pipeline_cli

FIRST = "eval-pipeline-demo__calclib-1"


def test_the_run_id_names_the_campaign_and_changes_with_it():
    run = dataset_run("demo", "oracle", None, 1, "local")
    assert run == dataset_run("demo", "oracle", None, 1, "local"), "the same command: the same campaign, resumed"
    assert re.fullmatch(r"oracle-[0-9a-f]{12}", run.run_id) and run.name == "run_" + run.run_id.replace("-", "_")
    assert run.campaign["variants"] == [{"name": "oracle", "agent": "oracle", "params": {}}]
    assert run.campaign["sandbox"] == {"backend": "local", "allow_untrusted_agents_locally": True}
    assert dataset_run("demo", "oracle", None, 2, "local").run_id != run.run_id
    assert dataset_run("demo", "null", None, 1, "local").run_id != run.run_id
    llm = dataset_run("demo", "llm", "org/My-Model.v2", 3, "container", run_id="nightly.1")
    assert (llm.run_id, llm.name, llm.campaign["seeds"]) == ("nightly.1", "run_nightly_1", 3)
    assert llm.campaign["variants"][0] == {
        "name": "My_Model_v2",
        "agent": "llm",
        "params": {"model": "org/My-Model.v2"},
    }
    assert llm.campaign["sandbox"] == {"backend": "container"}
    terminal = dataset_run(str(DEMO_TASKS_DIR), "oracle", None, 1, "local").campaign["benchmark"]
    assert terminal == {"kind": "terminal", "path": str(DEMO_TASKS_DIR.resolve())}, "a folder of Harbor tasks"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--agent", "oracle"], "--agent: only with --dataset"),
        (["--dataset", "demo"], "--dataset needs --agent"),
        (["--dataset", "demo", "--agent", "oracle", "--campaign", "demo"], "--campaign and --dataset: give one"),
        (["--dataset", "demo", "--agent", "oracle", "--model", "gpt"], "--model: the oracle agent takes no model"),
        (["--dataset", "demo", "--agent", "nope"], "unknown agent 'nope'"),
        (["--dataset", "nowhere.jsonl", "--agent", "oracle"], "--dataset nowhere.jsonl: no such file or directory"),
        (["--dataset", "demo", "--agent", "oracle", "--seeds", "0"], "--seeds must be at least 1"),
        (["--dataset", "demo", "--agent", "oracle", "--run-id", "a/b"], "--run-id: 'a/b' is not an id"),
    ],
)
def test_flags_that_cannot_be_used_are_one_line_and_nothing_is_written(campaign_env, capsys, argv, said):
    assert main(["run", *argv]) == 2
    assert said in capsys.readouterr().err
    assert not (Paths.from_env().data_dir / "campaigns").exists()


@pytest.mark.slow
def test_an_agent_on_a_dataset_runs_without_a_campaign_file_and_the_other_commands_read_it(campaign_env, tmp_path):
    command = ["run", "--dataset", "demo", "--agent", "oracle", "--backend", "local", "--workers", "1"]
    first = eval_pipeline_cli(campaign_env, *command, "--instance", FIRST)
    assert first.returncode == 0, first.stderr
    [(run_id, name)] = re.findall(r"run id (oracle-[0-9a-f]{12}): campaign (run_oracle_[0-9a-f]{12}) ", first.stderr)
    path = Path(campaign_env["DAGSTER_HOME"]) / "eval_pipeline" / "campaigns" / f"{name}.yaml"
    written = path.read_text()
    assert yaml.safe_load(written)["variants"] == [{"name": "oracle", "agent": "oracle", "params": {}}]
    assert "1 of 1 trials already done" not in first.stderr and "resolved" in first.stdout

    again = eval_pipeline_cli(campaign_env, *command, "--instance", FIRST)
    assert again.returncode == 0 and "1 of 1 trials already done; running 0" in again.stderr, again.stderr
    assert path.read_text() == written

    out = str(tmp_path / "out")
    exported = eval_pipeline_cli(campaign_env, "export", "--campaign", name, "--instance", FIRST, "--to", out)
    assert exported.returncode == 0 and "1 trial folder(s)" in exported.stdout, exported.stderr
    assert [folder.name for folder in (tmp_path / "out").glob("*/*")] == [FIRST]

    other = eval_pipeline_cli(campaign_env, "run", "--dataset", "demo", "--agent", "null", "--run-id", run_id)
    assert other.returncode == 2 and "holds another campaign under this name" in other.stderr, other.stderr
    assert path.read_text() == written, "another campaign never overwrites it"
