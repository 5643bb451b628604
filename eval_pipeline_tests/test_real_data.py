"""The real-data fixtures' cut: only what is named, under real commit ids, and a clear skip without a source."""

import subprocess
from pathlib import Path

import pytest

from eval_pipeline_tests.support.real_data import FilesFixture, GitFixture, provide


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def upstream(tmp_path, monkeypatch) -> list[str]:
    """A public repository stand-in at `owner/name`, three commits; the cache in tmp_path."""
    repo = tmp_path / "upstream" / "owner" / "name"
    repo.mkdir(parents=True)
    git("init", "-q", cwd=repo)
    git("config", "uploadpack.allowFilter", "true", cwd=repo)  # as GitHub allows partial clones
    commits = []
    for n in range(3):
        (repo / "data").mkdir(exist_ok=True)
        (repo / "data" / f"row{n}.json").write_text(f'{{"n": {n}}}\n')
        (repo / "other.txt").write_text("x" * 1000 * (n + 1))
        git("add", ".", cwd=repo)
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{n}", cwd=repo)
        commits.append(git("rev-parse", "HEAD", cwd=repo))
    monkeypatch.setenv("EVAL_PIPELINE_TEST_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("EVAL_PIPELINE_TEST_DATA_SOURCE", f"file://{tmp_path}/upstream/{{owner}}/{{name}}")
    return commits


def test_a_git_cut_holds_the_named_commits_under_their_ids_and_nothing_older(upstream):
    cut = provide(GitFixture("owner/name", (upstream[1],)))
    assert git("--git-dir", str(cut), "rev-parse", f"{upstream[1]}^{{commit}}", cwd=cut) == upstream[1]
    assert git("--git-dir", str(cut), "rev-list", "--all", cwd=cut).split() == [upstream[1]]
    deeper = provide(GitFixture("owner/name", (upstream[2],), depth=2))
    assert deeper != cut, "another spec is another cut, never an older one reused"
    assert git("--git-dir", str(deeper), "rev-list", "--all", cwd=deeper).split() == [upstream[2], upstream[1]]


def test_a_files_cut_holds_only_the_named_paths(upstream):
    cut = provide(FilesFixture("owner/name", upstream[2], ("/data/row1.json",)))
    assert sorted(str(p.relative_to(cut)) for p in cut.rglob("*") if p.is_file()) == ["data/row1.json"]
    assert (cut / "data" / "row1.json").read_text() == '{"n": 1}\n'


def test_an_unreachable_source_skips_with_one_line_naming_the_fixture(upstream, monkeypatch, tmp_path):
    monkeypatch.setenv("EVAL_PIPELINE_TEST_DATA_SOURCE", f"file://{tmp_path}/nowhere/{{owner}}/{{name}}")
    with pytest.raises(pytest.skip.Exception) as skipped:
        provide(GitFixture("owner/name", (upstream[0],)))
    message = str(skipped.value)
    assert "owner/name" in message and "python -m eval_pipeline_tests.support.real_data" in message
    assert "\n" not in message
    assert not list((tmp_path / "cache").glob("owner+name-*")), "nothing half-cut is left in the cache"
