"""The tokens a group of twins holds at its one changed place, drawn so that none tells the original's.

A group (tasks/swebench/canaries.py) is a graded test and k copies of it that differ from it at one token of
one expected value: a numeral, or a word or a run of digits in a string. The group's k + 1 tokens come from a
pool that the rest of the test and of the file determine, not the original token, and the chance of drawing a
given set of tokens is the same whichever of them is the original's (the pool is listed and drawn from
uniformly, or is a class of numerals taken as a cyclic window with the original's place in it uniform). So
whatever a reader computes from the group's tokens alone (which is smallest, middlemost, roundest, longest,
how each is written, how far each is from the others) points at the original one time in k + 1.

What a reader can also compare the tokens with is the test's own source and the file's. So the pool follows
the original token's relation to them (`Surroundings`), each relation's pool less those before it:
- a numeral whose value the test holds elsewhere draws from the values the test holds (`clamp(5, 0, 10) == 5`
  gives 0, 5 and 10); one whose value the rest of the file holds, from the file's numerals of its class that
  the test does not hold; any other, from its class (base, digits, leading and trailing zeros, the file's
  hexadecimal case: `2.5` among `2.3`..`2.6`, `300` among `200`..`500`) less every value the test and the file
  hold;
- a word in a string draws from the test's words of its length if it is one, else from the pieces of them of
  its length (`abcde` of `abcdefghij`), else from the rest of the file's words, then their pieces, else from
  the words one letter apart from it (at a place drawn uniformly) found in none of those; all in its case;
- no token makes its line one that the file held at the base commit (a reader can read that version with git):
  a line found there would be the original's, or a twin's. Where the original's line is one, the site is
  `readable`: a group there bounds nothing, and serves only to catch a forger that passes every test.
What stays open is prior knowledge (how likely each token is as an answer: 0 and 1 are common, an English word
more likely than a piece of one) and what the code under test returns, which a forger that runs the group
compares with each member's expected value (benchmarks/twin_forger.py).
"""

import ast
import keyword
import random
import re
import string
from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property
from typing import cast

__all__ = [
    "Listed",
    "Numerals",
    "Site",
    "Surroundings",
    "Window",
    "expected_constants",
    "number_value",
    "numerals",
    "sites",
    "words",
]

_ASSERTING_CALLS = {"assertEqual", "assertEquals", "assertIs", "assert_equal"}
_NUMBER = re.compile(
    r"(?<![\w.])(?:0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?![\w.])"
)
_DIGIT_RUN = re.compile(r"(?<![\w.])\d+(?![\w.])")
_WORD = re.compile(r"[A-Za-z]+")
_DEF_NAME = re.compile(r"(\bdef\s+)\w+")
_BASES = {"x": 16, "o": 8, "b": 2}
_SCAFFOLDING = frozenset([*(word.lower() for word in keyword.kwlist), "self", "cls"])
_LISTED_AT_MOST = 4096  # a class of numerals this small is counted in full; a larger one has room to spare
SITES_AT_MOST = 16  # tokens of a test weighed as its group's site: the first ones


def end_position(node: ast.stmt | ast.expr) -> tuple[int, int]:
    """The line (1-based) and column (bytes) where a node parsed from source ends; `ast.parse` sets both."""
    if node.end_lineno is None or node.end_col_offset is None:
        raise ValueError(f"an ast.{type(node).__name__} without an end position: only parsed nodes are read")
    return node.end_lineno, node.end_col_offset


def number_value(text: str) -> int | float | None:
    """The value a numeral's text denotes (a Python numeral, or a run of digits in a string); None if none."""
    try:
        if re.fullmatch(r"\d+|0[xXoObB][0-9a-fA-F_]+|[1-9][\d_]*", text):
            return int(text, 0) if text[:2].lower() in ("0x", "0o", "0b") else int(text.replace("_", ""))
        if re.fullmatch(r"[\d_]*\.?[\d_]*(?:[eE][+-]?\d+)?", text) and any(c.isdigit() for c in text):
            return float(text)
    except ValueError:
        pass
    return None


