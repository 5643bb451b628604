"""Terminal tasks in the Terminal-Bench / Harbor task-directory format.

A task is a directory::

    instruction.md          what the agent is asked to do
    task.toml (task.yaml)   [verifier] timeout_sec, env; [agent] timeout_sec;
                            [environment] cpus, memory_mb (or memory = "2G"), storage_mb,
                            allow_internet, docker_image; [metadata]
    environment/Dockerfile  the environment; its WORKDIR (default /app) is the task's working tree
    tests/test.sh           the verifier: the reward file it writes decides
    solution/solve.sh       the reference solution, run by the `oracle` agent

The working tree is what the Dockerfile's COPY and ADD place under WORKDIR. It is committed into a git repository
with a fixed author and date, so its commit is the same on every machine; from there a terminal task flows through
the sandboxes like a code task: workspaces are forked from the commit, and the diff of its workspace is the agent's
patch. On the container backend, though, the task is judged as Harbor judges it: its verifier runs in the agent's
own container right after the agent, processes still running (`verify_in_place`; trial/generation.py, trial/evaluation.py).

On the container backend a task runs as its author wrote it: its own Dockerfile is built as it is (every
instruction; only `FROM` can be replaced, by the `task_base_images` setting, where no registry can be reached), with
the harness on top, and each workspace is a container of its own in which the agent works as root in the WORKDIR.
A task whose task.toml names its image (`docker_image`, as Terminal-Bench 2's do) runs in that image instead
where its slice says `images: pull` or `auto` (`named_image`): pulled at its registry digest, the harness layer
alone built on it, the Dockerfile never built (its WORKDIR still names the working tree).
`tests/` and `solution/` appear at Harbor's paths (/tests, /solution) only for the verifier and the oracle, and the
reward is read from /logs/verifier; every agent command sees /tests and /logs as empty directories of its own. Scripts also find these through variables: `$EVAL_TESTS_DIR`,
`$EVAL_SOLUTION_DIR`, `$EVAL_REWARD_FILE`. The reward file (`reward.txt`, or `reward.json` with `{"reward": x}`)
decides; a verifier that wrote none is a grading error, never a pass.

The local backend runs a task only where that is faithful: no RUN step in its Dockerfile, nothing copied outside the
WORKDIR, and no absolute path in its scripts that only an image has (/app, /tests, /logs, /solution). Any other task
is refused there (`local_problem` says why) rather than graded unfaithfully.
"""

import base64
import hashlib
import json
import re
import shlex
import shutil
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from eval_pipeline.common.git import COMMIT_ENV, GitError, git
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.grading.verdict import Verdict, VerifierRun, apply_model_patch
from eval_pipeline.sandbox import ExecResult, Workspace
from eval_pipeline.tasks.data import TaskImage
from eval_pipeline.tasks.dataset import Benchmark, InvalidDatasetError, RowProblem, id_problem
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource
from eval_pipeline.tasks.named_image import NamedImage, qualified_reference, reference_problem
from eval_pipeline.tasks.terminal.verifier import run_verifier, score_verifier

DEMO_TASKS_DIR = Path(__file__).parents[2] / "demo_tasks"
TERMINAL_OWNER = "terminal"
DEFAULT_WORKDIR = "/app"
DEFAULT_AGENT_TIMEOUT_S = 600.0
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
HARBOR_PATHS = ("/tests", "/solution", "/logs")
# A default the harness's variables override (`${EVAL_REWARD_FILE:-/logs/verifier/reward.txt}`) is no absolute path.
_HARNESS_DEFAULT = re.compile(r"\$\{EVAL_[A-Z_]+:-[^}]*\}")


