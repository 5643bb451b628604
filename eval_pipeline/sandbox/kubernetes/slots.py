"""Trial slots of an environment pod, claimed in the pod itself: the run pods that share an environment pod share
no file system, so the pod is where they agree which slot (and so which workspace and uid) each one uses."""

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from eval_pipeline.common.outcomes import InfrastructureError
from eval_pipeline.sandbox.pods.exec_transport import HARNESS, PodExec
from eval_pipeline.sandbox.pods.images import WORKSPACES

logger = logging.getLogger(__name__)

# Claims a free slot in the pod: mkdir is atomic there, whichever machine the claimant runs on.
# A claim whose holder stopped refreshing it (a crashed run) is broken by renaming it away first,
# which exactly one breaker wins. Prints the slot, or exits BUSY_EXIT when every slot is held.
_CLAIM_SLOT = """
import os, shutil, sys, time
claims, slots, owner, stale_after = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
os.makedirs(claims, exist_ok=True)
for slot in range(slots):
    path = os.path.join(claims, f"slot{slot}")
    try:
        os.mkdir(path)
    except FileExistsError:
        try:
            if time.time() - os.stat(path).st_mtime < stale_after:
                continue
            os.rename(path, f"{path}.stale-{owner}")
        except FileNotFoundError:
            continue
        shutil.rmtree(f"{path}.stale-{owner}")
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
    with open(os.path.join(path, "owner"), "w") as f:
        f.write(owner)
    print(slot)
    sys.exit(0)
sys.exit(75)
"""
_RELEASE_SLOT = """
import shutil, sys
path, owner = sys.argv[1], sys.argv[2]
try:
    mine = open(path + "/owner").read() == owner
except OSError:
    mine = False
if mine:
    shutil.rmtree(path)
"""
CLAIMS = f"{WORKSPACES}/.claims"
BUSY_EXIT = 75


@contextmanager
def claimed_slot(
    pod: PodExec, slots: int, *, poll_s: float = 2.0, heartbeat_s: float = 30.0, stale_after_s: float = 300.0
) -> Iterator[int]:
    """One of the pod's `slots` trial slots, held for the block by a claim in the pod itself.

    Run pods on different machines share no file system, only the environment pod, so the pod is
    where they agree who uses which slot (and so which workspace and uid). The claim is refreshed
    every `heartbeat_s` while held; one not refreshed for `stale_after_s` was left by a crashed run.
    """
    owner = uuid.uuid4().hex
    while True:
        exit_code, stdout, stderr = pod.run(
            HARNESS.python("-c", _CLAIM_SLOT, CLAIMS, str(slots), owner, str(stale_after_s))
        )
        if exit_code == 0:
            break
        if exit_code != BUSY_EXIT:
            raise pod.failure(f"claiming a slot failed (exit {exit_code}): {stderr[-2000:]!r}")
        time.sleep(poll_s)
    try:
        slot = int(stdout)
    except ValueError:  # the engine lost the exec's output (as for a uid claim): the claim goes stale, unused
        raise pod.failure(f"claiming a slot answered {stdout[-200:]!r}, not a slot") from None
    claim = f"{CLAIMS}/slot{slot}"
    held = threading.Event()

    def refresh() -> None:
        while not held.wait(heartbeat_s):
            try:
                pod.run(["touch", claim])
            except InfrastructureError as error:  # the trial itself will meet the same failure
                logger.warning("could not refresh %s: %s", claim, error)

    heartbeat = threading.Thread(target=refresh, daemon=True)
    heartbeat.start()
    try:
        yield slot
    finally:
        held.set()
        heartbeat.join()
        try:
            pod.run(HARNESS.python("-c", _RELEASE_SLOT, claim, owner))
        except InfrastructureError as error:  # unrefreshed, the claim goes stale and is broken later
            logger.warning("could not release %s: %s", claim, error)