@dataclass(frozen=True)
class Numerals:
    """The numerals written as `template` but for its digits at `positions` (in `base`): `lead` zeros, a core of
    the same width whose first and last digits are not zero, and `trail` zeros; in the order of their cores."""

    template: str
    positions: tuple[int, ...]
    base: int
    lead: int
    trail: int
    upper: bool

    @classmethod
    def of(cls, text: str) -> "Numerals | None":
        """The class of a Python numeral or a run of digits; None for one without a core (`0`, `0.0`)."""
        base, start = 10, 0
        if re.match(r"0[xXoObB]", text):
            base, start = _BASES[text[1].lower()], 2
        mantissa = len(text) if base != 10 else cast(re.Match[str], re.match(r"[^eEjJ]*", text)).end()
        alphabet = (
            string.digits + string.ascii_letters[: max(base - 10, 0)] + string.ascii_uppercase[: max(base - 10, 0)]
        )
        positions = tuple(i for i in range(start, mantissa) if text[i] in alphabet)
        digits = "".join(text[i] for i in positions).lower()
        core = digits.strip("0")
        if not core:
            return None
        lead = len(digits) - len(digits.lstrip("0"))
        upper = any(text[i].isupper() for i in positions)
        return cls(text, positions, base, lead, len(digits) - len(digits.rstrip("0")), upper)

    @property
    def width(self) -> int:
        return len(self.positions) - self.lead - self.trail

    def holds(self, text: str) -> bool:
        """Whether `text` is a numeral of this class."""
        other = Numerals.of(text)
        return other is not None and self._shape == other._shape

    @property
    def _shape(self) -> tuple[object, ...]:
        masked = "".join("#" if i in self.positions else c for i, c in enumerate(self.template))
        return masked, self.base, self.lead, self.trail, self.upper

    @property
    def _low(self) -> int:
        return self.base ** (self.width - 1) if self.width > 1 else 0

    @property
    def size(self) -> int:
        return (self.base**self.width - self._low) * (self.base - 1) // self.base

    def text(self, index: int) -> str:
        core = self._low + (index // (self.base - 1)) * self.base + index % (self.base - 1) + 1
        digits = "0" * self.lead + _in_base(core, self.base) + "0" * self.trail
        digits = digits.upper() if self.upper else digits
        characters = list(self.template)
        for position, digit in zip(self.positions, digits, strict=True):
            characters[position] = digit
        return "".join(characters)

    def index(self, text: str) -> int:
        digits = "".join(text[i] for i in self.positions)
        core = int(digits[self.lead : len(digits) - self.trail], self.base) - self._low
        return (core // self.base) * (self.base - 1) + core % self.base - 1


def _in_base(number: int, base: int) -> str:
    digits = ""
    while number:
        number, digit = divmod(number, base)
        digits = (string.digits + string.ascii_lowercase)[digit] + digits
    return digits or "0"


@dataclass(frozen=True)
class Listed:
    """A pool given in full: a group holds the original token and others drawn from it uniformly."""

    tokens: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.tokens)

    def draw(self, token: str, count: int, rng: random.Random) -> list[str]:
        """The original's token first, then `count` others."""
        return [token, *rng.sample([other for other in self.tokens if other != token], count)]


@dataclass(frozen=True)
class Window:
    """A class of numerals but those whose value is in `values` or whose text is in `texts`, in cyclic order: a
    group holds consecutive ones, the original's place among them uniform."""

    numerals: Numerals
    values: frozenset[int | float | None]
    texts: frozenset[str]

    def _allowed(self, index: int) -> bool:
        text = self.numerals.text(index)
        return text not in self.texts and number_value(text) not in self.values

    @cached_property
    def size(self) -> int:
        if self.numerals.size <= _LISTED_AT_MOST:
            return sum(self._allowed(index) for index in range(self.numerals.size))
        return self.numerals.size - len(self.values) - len(self.texts)

    def draw(self, token: str, count: int, rng: random.Random) -> list[str]:
        """The original's token first, then the rest of its window."""
        original = index = self.numerals.index(token)
        for _ in range(rng.randint(0, count)):
            index = self._step(index, -1)
        window = [index]
        while len(window) <= count:
            window.append(self._step(window[-1], 1))
        return [self.numerals.text(index) for index in [original, *(i for i in window if i != original)]]

    def _step(self, index: int, direction: int) -> int:
        index = (index + direction) % self.numerals.size
        while not self._allowed(index):
            index = (index + direction) % self.numerals.size
        return index


@dataclass(frozen=True)
class Site:
    """A token of a test function's source that its twins change: on line `row` of the function's lines, bytes
    `start` to `end` of it, with the pool the group's tokens come from. `readable`: its line is one the file held
    at the base commit, so a reader of git's history knows the original's token (a group there still catches a
    forger that passes every test, but bounds none)."""

    row: int
    start: int
    end: int
    token: str
    pool: Listed | Window
    readable: bool = False


@dataclass(frozen=True)
class Surroundings:
    """What a reader sees around a test: the words (`words`) and numerals (`numerals`) of the rest of its file, and
    the lines of the file at the base commit, stripped."""

    words: frozenset[str]
    numerals: frozenset[str]
    base_lines: frozenset[str]


@dataclass(frozen=True)
class _Source:
    """What a site's pool depends on: the function's lines with its name blanked (its name is the group's
    generator's), the numbers and words they hold, and what surrounds them."""

    lines: list[str]
    numerals: Counter[str]
    numbers: Counter[int | float]
    words: Counter[str]
    around: "Surroundings"

    def hex_upper(self, but: str) -> bool:
        """Whether the file writes hexadecimal digits upper case, by its numerals but one occurrence of `but`."""
        written = [*(self.numerals - Counter([but])).elements(), *self.around.numerals]
        letters = [c for text in written if text[:2].lower() == "0x" for c in text[2:] if c.isalpha()]
        return sum(c.isupper() for c in letters) * 2 > len(letters)

    def held_numbers(self, but: int | float) -> frozenset[int | float]:
        """The numbers the function holds but one occurrence of `but` (the site's own)."""
        return frozenset(number for number, count in self.numbers.items() if count > (number == but))

    def held_words(self, but: str) -> frozenset[str]:
        return frozenset(word for word, count in self.words.items() if count > (word == but))


def sites(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    constants: list[ast.Constant],
    lines: list[str],
    first: int,
    around: Surroundings,
    rng: random.Random,
) -> list[Site]:
    """The tokens of `function`'s `constants` (`expected_constants`) that a group may vary, each with a pool of two
    tokens or more; the first SITES_AT_MOST of them. `lines` are the function's own (from its first decorator),
    `first` the file's line index they start at."""
    lines = [*lines]
    header = function.lineno - 1 - first
    lines[header] = _DEF_NAME.sub(r"\1", lines[header], count=1)
    text = "".join(lines)
    found = Counter(numerals(text))
    numbers: Counter[int | float] = Counter()
    for numeral, count in found.items():
        if (number := number_value(numeral)) is not None:
            numbers[number] += count
    source = _Source(lines, found, numbers, Counter(words(text)), around)
    tokens = [
        (constant.lineno - 1 - first, *span)
        for constant in constants
        for span in _tokens(constant, lines[constant.lineno - 1 - first])
    ]
    varied: list[Site] = []
    for row, start, end in tokens[:SITES_AT_MOST]:
        site = _site(source, row, start, end, rng)
        if site is not None and site.pool.size >= 2:
            varied.append(site)
    return varied


def expected_constants(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Constant]:
    """The constants of the expected side of each equality assertion that is a statement of the function's own
    body (so that an honest run passing the original reaches it), within literal lists, tuples, sets and dicts;
    none where the function may return or yield before one (an early return would pass its twins too)."""
    found = []
    for statement in function.body:
        sides: list[ast.expr] = []
        if isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Compare):
            if len(statement.test.ops) == 1 and isinstance(statement.test.ops[0], ast.Eq):
                sides = [statement.test.comparators[0], statement.test.left]
        elif isinstance(statement, ast.Expr) and isinstance(call := statement.value, ast.Call):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if name in _ASSERTING_CALLS and len(call.args) >= 2:
                sides = [call.args[1], call.args[0]]
        found += [constant for side in sides for constant in _literal_constants(side)]
    if found and any(isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) for node in ast.walk(function)):
        return []
    return found


