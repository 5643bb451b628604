"""An honest agent's everyday commands work in every walled mode: the local opt-in, pods and strict containers.

A scripted agent writes a patch to /tmp and applies it in a later command, keeps files in /var/tmp, its home and
~/.cache, configures git globally, makes a virtualenv and pip-installs a local package into it (no network: a
wheel built on the spot), runs a server in the background and reaches it within the same command (every process
of a trial ends with its command, `docs/HOSTILE_AGENTS.md`), and stashes, commits and checks out branches in its
workspace. A trial beside it and the next trial find none of its temporary files or caches.
"""

import shlex
from pathlib import Path

import pytest

from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.base import Workspace
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline_tests.support.trials import prepare_on

# A new file's patch, as a model prints it.
_PATCH = (
    r"diff --git a/habit.txt b/habit.txt\nnew file mode 100644\n"
    r"--- /dev/null\n+++ b/habit.txt\n@@ -0,0 +1 @@\n+applied\n"
)
# A pure wheel of one module, `habit`, written with the standard library: pip installs it with no index and no
# build backend (building a source tree offline takes `wheel`, which a fresh virtualenv lacks).
_MAKE_WHEEL = """
import base64, hashlib, sys, zipfile
files = {
    "habit.py": b"GREETING = 'installed'\\n",
    "habit-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\\nName: habit\\nVersion: 1.0\\n",
    "habit-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
}
def digest(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
record = "".join(f"{name},sha256={digest(data)},{len(data)}\\n" for name, data in files.items())
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    for name, data in files.items():
        wheel.writestr(name, data)
    wheel.writestr("habit-1.0.dist-info/RECORD", record + "habit-1.0.dist-info/RECORD,,\\n")
"""
_WHEEL = "/tmp/habit-1.0-py3-none-any.whl"
_SERVE_AND_FETCH = (
    "python -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 & server=$!; "
    'for attempt in $(seq 50); do python -c "import urllib.request as u; '
    "print(u.urlopen('http://127.0.0.1:8765/README.md').read().decode())\" 2>/dev/null && break; sleep 0.1; done; "
    "kill $server"
)
# (what the agent does, its command, what its output holds); each command in turn, in one workspace.
HABITS = (
    (
        "a patch written to /tmp and applied",
        f"printf '{_PATCH}' > /tmp/x.diff && git apply /tmp/x.diff && cat habit.txt",
        "applied",
    ),
    ("the patch still in /tmp at the next command", "git apply --check -R /tmp/x.diff && echo kept", "kept"),
    (
        "/var/tmp and mktemp",
        "echo parked > /var/tmp/habit && f=$(mktemp) && echo tmp > $f && cat /var/tmp/habit $f",
        "parked\ntmp",
    ),
    (
        "home, its caches and git's global configuration",
        "mkdir -p ~/.cache/habit && echo cached > ~/.cache/habit/entry && git config --global user.name Agent"
        " && git config --global user.email agent@example.com && cat ~/.cache/habit/entry",
        "cached",
    ),
    (
        "a virtualenv and a local package pip-installed into it",
        f"python -m venv /tmp/venv && python -c {shlex.quote(_MAKE_WHEEL)} {_WHEEL}"
        f" && /tmp/venv/bin/pip install -q --no-index --disable-pip-version-check {_WHEEL}"
        " && cd / && /tmp/venv/bin/python -c 'import habit; print(habit.GREETING)'",
        "installed",
    ),
    ("a background server reached within the command", _SERVE_AND_FETCH, "calclib"),
    (
        "git stash, commit and checkout",
        "echo more >> habit.txt && git add -A && git stash -q && test ! -e habit.txt && git stash pop -q"
        " && git checkout -q -b habit && git add -A && git commit -qm habit && git checkout -q -"
        " && git checkout -q habit && git log --format=%s -1",
        "habit",
    ),
)
# What the habits left in /tmp, /var/tmp and the home: no other trial finds any of it.
_LOOK_FOR_WHAT_WAS_LEFT = (
    "ls -d /tmp/x.diff /tmp/venv /var/tmp/habit ~/.cache/habit ~/.gitconfig /tmp/tmp.* 2>/dev/null; echo looked"
)


def unmet_habits(workspace: Workspace) -> list[str]:
    """The habits whose command failed or printed other than expected, each with what it did."""
    unmet = []
    for habit, command, expected in HABITS:
        result = workspace.run(command, timeout_s=120)
        if not (result.ok and expected in result.stdout):
            unmet.append(f"{habit}: {result.summary()}")
    return unmet


def assert_habits_work_and_stay_private(sandbox, environment) -> None:
    with sandbox.workspace(environment, "habits") as agent:
        assert not (unmet := unmet_habits(agent)), "\n".join(unmet)
        with sandbox.workspace(environment, "beside") as neighbour:
            beside = neighbour.run(_LOOK_FOR_WHAT_WAS_LEFT, timeout_s=30)
    with sandbox.workspace(environment, "next") as following:
        after = following.run(_LOOK_FOR_WHAT_WAS_LEFT, timeout_s=30)
    for look in (beside, after):
        assert (look.exit_code, look.stdout) == (0, "looked\n"), look.summary()


@pytest.fixture(scope="module")
def walled(tmp_path_factory, demo_benchmark):
    """An opt-in campaign's sandbox (untrusted agents on the local backend, walled) and the demo's first
    environment in it."""
    settings = SandboxSettings(allow_untrusted_agents_locally=True)
    sandbox = LocalSandbox(tmp_path_factory.mktemp("habits"), ResourceLimits(), settings, "habits")
    environment = prepare_on(sandbox, demo_benchmark, demo_benchmark.instances[0])
    if environment.details["trial_view"] == "copy":
        pytest.skip("this system refuses the mount namespace the walls take")
    return sandbox, environment


def test_an_honest_agents_habits_work_on_the_local_opt_in(walled):
    """The door: `printf ... > /tmp/x.diff && git apply /tmp/x.diff`, a model's ordinary command, failed with
    "Read-only file system" on the local opt-in, and the trial was scored unresolved."""
    assert_habits_work_and_stay_private(*walled)


def test_a_link_planted_on_the_way_to_the_workspace_is_removed_never_followed(walled):
    """Where the data directory lies under /tmp (as here), a walled command finds its workspace and environment
    bound again inside its own /tmp, on directories its trial may move between commands: one replaced by a link
    to / is removed, never followed, and the next command runs in its workspace as before."""
    sandbox, environment = walled
    location = Path(environment.location)
    if not location.is_relative_to("/tmp"):
        pytest.skip("the data directory is not under /tmp here")
    top = f"/tmp/{location.relative_to('/tmp').parts[0]}"
    with sandbox.workspace(environment, "planter") as workspace:
        planted = workspace.run(f"mv {top} /tmp/moved && ln -s / {top} && test -L {top}", timeout_s=30)
        assert planted.ok, planted.summary()
        after = workspace.run(f"test ! -L {top} && git status --short && pwd && python -c 'print(1)'", timeout_s=30)
    assert (after.exit_code, after.stdout) == (0, f"{location / 'repo'}\n1\n"), after.summary()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pod", "strict"])
def test_an_honest_agents_habits_work_in_containers(container_sandbox, demo_benchmark, mode):
    """The same habits in a pod, beside another trial, and in a strict container."""
    sandbox = container_sandbox(mode=mode, pod_parallelism=2)
    environment = prepare_on(sandbox, demo_benchmark, demo_benchmark.instances[0])
    assert_habits_work_and_stay_private(sandbox, environment)