@dataclass(frozen=True)
class TerminalTask:
    """One terminal task, loaded and validated; `repo@base_commit` is its working tree.

    A `Task` (tasks/task.py) that brings its own image, resources and timeouts, and whose reference is solve.sh.
    """

    reference_patch: ClassVar[str | None] = None  # the reference is what solve.sh leaves in a workspace

    instance_id: str
    repo: str
    base_commit: str
    instruction: str
    workdir: str
    tests: Mapping[str, str | bytes]
    solution: Mapping[str, str | bytes]
    agent_timeout_s: float
    verifier_timeout_s: float
    memory_mb: int | None
    cpus: float | None
    verifier_env: Mapping[str, str] = field(default_factory=dict)
    image_install: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    version: str = ""
    dockerfile: str = ""
    environment_hash: str = ""  # every file under environment/, so a changed build context is a changed task
    local_problem: str = ""  # why the local backend cannot run the task faithfully ('' when it can)
    allow_internet: bool = True  # [environment] allow_internet (Harbor's default): false runs its containers offline
    storage_mb: int | None = None  # [environment] storage_mb (or storage = "10G"): recorded, not enforced
    environment_dir: str = field(default="", compare=False)  # where the build context is on this machine
    # [environment] docker_image, qualified as Docker reads it ('' where it names none): the named image a slice
    # with `images: pull` or `auto` runs the task in (`named_image`). Not in the task's row: a pulled image's
    # digest is in its environment's key, and a slice that builds never uses it.
    docker_image: str = ""

    def to_row(self) -> dict[str, Any]:
        """A flat row for the snapshot; nested values as JSON text, so parquet keeps one column type.

        The build context's location differs by machine and is left out, so the row (and the task's hash) do not;
        so is `docker_image`, which only a slice that pulls uses, under a key holding the pulled image's digest.
        """
        row = asdict(self)
        del row["environment_dir"], row["docker_image"]
        for name in ("tests", "solution", "verifier_env", "metadata", "image_install"):
            row[name] = json.dumps(row[name], sort_keys=True, default=_as_json)
        return row

    @property
    def content_hash(self) -> str:
        return stable_hash(self.to_row())

    @property
    def environment(self) -> EnvironmentSpec:
        return EnvironmentSpec(image_install=self.image_install)

    @property
    def environment_setup_commit(self) -> str:
        return self.base_commit  # no requirements file is ever read: nothing but the working tree

    @property
    def own_image(self) -> TaskImage:
        return self  # built from its Dockerfile as written, on the container backend only

    @property
    def named_image(self) -> NamedImage | None:
        """The image task.toml's `docker_image` names, its working tree at the Dockerfile's WORKDIR and no Python
        of the environment's to stand for (a terminal task's commands use the image's own); None where it names
        none."""
        return NamedImage(self.docker_image, self.workdir) if self.docker_image else None

    def apply_reference(self, workspace: Workspace, timeout_s: float | None) -> ExecResult:
        """Run solution/solve.sh, given only now, within the agent's time limit (`timeout_s`, scaled)."""
        solution = workspace.write_harness_tree("solution", self.solution)
        command = f"bash {shlex.quote(solution + '/solve.sh')}"
        return workspace.run(command, timeout_s=timeout_s or self.agent_timeout_s, env={"EVAL_SOLUTION_DIR": solution})

    def grade(self, spec: EnvironmentSpec, model_patch: str, workspace: Workspace, test_timeout_s: float) -> Verdict:
        """Harbor's grading of `model_patch` on a pristine workspace of the task (patch replay), or of the empty
        patch on a snapshot of the agent's container (a re-grade): apply it, run the verifier and score its run,
        whose reward decides (verifier.py); `spec` plays no part."""
        verdict = Verdict(outcome=Outcome.GRADING_ERROR)
        if not apply_model_patch(verdict, model_patch, workspace):
            return verdict
        scored = score_verifier(run_verifier(self, workspace, test_timeout_s))
        scored.steps[:0], scored.audit[:0] = verdict.steps, verdict.audit
        return scored

    def requirements(self, spec: EnvironmentSpec, repo_dir: Path) -> str:
        """Nothing: a terminal task's environment is its own Dockerfile's, never built from requirements files."""
        raise ValueError(f"{self.instance_id}: a terminal task installs no requirements files")

    def verify_in_place(self, workspace: Workspace, test_timeout_s: float) -> VerifierRun:
        """Run the verifier in the agent's own workspace as the agent left it, processes still running, as
        Harbor does (verifier.run_verifier), with what the agent changed of the verifier's tools and the processes
        it left beside it, read from the engine (verifier_tools.py); its run is scored later (verifier.score_verifier)."""
        return run_verifier(self, workspace, test_timeout_s, in_place=True)


class _TaskError(ValueError):
    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    joined = re.sub(r"\s*\\\s*\n\s*", " ", text)
    instructions = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, arguments = line.partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def _copy_arguments(arguments: str) -> list[str]:
    """COPY/ADD sources and destination, in shell or JSON form, without --flags."""
    words = json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)
    return [word for word in words if not word.startswith("--")]


def _inside(workdir: str, destination: str) -> str | None:
    """The destination relative to the working tree, or None when it lies outside it."""
    path = Path(workdir, destination) if not destination.startswith("/") else Path(destination)
    try:
        return str(path.relative_to(workdir))
    except ValueError:
        return None


