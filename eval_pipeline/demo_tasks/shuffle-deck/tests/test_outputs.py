import subprocess
import sys
from pathlib import Path

# environment/deck.txt as shipped. The agent can edit the deck.txt in its working directory, so the verifier
# puts its own back before running shuffle.py on it.
DECK = ["ace", "king"]


def test_shuffle_prints_every_card_once_in_a_new_order():
    Path("deck.txt").write_text("\n".join(DECK) + "\n")
    shuffled = subprocess.run([sys.executable, "shuffle.py"], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(shuffled) == sorted(DECK)
    assert shuffled != DECK
