"""The command line: ``python -m tools.wiring FILES_OR_DIRS...`` checks the objects of YAML files (a plan's
``rendered/<stack>/``, for example) and prints the findings; the check itself stays stdlib-only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tools.wiring.check import check_wiring
from tools.wiring.manifest import as_list

#: What ``--help`` prints (and, to standard output, a call without arguments).
HELP = """Wiring check: the references BETWEEN rendered Kubernetes objects that the kubelet, the controllers and the API
server resolve at run time, and that a per-object schema check cannot see.

A pod that mounts a Secret nobody creates validates fine and then sits in ContainerCreating; a Service whose
selector matches no pod template applies cleanly and has no endpoints. This module resolves every such reference
against the rendered set, against what the set makes others create (cert-manager's Secret for a Certificate,
CloudNativePG's `-app` Secret and `-rw` Service, a StatefulSet's claims), and against `External` objects that are
documented as created by someone else. Anything else is a `Finding` that says what would happen in a cluster.

Pure: plain dicts in, findings out (the CLI alone reads YAML). `External` and `OptionalRef` are the program's
own list of what it expects from others (program/externals.py).
Usage: ``python -m tools.wiring FILES_OR_DIRS...`` prints the findings, then ``N objects, N findings``;
exit status 1 when there are findings.
"""


def load_objects(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Kubernetes objects from YAML files and directories (searched recursively); `kind: List` is unwrapped."""
    import yaml  # only the CLI reads YAML: the check itself stays stdlib-only

    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        files.extend(sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path])
    objects: list[dict[str, Any]] = []
    for file in files:
        for doc in yaml.safe_load_all(file.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "List":
                objects.extend(item for item in as_list(doc.get("items")) if isinstance(item, dict))
            elif isinstance(doc, dict):
                objects.append(doc)
    return objects


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(HELP.strip())
        return 0 if args else 2
    objects = load_objects(args)
    findings = check_wiring(objects)
    for finding in findings:
        print(finding)
    print(f"{len(objects)} objects, {len(findings)} findings")
    return 1 if findings else 0