def _place(source: Path, target: Path, into_directory: bool) -> None:
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True, symlinks=True)
    else:
        destination = target / source.name if into_directory else target
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def working_tree(environment: Path, tree: Path) -> tuple[str, tuple[str, ...], list[str]]:
    """Lay out in `tree` what the Dockerfile places under its WORKDIR.

    Returns the WORKDIR, the RUN steps and the destinations it copies to outside the WORKDIR.
    """
    dockerfile = environment / "Dockerfile"
    if not dockerfile.is_file():
        raise _TaskError("environment/Dockerfile", "missing")
    workdir, steps, outside = DEFAULT_WORKDIR, [], []
    for keyword, arguments in _dockerfile_instructions(dockerfile.read_text()):
        if keyword == "WORKDIR":
            workdir = str(Path(workdir, arguments))
        elif keyword == "RUN":
            steps.append(arguments)
        elif keyword in ("COPY", "ADD"):
            *sources, destination = _copy_arguments(arguments)
            relative = _inside(workdir, destination)
            if relative is None or any(word.startswith(("http://", "https://")) for word in sources):
                outside.append(destination)  # outside the working tree: only an image has it
                continue
            for source in sources:
                path = (environment / source).resolve()
                if environment.resolve() not in (path, *path.parents) or not path.exists():
                    raise _TaskError("environment/Dockerfile", f"{keyword} source {source!r} is not in environment/")
                into = destination.endswith("/") or len(sources) > 1 or (tree / relative).is_dir()
                _place(path, tree / relative, into)
    return workdir, tuple(steps), outside


