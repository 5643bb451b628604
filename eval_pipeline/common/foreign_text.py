"""Text the harness did not write, and the one rule for how it leaves the harness.

A model's answer, a tool's output, a file name, a dataset's field: each is any
str Python can hold. That includes lone surrogates (a model's JSON may say
`"\\ud800"`; bytes decoded with `surrogateescape` give `\\udcff`), which no
UTF-8 encoder takes, NUL and other control characters, and lines of any length.
Such text is the agent's (or the dataset's) and is never a reason to crash, so
it leaves the harness in one of three forms, chosen by where it goes:

- kept (the artifact store, every hash and MAC, exported JSON): exactly, as JSON
  whose lone surrogates are `\\u` escapes (`json_text`), which `json.loads` reads
  back to the same str. (JSON reads a high surrogate followed by a low one as one
  character, so such a pair is written as that character: what any reader of the
  record gets.) Text without a lone surrogate gives the very JSON
  `json.dumps(..., ensure_ascii=False)` gives, so no existing hash changes;
- handed to a system that takes only valid Unicode (a model API, the tool
  server's MCP session, DuckDB, a file written as UTF-8): each lone surrogate as
  U+FFFD, everything else as it is (`valid_unicode`, `valid_unicode_data`);
- shown to a person (the HTML and markdown reports, `eval-pipeline view`, the
  Dagster UI, a terminal): valid Unicode as above, and every control character
  but tab, newline and carriage return as its Unicode control picture (NUL as
  ␀, ESC as ␛, DEL as ␡; the C1 controls, which have none, as U+FFFD), so that
  nothing in it moves a terminal's cursor or hides in a page (`shown`).

Length is bounded where text is collected (`common.text.truncate`), not here.
"""

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["REPLACEMENT", "json_text", "shown", "valid_unicode", "valid_unicode_data"]

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
# Control characters a person's screen must not act on: C0 but tab, newline and carriage return; DEL; C1.
_HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_PICTURES = 0x2400  # U+2400 SYMBOL FOR NULL: the picture of C0 control c is U+2400 + c
_DELETE_PICTURE = "\u2421"


def _is_valid_unicode(text: str) -> bool:
    """Whether `text` holds no lone surrogate (ASCII is answered without a scan)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_text(value: Any, **options: Any) -> str:
    """`value` as JSON that is valid Unicode whatever its strings hold, read back by `json.loads` to the same
    value: non-ASCII characters as themselves, each lone surrogate as its `\\u` escape (`options` as for
    `json.dumps`, but `ensure_ascii`)."""
    text = json.dumps(value, ensure_ascii=False, **options)
    if _is_valid_unicode(text):
        return text
    # A surrogate only ever stands inside a JSON string here, so joining pairs and escaping the rest is exact.
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATE.sub(lambda match: f"\\u{ord(match[0]):04x}", joined)


def valid_unicode(text: str) -> str:
    """`text` with each lone surrogate as U+FFFD: what a system that takes only valid Unicode is handed."""
    return text if _is_valid_unicode(text) else _SURROGATE.sub(REPLACEMENT, text)


def valid_unicode_data(value: Any) -> Any:
    """A JSON-like value (mappings, lists, strings, numbers) with `valid_unicode` applied to every string in it,
    keys included; anything else as it is."""
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, Mapping):
        return {valid_unicode_data(key): valid_unicode_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [valid_unicode_data(item) for item in value]
    return value


def _picture(match: re.Match[str]) -> str:
    code = ord(match[0])
    if code < 0x20:
        return chr(_CONTROL_PICTURES + code)
    return _DELETE_PICTURE if code == 0x7F else REPLACEMENT


def shown(text: str) -> str:
    """`text` as a person is shown it: valid Unicode, each control character but tab, newline and carriage
    return as its control picture (U+FFFD for the C1 controls and for lone surrogates)."""
    return _HIDDEN.sub(_picture, text)