def _literal_constants(node: ast.expr) -> list[ast.Constant]:
    """The numbers and strings a literal expression is made of, each on one line."""
    if isinstance(node, ast.Constant):
        value = node.value
        usable = isinstance(value, (int, float, str)) and not isinstance(value, bool) and value != ""
        return [node] if usable and node.lineno == node.end_lineno else []
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _literal_constants(node.operand)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [constant for element in node.elts for constant in _literal_constants(element)]
    if isinstance(node, ast.Dict):
        return [c for part in (*node.keys, *node.values) if part is not None for c in _literal_constants(part)]
    return []


def _tokens(constant: ast.Constant, line: str) -> list[tuple[int, int]]:
    """Where a constant's changeable tokens are on its line (bytes): the numeral itself, or each word and run of
    digits of a plain one-line string literal (no prefix, no escape)."""
    encoded = line.encode()
    segment = encoded[constant.col_offset : constant.end_col_offset].decode()
    if not isinstance(constant.value, str):
        return [(constant.col_offset, end_position(constant)[1])]
    quote = segment[:1]
    if quote not in ("'", '"') or segment[:3] == quote * 3 or "\\" in segment or segment[1:-1] != constant.value:
        return []
    start = constant.col_offset + 1
    found = []
    for pattern in (_WORD, _DIGIT_RUN):
        for match in pattern.finditer(constant.value):
            offset = start + len(constant.value[: match.start()].encode())
            found.append((offset, offset + len(match.group().encode())))
    return found


