"""The project's own CRD schemas: the structural schema of each CustomResourceDefinition, without its prose.

``tools/validate.py`` checks custom resources against ``schemas/crds/*.json`` so that ``make validate`` needs nothing
beside the checkout. This script makes those files from upstream CRD YAML, keeping what the API server checks
(types, fields, enums, patterns, formats, bounds, the ``x-kubernetes-*`` markers) and dropping what it does not
(descriptions, examples, titles, external docs) and the CEL rules (``x-kubernetes-validations``: data, but with
prose messages, and not evaluated offline anyway). Only served versions keep a schema: the others cannot be sent.

Usage: ``python -m tools.crd_schemas [--write | --check] [--out DIR] [CRD.yaml ...]``. Given files, it makes
(or checks) their schema files and leaves the others alone, so one CRD can be updated by itself. Without files it
reads every top-level ``*.yaml`` of ``../shared/reference/crds`` (where the pinned upstream CRDs live when that tree
is beside the checkout) as the complete set: a schema file no CRD there makes is removed (``--check``: reported).
Without ``--write`` or ``--check`` it lists what it would write. Exit status: 0 done or current; 1 ``--check``
found stale, missing or extra files; 2 unreadable input or no input.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PROJECT_DIR = Path(__file__).resolve().parent.parent
SCHEMA_DIR = PROJECT_DIR / "schemas" / "crds"
SHARED_CRD_DIR = PROJECT_DIR.parent / "shared" / "reference" / "crds"
#: Schema keywords that carry prose or checks nothing offline evaluates; dropped wherever a schema has them.
DROPPED = frozenset({"description", "example", "externalDocs", "title", "x-kubernetes-validations"})
#: Keywords whose value is a mapping of names to schemas (the names are data: a field may be called "description").
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "definitions", "dependencies"})
#: Keywords whose value is one schema, a list of schemas, or (additionalProperties) a boolean.
SCHEMA_VALUES = frozenset({"items", "additionalProperties", "additionalItems", "not", "allOf", "anyOf", "oneOf"})


class CrdSourceError(Exception):
    """An input that is not readable CRD YAML: a usage problem, not a stale schema."""


@dataclass(frozen=True)
class SchemaFile:
    """One generated file: where it goes and its exact text."""

    name: str
    text: str


def strip_prose(node: Any) -> Any:
    """A schema node without its prose; values that are data (enum, default, required...) are kept verbatim."""
    if isinstance(node, list):
        return [strip_prose(item) for item in node]
    if not isinstance(node, dict):
        return node
    kept: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROPPED:
            continue
        if key in SCHEMA_MAPS and isinstance(value, dict):
            kept[key] = {name: strip_prose(sub) for name, sub in value.items()}
        elif key in SCHEMA_VALUES:
            kept[key] = strip_prose(value)
        else:
            kept[key] = value
    return kept


def _versions(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each version's served flag and, when served, its stripped schema (v1beta1's shared schema too)."""
    shared = (spec.get("validation") or {}).get("openAPIV3Schema")
    listed = spec.get("versions") or [{"name": spec.get("version"), "served": True}]
    versions: dict[str, dict[str, Any]] = {}
    for version in listed:
        served = bool(version.get("served", True))
        entry: dict[str, Any] = {"served": served}
        schema = (version.get("schema") or {}).get("openAPIV3Schema", shared)
        if served and schema is not None:
            entry["schema"] = strip_prose(schema)
        versions[str(version.get("name"))] = entry
    return versions


