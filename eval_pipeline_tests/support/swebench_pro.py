"""A real public SWE-bench Pro row for the tests, cut from its public sources, and its image built here.

Nothing of it is committed. The row is qutebrowser's `--untrusted-args` fix
(`instance_qutebrowser__qutebrowser-8f46ba3f...`), made from:

- scaleapi/SWE-bench_Pro-os at `PRO_OS_COMMIT`: the row's `run_scripts/<id>/` (its run script, its parser and its
  `instance_info.txt`, which holds the graded lists as the Hugging Face rows do) and its two Dockerfiles (whose
  `ENV` lines Pro's harness exports before the run);
- qutebrowser/qutebrowser's fix commit and its parent (the row's base commit): the row's `patch` and `test_patch`
  are `git diff --abbrev=11` of the two, outside and inside `tests/` (the patch's bytes hash to the sha256 the
  public dataset publishes for it, `GOLD_PATCH_SHA256`).

The image stands in for Pro's `jefzda/sweap-images:<tag>` (Docker Hub is not reachable here): built from this
machine's Debian base and pyenv Python 3.9 as Pro's `python:3.9-slim` holds it (under /usr/local), with the Debian
packages and the pip pins of the row's own Dockerfiles and requirements files, and the repository at /app with its
history up to the fix commit, as Pro's images clone the whole upstream history (the future commit included).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval_pipeline_tests.support.real_data import FilesFixture, FixtureUnavailable, GitFixture, provide

PRO_OS_COMMIT = "ca10a60a5fcae51e6948ffe1485d4153d421e6c5"
INSTANCE_ID = "instance_qutebrowser__qutebrowser-8f46ba3f6dc7b18375f7aa63c48a1fe461190430-v2ef375ac784985212b1805e1d0431dc8f1b3c171"
BASE_COMMIT = "1547a48e6f1a8af8dc618d5afe858084ebfd317f"
FIX_COMMIT = "8f46ba3f6dc7b18375f7aa63c48a1fe461190430"
DOCKERHUB_TAG = (
    "qutebrowser.qutebrowser-qutebrowser__qutebrowser-8f46ba3f6dc7b18375f7aa63c48a1fe461190430-"
    "v2ef375ac784985212b1805e1d0431dc8f1b3c"
)
GOLD_PATCH_SHA256 = "bcf3944e04c045f03312215f34d19da7af52eba44728c4ad74988ea8968d6507"
SCRIPTS = FilesFixture(
    "scaleapi/SWE-bench_Pro-os",
    PRO_OS_COMMIT,
    (
        f"/run_scripts/{INSTANCE_ID}/",
        f"/dockerfiles/base_dockerfile/{INSTANCE_ID}/",
        f"/dockerfiles/instance_dockerfile/{INSTANCE_ID}/",
    ),
)
# The one file of the repository that no graded test reads and whose blob a mirror made by the library's `fetch`
# lacks (a SQLite sample of the importer's tests): left out of every checkout, so either source serves.
LEFT_OUT = "tests/unit/scripts/importer_sample/mozilla/input/places.sqlite"
_SERVE_FILTERS = "git -c uploadpack.allowFilter=true -c uploadpack.allowAnySHA1InWant=true upload-pack"


@dataclass(frozen=True)
class PartialRepository(GitFixture):
    """A fix commit (`commits`, one) and its parent (`base`, the row's base commit) of a public repository, as a
    partial clone holding the trees of both and the blobs of the base commit's checkout (all but `LEFT_OUT`) and of
    the fix's changes."""

    base: str = ""

    @property
    def fix(self) -> str:
        return self.commits[0]

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(["partial", self.repo, self.base, self.fix, LEFT_OUT]).encode()).hexdigest()[
            :16
        ]

    def cut(self, url: str, target: Path) -> None:
        _git("init", "-q", str(target))
        _git("-C", str(target), "remote", "add", "origin", url)
        _git("-C", str(target), "config", "remote.origin.uploadpack", _SERVE_FILTERS)
        try:
            _git("-C", str(target), "fetch", "-q", "--filter=blob:none", "--depth=2", "origin", self.fix)
        except subprocess.CalledProcessError as error:
            raise FixtureUnavailable(f"{url}: {error.stderr.decode(errors='replace')[-300:]}") from None
        _git("-C", str(target), "sparse-checkout", "set", "--no-cone", "/*", f"!/{LEFT_OUT}")
        _git("-C", str(target), "checkout", "-q", self.base)
        _git("-C", str(target), "diff", "--quiet", self.base, self.fix, "--", ".", f":!{LEFT_OUT}", check=False)


REPOSITORY = PartialRepository("qutebrowser/qutebrowser", (FIX_COMMIT,), depth=2, base=BASE_COMMIT)

# The row's Debian packages (its base Dockerfile's list, less the compilers, which no pinned wheel needs) and what
# PyQt5's wheels load at run time under `QT_QPA_PLATFORM=offscreen`.
DEBIAN_PACKAGES = (
    "xvfb",
    "xauth",
    "dbus",
    "dbus-x11",
    "fonts-liberation2",
    "libgl1",
    "libegl1",
    "libglib2.0-0",
    "libxkbcommon0",
    "libxkbcommon-x11-0",
    "libdbus-1-3",
    "libfontconfig1",
    "libnss3",
    "libxcomposite1",
    "libxdamage1",
    "libxrandr2",
    "libxtst6",
    "libxi6",
    "libasound2",
    "libxcb-icccm4",
    "libxcb-image0",
    "libxcb-keysyms1",
    "libxcb-randr0",
    "libxcb-render-util0",
    "libxcb-xinerama0",
    "libxcb-shape0",
    "libxcb-xkb1",
)
PYENV_PYTHON = Path("/root/.pyenv/versions/3.9.18")
# Pro's instance Dockerfiles set this for every run (its harness exports them before the run script).
PYTEST_ADDOPTS = "--tb=short -v --continue-on-collection-errors --reruns=3"


