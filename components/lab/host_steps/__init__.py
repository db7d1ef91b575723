"""The lab's host steps as shell files, read and filled here.

Each step is a real bash file in this folder (node_prep/, roce/, cluster/, storage/, upgrade/; the
functions several steps share in lib/), so that a reader and shellcheck see the script as the host
runs it. A file opens with a header: the shebang and comment lines up to the first blank line,
saying what the step does and which values are filled in. The header is not sent; everything after
it is, byte for byte, once:

  - every line `# @include <folder>/<name>.sh` is replaced by that file's body (its header dropped);
  - every placeholder `__NAME__` (capitals, digits, single underscores) is replaced by its value.
    The form is valid shell wherever it stands (a word, inside quotes, in arithmetic), so shellcheck
    parses the file as it is.

A value is a `str` or `int`, shell-quoted here (shlex.quote: unchanged for a plain word such as a
version, a host name or a path), or `Shell` text that the caller built from quoted words (a list of
package specs, a chosen line). A placeholder without a value, a value without a placeholder and an
unknown file are errors when the script is built, not on the host.

A new step: a file here with its header, and a function in components/lab/scripts.py that fills it
(test_host_step_files.py shellchecks it as it is and checks that a script uses it).
"""

from __future__ import annotations

import re
import shlex
from functools import cache
from pathlib import Path

FOLDER = Path(__file__).resolve().parent  # found next to this module, whatever the working directory
PLACEHOLDER = re.compile(r"__([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)__")
_INCLUDE = re.compile(r"^# @include ([a-z_]+/[a-z0-9_]+\.sh)\n", re.MULTILINE)


class Shell(str):
    """Shell text placed as it is: the caller quoted each word in it."""


def _body(text: str, name: str) -> str:
    """The file less its header (the leading `#` lines and the blank line that ends them)."""
    lines = text.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith("#"):
        n += 1
    if n == 0 or n >= len(lines) or lines[n] != "\n":
        raise ValueError(f"{name}: a host step file opens with a header of # lines and a blank line")
    return "".join(lines[n + 1:])


@cache
def read(name: str) -> str:
    """The body of `name` (e.g. "node_prep/kernel_prep.sh") with its includes, placeholders left."""
    path = (FOLDER / name).resolve()
    if path.parent.parent != FOLDER or path.suffix != ".sh" or not path.is_file():
        raise ValueError(f"no host step file {name} in {FOLDER}")
    body = _body(path.read_text(encoding="utf-8"), name)
    return _INCLUDE.sub(lambda m: read(m.group(1)), body)


def placeholders(name: str) -> set[str]:
    """The names of the values `name` needs."""
    return set(PLACEHOLDER.findall(read(name)))


def _text(key: str, value: str | int) -> str:
    if isinstance(value, Shell):
        return str(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"{key}: a host step value is str, int or Shell, not {type(value).__name__}")
    return shlex.quote(str(value))


def fill(name: str, **values: str | int) -> str:
    """The body of `name`, every placeholder replaced by its value (see the module docstring)."""
    text = read(name)
    wanted = set(PLACEHOLDER.findall(text))
    missing, unknown = sorted(wanted - values.keys()), sorted(values.keys() - wanted)
    if missing or unknown:
        raise ValueError(f"{name}: no value for {missing or 'none'}; no placeholder for {unknown or 'none'}")
    quoted = {key: _text(key, value) for key, value in values.items()}
    return PLACEHOLDER.sub(lambda m: quoted[m.group(1)], text)