def _site(source: _Source, row: int, start: int, end: int, rng: random.Random) -> Site | None:
    line = source.lines[row].encode()
    token = line[start:end].decode()
    pool: Listed | Window | None
    if _WORD.fullmatch(token):
        pool = _word_pool(token, source.held_words(token.lower()), source.around.words, rng)
    else:
        pool = _number_pool(token, source)
    if pool is None:
        return None

    def found_at_base(candidate: str) -> bool:
        return (line[:start] + candidate.encode() + line[end:]).decode().strip() in source.around.base_lines

    if found_at_base(token):
        return Site(row, start, end, token, pool, readable=True)
    if isinstance(pool, Listed):
        pool = Listed(tuple(candidate for candidate in pool.tokens if not found_at_base(candidate)))
    else:
        prefix, suffix = line[:start].decode().lstrip(), line[end:].decode().rstrip()
        similar = [held for held in source.around.base_lines if held.startswith(prefix) and held.endswith(suffix)]
        texts = {held[len(prefix) : len(held) - len(suffix)] for held in similar}
        pool = Window(pool.numerals, pool.values, frozenset(text for text in texts if text and found_at_base(text)))
    return Site(row, start, end, token, pool)


def words(text: str) -> list[str]:
    """The words of `text`, lower-cased, but Python's keywords and `self`: the test's scaffolding, not its data."""
    return [word for word in (word.lower() for word in _WORD.findall(text)) if word not in _SCAFFOLDING]


def _pieces(words: frozenset[str], length: int) -> set[str]:
    """The `length`-letter pieces of `words` (each word's own included)."""
    return {word[start : start + length] for word in words for start in range(len(word) - length + 1)}


def _word_pool(word: str, context: frozenset[str], outside: frozenset[str], rng: random.Random) -> Listed | None:
    """The pool of a word in a string, written in its case (lower, upper or capitalised; None for another): the
    first of these sets of words of its length that holds it, less the sets before: the test's words, pieces of
    them, the rest of the file's words, pieces of those, and, for a word found in none, the words one letter apart
    from it (at a place drawn uniformly)."""
    if word.islower():
        case = str.lower
    elif word.isupper():
        case = str.upper
    elif word[0].isupper() and word[1:].islower():
        case = str.capitalize
    else:
        return None
    lower, taken = word.lower(), set[str]()
    for vocabulary in (context, outside):
        for cell in ({known for known in vocabulary if len(known) == len(lower)}, _pieces(vocabulary, len(lower))):
            cell -= taken
            if lower in cell:
                return Listed(tuple(sorted(case(other) for other in cell)))
            taken |= cell
    place = rng.randrange(len(lower))
    variants = {lower[:place] + letter + lower[place + 1 :] for letter in string.ascii_lowercase} - taken
    return Listed(tuple(sorted(case(other) for other in variants)))


def numerals(text: str) -> list[str]:
    """The numerals of `text`: Python's, and runs of digits standing alone in strings."""
    return _NUMBER.findall(text)


def _number_pool(token: str, source: _Source) -> Listed | Window | None:
    """The pool of a numeral (or of a run of digits in a string): the values the test holds if it holds the
    token's; else the numerals of its class that the rest of the file holds (and the test does not) if the file
    holds its value; else its class less every value the test and the file hold."""
    value = number_value(token)
    numerals = Numerals.of(token)
    if value is None or numerals is None:
        return None
    if numerals.base == 16:  # in the file's case: a numeral without letters has none of its own
        numerals = replace(numerals, upper=source.hex_upper(token))
    held = source.held_numbers(value)
    if value in held:
        written = repr if isinstance(value, float) else str
        same_kind = {number for number in held if isinstance(number, type(value))}
        if token != written(value) or value not in same_kind:
            return None
        return Listed(tuple(sorted(written(number) for number in same_kind)))
    outside = {text: number_value(text) for text in source.around.numerals}
    if value in outside.values():
        known = {text for text, number in outside.items() if number not in held and numerals.holds(text)}
        return Listed(tuple(sorted(known | {token})))
    return Window(numerals, held | frozenset(outside.values()), frozenset())
