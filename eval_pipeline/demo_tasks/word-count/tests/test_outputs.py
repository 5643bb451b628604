from pathlib import Path

# The words in environment/data/input.txt as shipped: the agent can edit the copy in its working directory.
EXPECTED = 17


def test_count_matches_the_words_in_the_input():
    assert Path("count.txt").read_text().strip() == str(EXPECTED)
