"""What docs/operations.md promises, read from the page itself so the tests and the page cannot drift apart."""

from __future__ import annotations

import re

from tools.harness import PROJECT_DIR


def kept_rows() -> list[tuple[str, str, str]]:
    """(kind, name pattern, the row's text) of docs/operations.md's "What `pulumi destroy` keeps" table."""
    page = (PROJECT_DIR / "docs" / "operations.md").read_text()
    section = page.split("## What `pulumi destroy` keeps", 1)[1]
    table = [line for line in section.split("\n\n", 3)[2].splitlines() if line.startswith("|")]
    kinds = {
        "Namespace": "Namespace",
        "PVC": "PersistentVolumeClaim",
        "PersistentVolume": "PersistentVolume",
        "Secret": "Secret",
        "ConfigMap": "ConfigMap",
        "CNPG": "Cluster",
        "RandomBytes": "RandomBytes",
    }
    rows = []
    for line in table[2:]:
        cell = line.split("|")[1]
        kind = None
        for part in cell.split(";"):
            kind = next((k for word, k in kinds.items() if word in part.split("`", 1)[0]), kind)
            for name in re.findall(r"`([^`]+)`", part):
                if kind and name not in ("persistent", "Cluster"):
                    rows.append((kind, re.sub(r"<[^>]+>", ".+", name), line))
    return rows