def _git(*args: str, check: bool = True, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], check=check, capture_output=True, input=stdin).stdout


def pro_row(scripts_root: Path, repository: Path) -> dict[str, Any]:
    """The row in the public dataset's schema (its lists JSON-encoded, as the Hub's parquet holds them)."""
    info = (scripts_root / "run_scripts" / INSTANCE_ID / "instance_info.txt").read_text()
    fields = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line)
    diff = ("-C", str(repository), "diff", "--abbrev=11", BASE_COMMIT, FIX_COMMIT, "--")
    patch = _git(*diff, ".", ":!tests").decode()
    assert hashlib.sha256(patch.encode()).hexdigest() == GOLD_PATCH_SHA256, "the gold patch is not the dataset's"
    test_files = json.loads(fields["Test Files"])
    return {
        "instance_id": INSTANCE_ID,
        "repo": "qutebrowser/qutebrowser",
        "base_commit": BASE_COMMIT,
        "patch": patch,
        "test_patch": _git(*diff, "tests").decode(),
        "problem_statement": "Unsafe handling of untrusted command-line arguments: add `--untrusted-args`.",
        "requirements": "",
        "interface": "No new interfaces are introduced.",
        "repo_language": "python",
        "fail_to_pass": fields["FAIL_TO_PASS"],
        "pass_to_pass": fields["PASS_TO_PASS"],
        "before_repo_set_cmd": (
            f"git reset --hard {BASE_COMMIT}\ngit clean -fd \ngit checkout {BASE_COMMIT} \n"
            f"git checkout {FIX_COMMIT} -- {' '.join(test_files)}"
        ),
        "selected_test_files_to_run": json.dumps(test_files),
        "dockerhub_tag": DOCKERHUB_TAG,
    }


def provide_row_sources() -> tuple[Path, Path]:
    """(the cut Pro-os files, the cut qutebrowser repository); skips the test where a source is unreachable."""
    return provide(SCRIPTS), provide(REPOSITORY)


DOCKERFILE = """\
FROM {base}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {packages} \\
    && rm -rf /var/lib/apt/lists/*
COPY python /usr/local
RUN ldconfig && ln -sf python3.9 /usr/local/bin/python
COPY ca.crt /etc/ssl/certs/extra-ca.crt
COPY requirements /tmp/requirements
RUN PIP_CERT=/etc/ssl/certs/extra-ca.crt python -m pip install --no-cache-dir -r /tmp/requirements/requirements-tests.txt \\
    -r /tmp/requirements/requirements-pyqt.txt jinja2==3.0.2 PyYAML==5.4.1 && rm -rf /tmp/requirements
COPY app /app
WORKDIR /app
RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation -e .
ENV PYTEST_ADDOPTS="{addopts}"
"""


def build_image(repository: Path, tag: str, base_image: str, ca_bundle: str, scratch: Path) -> None:
    """Build the row's stand-in image as `tag` with Podman (the heavy layers first, so that a rebuild with another
    clone reuses them)."""
    context = scratch / "context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    shutil.copytree(
        PYENV_PYTHON, context / "python", symlinks=True, ignore=shutil.ignore_patterns("_sandboxing_*", "__pycache__")
    )
    shutil.copy(ca_bundle, context / "ca.crt")
    (context / "requirements").mkdir()
    for name in ("requirements-tests.txt", "requirements-pyqt.txt"):
        text = _git("-C", str(repository), "show", f"{BASE_COMMIT}:misc/requirements/{name}")
        (context / "requirements" / name).write_bytes(text)
    app = str(context / "app")
    _git("init", "-q", app)
    _git("-C", app, "remote", "add", "origin", f"file://{repository}")
    _git("-C", app, "config", "remote.origin.uploadpack", _SERVE_FILTERS)
    _git("-C", app, "fetch", "-q", "--filter=blob:none", "--depth=1", "origin", BASE_COMMIT)
    _git("-C", app, "sparse-checkout", "set", "--no-cone", "/*", f"!/{LEFT_OUT}")
    _git("-C", app, "checkout", "-q", BASE_COMMIT)
    # The fix commit as a full clone holds it (a pack of its own, no promisor's), on the branch a clone checks out.
    objects = _git("-C", str(repository), "rev-list", "--objects", FIX_COMMIT, f"^{BASE_COMMIT}")
    pack = _git("-C", str(repository), "pack-objects", "--stdout", stdin=objects)
    _git("-C", app, "index-pack", "--stdin", "--fix-thin", stdin=pack)
    _git("-C", app, "update-ref", "refs/heads/master", FIX_COMMIT)
    _git("-C", app, "remote", "set-url", "origin", "https://github.com/qutebrowser/qutebrowser.git")
    dockerfile = DOCKERFILE.format(base=base_image, packages=" ".join(DEBIAN_PACKAGES), addopts=PYTEST_ADDOPTS)
    (context / "Dockerfile").write_text(dockerfile)
    subprocess.run(["podman", "build", "-q", "-t", tag, str(context)], check=True, capture_output=True, timeout=3600)
