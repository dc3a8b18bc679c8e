"""Hydra's composition errors as the one line this project prints for bad input.

Hydra reports a missing group option or a bad override over many lines (with its config search
path); `src/train.py` turns them into `error: <one line>` and exit status 2.
"""
from __future__ import annotations

import re
import string

from hydra.errors import HydraException, MissingConfigException
from omegaconf.errors import OmegaConfBaseException

COMPOSITION_ERRORS = (HydraException, OmegaConfBaseException)


QUOTING_HINT = ("Hydra's override grammar refused a character (; = , [ ] { } ( ) ' \" or a space): quote the "
                "value inside the shell quotes, e.g. 'hydra.run.dir=\"out/a;b\"'")
UNQUOTED_OK = set(string.ascii_letters + string.digits + "_-/\\+.$%*@?|" + " \t" + "()[]{},:=" + "'\"")
"""What Hydra's lexer takes in an unquoted value (hydra/grammar/OverrideLexer.g4, VALUE_MODE): letters, digits,
its UNQUOTED_CHAR set, blanks, its grammar's brackets, separators and quotes. Anything else (`;`, `#`, `&`, `!`,
`~`, letters outside ASCII, ...) it takes only inside a quoted value."""


def refused_characters(value: str) -> tuple[list[str], list[str]]:
    """(ASCII characters of `value` that Hydra's lexer refuses unquoted, its characters outside ASCII), each
    once, in the order they come."""
    refused = [c for c in dict.fromkeys(value) if c not in UNQUOTED_OK]
    return [c for c in refused if c.isascii()], [c for c in refused if not c.isascii()]


def lexer_hint(override: str) -> str:
    """The hint for an `override` Hydra's lexer refused: the characters it refused (a character with no place in
    its grammar is the real cause even beside letters outside ASCII) and the override quoted as it would be read
    (`QUOTING_HINT` when the characters refused are not to be found in the value)."""
    key, eq, value = override.partition("=")
    ascii_refused, foreign = refused_characters(value)
    if not eq or not (ascii_refused or foreign) or '"' in value:
        return QUOTING_HINT
    named = " ".join(repr(c) for c in ascii_refused)
    letters = "".join(foreign)
    if ascii_refused:
        what = f"{named} (no place in an unquoted value" + (
            f"; nor are the letters outside ASCII {letters!r})" if foreign else ")")
    else:
        what = f"the letters outside ASCII {letters!r} (taken only in quoted values)"
    return f"Hydra's override grammar refused {what}: quote the value inside the shell quotes: '{key}=\"{value}\"'"


def one_line_error(err: BaseException) -> str:
    """One line naming the override or config file at fault and what is allowed; an override Hydra's lexer
    cannot read gets the characters it refused and how to quote it (`lexer_hint`)."""
    line = _one_line(err)
    if "LexerNoViableAltException" in line or "mismatched input" in line or "no viable alternative" in line:
        override = line.split(": ", 1)[1] if line.startswith("LexerNoViableAltException: ") else ""
        return f"{line} ({lexer_hint(override)})"
    return line


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    if isinstance(err, MissingConfigException):
        missing = re.search(r"Could not find '([^']+)/([^'/]+)'", text)
        if missing:
            group, option = missing.groups()
            allowed = re.search(rf"Available options in '{re.escape(group)}':\n((?:\t.*\n?)+)", text)
            choices = ", ".join(line.strip() for line in allowed.group(1).splitlines()) if allowed else "none"
            return f"{group}={option}: no such option; allowed: {choices}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    override = re.match(r"Could not override '([^']+)'", lines[0]) if lines else None
    if override:
        return unknown_key(override.group(1))
    cause = err.__cause__
    merging = re.match(r"Error merging override (.+)", lines[0]) if lines else None
    if merging and cause is not None:
        return f"{merging.group(1)}: {_first(cause)}"
    if lines and lines[0].startswith("In '") and len(lines) > 1:          # a bad key inside a group file
        full_key = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("full_key:")), None)
        where = lines[0].split(":", 1)[0]
        return f"{where}: {lines[1]}" + (f" ({full_key})" if full_key else "")
    if cause is not None and not lines:
        return _first(cause)
    return lines[0] if lines else type(err).__name__


def unknown_key(path: str) -> str:
    """`path` names no key of the composed config: the keys allowed there when the schema knows them."""
    from dataclasses import fields, is_dataclass

    from ssgd import config

    node: type | None = config.Config
    parts = path.split(".")
    for part in parts[:-1]:
        field = next((f for f in fields(node) if f.name == part), None) if node is not None else None
        node = getattr(config, field.type, None) if field is not None and isinstance(field.type, str) else None
        if node is not None and not is_dataclass(node):
            node = None
    if node is not None:
        allowed = ", ".join(sorted(f.name for f in fields(node)))
        return f"{path}: unknown key; allowed: {allowed}"
    return (f"{path}: unknown key (`python src/train.py --cfg job` prints every key; a parameter of a _target_ "
            f"that its file leaves out is added with +{path}=...)")


def _first(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