def _environment_hash(environment: Path) -> str:
    return stable_hash(
        {
            str(path.relative_to(environment)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(environment.rglob("*"))
            if path.is_file()
        }
    )


def _local_problem(workdir: str, steps: tuple[str, ...], outside: list[str], scripts: Mapping[str, str | bytes]) -> str:
    """Why the local backend, which runs no Dockerfile step and has no /app, cannot run the task faithfully."""
    if steps:
        return f"its Dockerfile has RUN steps ({len(steps)}), which only an image build runs"
    if outside:
        return f"its Dockerfile copies files outside its WORKDIR ({', '.join(outside[:3])})"
    roots = "|".join(re.escape(path) for path in (*HARBOR_PATHS, workdir))
    absolute = re.compile(rf"(?<![\w.$}}/-])({roots})(?=/|\b)")
    for name, text in scripts.items():
        if isinstance(text, str) and (match := absolute.search(_HARNESS_DEFAULT.sub("", text))):
            return f"{name} uses the absolute path {match[1]}, which only the task's image has"
    return ""


def _read_config(directory: Path) -> dict[str, Any]:
    for name, parse in (("task.toml", tomllib.loads), ("task.yaml", yaml.safe_load)):
        path = directory / name
        if path.is_file():
            try:
                config = parse(path.read_text())
            except (tomllib.TOMLDecodeError, yaml.YAMLError) as error:
                raise _TaskError(name, f"not valid: {error}") from None
            if not isinstance(config, dict):
                raise _TaskError(name, "expected a table of settings")
            return config
    raise _TaskError("task.toml", "missing (neither task.toml nor task.yaml)")


def _number(config: Mapping[str, Any], section: str, name: str, default: float | None) -> float | None:
    value = (config.get(section) or {}).get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise _TaskError(f"{section}.{name}", f"expected a positive number, got {value!r}")
    return float(value)


def _size_mb(config: Mapping[str, Any], name: str) -> int | None:
    """`<name>_mb = 2048`, or Harbor's older `<name> = "2G"` (memory, storage)."""
    environment = config.get("environment") or {}
    if name in environment and f"{name}_mb" not in environment:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([MG])i?B?\s*", str(environment[name]), re.IGNORECASE)
        if not match:
            raise _TaskError(
                f"environment.{name}", f"expected a size such as '2G' or '512M', got {environment[name]!r}"
            )
        return int(float(match[1]) * (1024 if match[2].upper() == "G" else 1))
    value = _number(config, "environment", f"{name}_mb", None)
    return None if value is None else int(value)


def _docker_image(config: Mapping[str, Any]) -> str:
    """[environment] docker_image qualified as Docker reads it (`alexgshaw/x:tag` is `docker.io/alexgshaw/x:tag`),
    '' where the task names none; a value that is no image reference is refused."""
    value = (config.get("environment") or {}).get("docker_image", "")
    if not isinstance(value, str) or (value and reference_problem(value)):
        raise _TaskError(
            "environment.docker_image", f"expected an image reference such as 'owner/name:tag', got {value!r}"
        )
    return qualified_reference(value) if value else ""


def _allow_internet(config: Mapping[str, Any]) -> bool:
    value = (config.get("environment") or {}).get("allow_internet", True)
    if not isinstance(value, bool):
        raise _TaskError("environment.allow_internet", f"expected true or false, got {value!r}")
    return value


def _task_files(directory: Path, required: str) -> dict[str, str | bytes]:
    """Every file under `directory` by relative path, as text, or as bytes where it is not UTF-8 (a reference
    image, a video); `required` must be among them."""
    if not (directory / required).is_file():
        raise _TaskError(f"{directory.name}/{required}", "missing")
    files: dict[str, str | bytes] = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        data = path.read_bytes()
        try:
            files[str(path.relative_to(directory))] = data.decode()
        except UnicodeDecodeError:
            files[str(path.relative_to(directory))] = data
    return files


def _as_json(value: object) -> object:
    """A task file that is bytes, as JSON (in the task's row and content hash)."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _commit_tree(tree: Path) -> str:
    git(["init", "-q", "-b", "main", str(tree)], tree.parent)
    git(["add", "-A"], tree)
    git(["commit", "-q", "--allow-empty", "--no-gpg-sign", "-m", "Task working tree"], tree, env=COMMIT_ENV)
    return git(["rev-parse", "HEAD"], tree).strip()


def _install_in_mirror(tree: Path, commit: str, target: Path) -> None:
    """Make `commit` available in the mirror repository `target`, adding it when the task changed."""
    if not target.exists():
        try:
            tree.rename(target)
            return
        except OSError:  # another process installed it first
            pass
    try:
        git(["cat-file", "-e", f"{commit}^{{commit}}"], target)
    except GitError:  # absent: fetch it from the fresh tree
        git(["fetch", "-q", str(tree), f"+HEAD:refs/eval/{commit}"], target)


def load_task(directory: Path, mirror_dir: Path) -> TerminalTask:
    """Load and validate one task directory, installing its working tree in the mirror."""
    name = directory.name
    if problem := id_problem(name):  # the task's name is its instance id
        raise _TaskError("directory name", problem)
    config = _read_config(directory)
    instruction_file = directory / "instruction.md"
    instruction = instruction_file.read_text() if instruction_file.is_file() else config.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise _TaskError("instruction.md", "missing or empty")
    tests = _task_files(directory / "tests", "test.sh")
    solution = _task_files(directory / "solution", "solve.sh") if (directory / "solution").is_dir() else {}
    verifier_env = (config.get("verifier") or {}).get("env") or {}
    if not isinstance(verifier_env, dict):
        raise _TaskError("verifier.env", "expected a table of variables")
    repo = f"{TERMINAL_OWNER}/{name}"
    target = mirror_dir / repo
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as scratch:
        tree = Path(scratch) / name
        tree.mkdir()
        workdir, steps, outside = working_tree(directory / "environment", tree)
        commit = _commit_tree(tree)
        _install_in_mirror(tree, commit, target)
    scripts = {f"tests/{path}": text for path, text in tests.items()}
    scripts |= {f"solution/{path}": text for path, text in solution.items()}
    return TerminalTask(
        instance_id=name,
        repo=repo,
        base_commit=commit,
        instruction=instruction,
        workdir=workdir,
        tests=tests,
        solution=solution,
        agent_timeout_s=_number(config, "agent", "timeout_sec", DEFAULT_AGENT_TIMEOUT_S) or DEFAULT_AGENT_TIMEOUT_S,
        verifier_timeout_s=_number(config, "verifier", "timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S)
        or DEFAULT_VERIFIER_TIMEOUT_S,
        memory_mb=_size_mb(config, "memory"),
        cpus=_number(config, "environment", "cpus", None),
        verifier_env={str(k): str(v) for k, v in verifier_env.items()},
        image_install=steps,
        metadata=dict(config.get("metadata") or {}),
        dockerfile=(directory / "environment" / "Dockerfile").read_text(),
        environment_hash=_environment_hash(directory / "environment"),
        local_problem=_local_problem(workdir, steps, outside, scripts),
        allow_internet=_allow_internet(config),
        storage_mb=_size_mb(config, "storage"),
        environment_dir=str((directory / "environment").resolve()),
        docker_image=_docker_image(config),
    )


def task_directories(path: Path) -> list[Path]:
    """`path` itself when it is a task, else the task directories inside it, by name."""
    if (path / "instruction.md").is_file() or (path / "tests").is_dir():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def load_terminal_tasks(path: Path, mirror_dir: Path, *, on_invalid: str = "reject") -> Benchmark:
    """Every task under `path` as a benchmark; invalid tasks reject it whole or are quarantined."""
    if on_invalid not in Benchmark.ON_INVALID:
        raise ValueError(f"on_invalid must be one of {Benchmark.ON_INVALID}, got {on_invalid!r}")
    tasks, problems = [], []
    for directory in task_directories(path):
        try:
            tasks.append(load_task(directory, mirror_dir))
        except _TaskError as error:
            problems.append(RowProblem(f"task {directory}", directory.name, error.field, str(error)))
    if problems and on_invalid == "reject":
        raise InvalidDatasetError(str(path), problems)
    return Benchmark(
        name=path.name,
        instances=tuple(tasks),
        version=stable_hash(sorted(task.content_hash for task in tasks)),
        source=RepoSource(mirror_dir=str(mirror_dir)),
        environments={f"{task.repo}@{task.version}": task.environment for task in tasks},
        quarantined=tuple(problems),
    )