def schema_document(crd: dict[str, Any], source: str, digest: str) -> dict[str, Any]:
    """The generated document of one CRD: its group, kind, scope, versions, and the source it was made from."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    return {
        "group": spec["group"],
        "kind": names["kind"],
        "plural": names.get("plural", ""),
        "scope": spec.get("scope", "Namespaced"),
        "source": {"file": source, "sha256": digest},
        "versions": _versions(spec),
    }


def _crds_in(path: Path) -> Iterator[dict[str, Any]]:
    """The CustomResourceDefinitions in one YAML file (other documents are ignored)."""
    try:
        documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CrdSourceError(f"{path}: not readable CRD YAML: {exc}") from exc
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
            spec = document.get("spec") or {}
            if not spec.get("group") or not (spec.get("names") or {}).get("kind"):
                raise CrdSourceError(f"{path}: a CustomResourceDefinition without spec.group or spec.names.kind")
            yield document


def render_text(document: dict[str, Any]) -> str:
    """Stable JSON (sorted keys, one-space indent) so a regeneration diffs only where the schema changed."""
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def generate(sources: Iterable[Path]) -> list[SchemaFile]:
    """One file per CRD, named ``<group>_<plural>.json``; the last source wins for a group/kind given twice."""
    files: dict[str, SchemaFile] = {}
    for path in sources:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        for crd in _crds_in(path):
            document = schema_document(crd, path.name, digest)
            name = f"{document['group']}_{document['plural'] or document['kind'].lower()}.json"
            files[name] = SchemaFile(name, render_text(document))
    return [files[name] for name in sorted(files)]


def default_sources() -> list[Path]:
    """The top-level CRD files of ../shared/reference/crds (its subdirectories are alternative channels)."""
    if not SHARED_CRD_DIR.is_dir():
        raise CrdSourceError(f"no CRD files given and {SHARED_CRD_DIR} is not beside the checkout")
    return sorted(SHARED_CRD_DIR.glob("*.yaml"))


def _extra(files: list[SchemaFile], out: Path) -> list[Path]:
    """Schema files in ``out`` that none of ``files`` is."""
    wanted = {f.name for f in files}
    return sorted(p for p in out.glob("*.json") if p.name not in wanted) if out.is_dir() else []


def stale(files: list[SchemaFile], out: Path, *, complete: bool = True) -> list[str]:
    """What differs between the generated files and ``out``: changed and missing names, and (when ``files`` are
    the complete set) the extra ones."""
    changed = [f.name for f in files if not (out / f.name).is_file() or (out / f.name).read_text("utf-8") != f.text]
    extra = [f"{p.name} (not generated)" for p in _extra(files, out)] if complete else []
    return sorted(changed + extra)


def write(files: list[SchemaFile], out: Path, *, complete: bool = True) -> list[str]:
    """Write the files (and, for the complete set, remove the extra ones); the names that changed."""
    changed = stale(files, out, complete=complete)
    out.mkdir(parents=True, exist_ok=True)
    for path in _extra(files, out) if complete else []:
        path.unlink()
    for schema_file in files:
        target = out / schema_file.name
        if not target.is_file() or target.read_text(encoding="utf-8") != schema_file.text:
            target.write_text(schema_file.text, encoding="utf-8")
    return changed


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write the schema files")
    mode.add_argument("--check", action="store_true", help="exit 1 when the schema files are not current")
    parser.add_argument("--out", type=Path, default=SCHEMA_DIR, help="schema directory (default: schemas/crds)")
    parser.add_argument("sources", nargs="*", type=Path, metavar="CRD.yaml", help="CRD YAML files")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Generate, write or check; see the module docstring for the exit status."""
    args = _parse(argv)
    complete = not args.sources
    try:
        files = generate(args.sources or default_sources())
    except (CrdSourceError, OSError) as exc:
        print(f"crd_schemas: {exc}", file=sys.stderr)
        return 2
    if not files:
        print("crd_schemas: the sources hold no CustomResourceDefinition", file=sys.stderr)
        return 2
    if args.write:
        changed = write(files, args.out, complete=complete)
        print(f"crd_schemas: {len(files)} schemas in {args.out}; " + (", ".join(changed) or "already current"))
        return 0
    changed = stale(files, args.out, complete=complete)
    if args.check:
        for name in changed:
            print(f"crd_schemas: stale: {args.out / name}")
        return 1 if changed else 0
    for schema_file in files:
        print(
            f"{schema_file.name}  {len(schema_file.text)} bytes" + ("  (stale)" if schema_file.name in changed else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
