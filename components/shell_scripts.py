"""The shell scripts shipped in components/scripts/, as the pods get them.

The scripts share a few functions (``info``, ``die``, ``require_absolute``), written once in
components/scripts/shared.sh. A script takes the ones it uses with two lines::

    # shellcheck source=shared.sh
    . "$(dirname -- "$0")/shared.sh"  # shared: info die require_absolute

Run from its folder (as the tests run it), they source the library, which shellcheck follows (`-x -P SCRIPTDIR`,
as `make lint` runs it). ``packaged_script`` replaces both with the text of the functions the second names, in that
order, so the script a ConfigMap carries stands alone: no second file to mount, and the same bytes as before the
library existed (so no pod restarts for it).
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable

SHARED_LIBRARY = "shared.sh"
#: The lines that take shared functions, and the names they take.
TAKES_SHARED = re.compile(
    r"^# shellcheck source=shared\.sh\n"
    r'\. "\$\(dirname -- "\$0"\)/shared\.sh"  # shared: (?P<names>[a-z_]+(?: [a-z_]+)*)$',
    re.M,
)
_FUNCTION = re.compile(r"^(?P<name>[a-z_]+)\(\) \{\n.*?^\}$", re.M | re.S)


def _scripts() -> Traversable:
    return resources.files(__package__ or "components").joinpath("scripts")


def shared_functions() -> dict[str, str]:
    """Each function of the shared library, by name: its text from ``name() {`` to the closing brace."""
    text = _scripts().joinpath(SHARED_LIBRARY).read_text("utf-8")
    return {match["name"]: match[0] for match in _FUNCTION.finditer(text)}


def packaged_script(name: str) -> str:
    """The text of the script ``name`` as the pods run it: the lines that take shared functions replaced by
    their text. A name the library does not define is an error of this repository, raised at render."""
    functions = shared_functions()

    def inline(match: re.Match[str]) -> str:
        names = match["names"].split()
        unknown = [function for function in names if function not in functions]
        if unknown:
            raise ValueError(f"{name}: {SHARED_LIBRARY} defines no {', '.join(unknown)} (it has {sorted(functions)})")
        return "\n\n".join(functions[function] for function in names)

    return TAKES_SHARED.sub(inline, _scripts().joinpath(name).read_text("utf-8"))
