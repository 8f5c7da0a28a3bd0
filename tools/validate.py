"""Validate rendered Kubernetes objects offline, with nothing but this checkout and its pinned tools.

What an API server would refuse, found before ``pulumi up`` (``make validate`` runs it on every stack's plan):

* built-in kinds against the strict OpenAPI schemas of Kubernetes ``KUBERNETES_VERSION``, the ones the pinned
  ``kubernetes-validate`` bundles: a wrong type, a missing required field or an unknown field is an error (as with
  kubectl's strict field validation);
* custom resources against the project's own structural schemas, ``schemas/crds/*.json`` (made from the upstream
  CRDs by ``tools/crd_schemas.py``), read the way the API server reads them: unknown fields are errors unless
  ``x-kubernetes-preserve-unknown-fields``; ``x-kubernetes-int-or-string``, ``nullable`` and
  ``x-kubernetes-embedded-resource`` widen what a field takes; ``x-kubernetes-list-type: set|map`` refuses
  duplicates; the ipv4, ipv6, cidr, uuid, date, date-time and byte formats are checked; the version must be served;
  metadata is checked as ObjectMeta and the name as a DNS-1123 subdomain. CEL rules are not evaluated;
* Pod Security admission: the pod (template) of a Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet,
  ReplicationController, Job or CronJob in a namespace among the objects whose
  ``pod-security.kubernetes.io/enforce`` label is ``baseline`` or ``restricted`` meets that level of the Pod
  Security Standards, as the admission plugin would check the pods it creates.

Usage: ``python -m tools.validate [PATH ...] [--stack NAME]... [--rendered DIR] [--schemas DIR]``. PATHs (files,
or directories searched for ``*.yaml``/``*.yml``) are one set of objects, as one cluster would get them. Without
PATHs each stack's ``rendered/<stack>`` (every stack with a ``Pulumi.<stack>.yaml``, or the ``--stack`` ones) is a
set of its own. A problem prints as ``file: Kind namespace/name: path: message``; each set ends with a count.
Exit status: 0 every object valid; 1 an object invalid or a file unreadable; 2 usage (no such path, nothing
rendered, a Kubernetes version kubernetes-validate lacks, unreadable schemas, a dependency not installed).
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from tools.pod_security import admission_findings, format_path, namespace_levels
from tools.stack_files import list_stacks
from tools.wiring.manifest import as_dict

try:
    import jsonschema
    import jsonschema.validators
    from referencing import Registry, Resource
except ImportError as missing:  # pragma: no cover - the environment is requirements-dev.txt's
    print(f"validate: {missing}; install requirements-dev.txt (make validate does)", file=sys.stderr)
    sys.exit(2)

PROJECT_DIR = Path(__file__).resolve().parent.parent
RENDERED_DIR = PROJECT_DIR / "rendered"
SCHEMA_DIR = PROJECT_DIR / "schemas" / "crds"
#: The Kubernetes minor version built-in kinds must match: the newest the pinned kubernetes-validate bundles,
#: named here so that a kubernetes-validate bump does not move it silently.
KUBERNETES_VERSION = "1.37"
EXIT_VALID, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
MANIFEST_SUFFIXES = (".yaml", ".yml")
MESSAGE_LIMIT = 240
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

Finding = tuple[str, str]  # (path in the object, message)


class UsageError(Exception):
    """The command line or the environment is wrong, not the objects: exit 2."""


# --------------------------------------------------------------------------- reading objects


class _ObjectLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Timestamps stay strings: the API server receives JSON, where a date is only a string."""


_ObjectLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)


@dataclass
class Problem:
    """One refusal, printed so that the file, the object and the field can be found."""

    file: str
    ref: str
    path: str
    message: str

    def __str__(self) -> str:
        message = " ".join(self.message.split())
        if len(message) > MESSAGE_LIMIT:
            message = message[: MESSAGE_LIMIT - 3] + "..."
        return f"{self.file}: {self.ref}: {self.path}: {message}"


def object_ref(obj: Any, index: int) -> str:
    """``Kind namespace/name`` (or ``Kind name`` when cluster-scoped): how a problem names its object."""
    if not isinstance(obj, dict):
        return f"document {index}"
    meta = as_dict(obj.get("metadata"))
    name = meta.get("name") or meta.get("generateName") or "<no name>"
    where = f"{meta['namespace']}/{name}" if meta.get("namespace") else str(name)
    return f"{obj.get('kind') or '<no kind>'} {where}"


def collect_files(paths: Sequence[Path]) -> list[Path]:
    """The files given and the YAML files under the directories given (outputs.json beside them is no object)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"no such file or directory: {path}")
    if not files:
        raise UsageError(f"no *.yaml or *.yml files in {', '.join(map(str, paths))}")
    return files


def _objects(document: Any) -> Iterator[tuple[str, Any]]:
    """A document's objects with the path prefix of each: a ``kind: List`` holds several."""
    if isinstance(document, dict) and document.get("kind") == "List" and isinstance(document.get("items"), list):
        for index, item in enumerate(document["items"]):
            yield f"items[{index}]", item
    else:
        yield "", document


@dataclass
class LoadedFile:
    """A file's objects (with their List prefixes), or why it could not be read."""

    name: str
    objects: list[tuple[int, str, Any]] = field(default_factory=list)
    error: str | None = None


def load_file(path: Path) -> LoadedFile:
    """Parse every YAML document of a file; a parse error is a refusal of the file, not a crash."""
    loaded = LoadedFile(str(path))
    try:
        documents = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=_ObjectLoader))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        loaded.error = f"cannot parse{where}: {getattr(exc, 'problem', None) or exc}"
        return loaded
    for index, document in enumerate(documents):
        if document is not None:
            loaded.objects += [(index, prefix, obj) for prefix, obj in _objects(document)]
    return loaded


# --------------------------------------------------------------------------- schema errors as findings


def _unknown_fields(instance: dict[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The fields of ``instance`` that neither ``properties`` nor ``patternProperties`` of ``schema`` declare."""
    declared = schema.get("properties") or {}
    patterns = [re.compile(p) for p in schema.get("patternProperties") or {}]
    return sorted(k for k in instance if k not in declared and not any(p.search(k) for p in patterns))


def _findings(error: jsonschema.ValidationError, prefix: tuple[Any, ...]) -> Iterator[Finding]:
    """One finding per unknown field (at the field's own path), else the error at its path."""
    parts = (*prefix, *error.absolute_path)
    if (
        error.validator == "additionalProperties"
        and error.validator_value is False
        and isinstance(error.instance, dict)
    ):
        unknown = _unknown_fields(error.instance, as_dict(error.schema))
        for name in unknown:
            yield format_path((*parts, name)), "unknown field: the schema has no such field"
        if unknown:
            return
    yield format_path(parts), error.message


def schema_findings(validator: Any, instance: Any, prefix: tuple[Any, ...] = ()) -> list[Finding]:
    """Every error of ``instance`` under ``validator``, each once, in path order."""
    return sorted({found for error in validator.iter_errors(instance) for found in _findings(error, prefix)})


# --------------------------------------------------------------------------- built-in kinds


def _bundled_schema_root() -> Any:
    """kubernetes-validate's schema tree (package data, read through importlib.resources)."""
    import importlib.resources

    try:
        return importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    except ModuleNotFoundError as exc:
        raise UsageError("kubernetes-validate is not installed; install requirements-dev.txt") from exc


def _release_key(directory: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", directory))


def is_builtin_group(group: str) -> bool:
    """The core group, the unqualified ones (apps, batch, policy...) and *.k8s.io; a CRD of those groups wins."""
    return group == "" or "." not in group or group.endswith(".k8s.io")


class BuiltinSchemas:
    """The strict schemas of one Kubernetes minor version; each kind's validator compiled once, on first use."""

    def __init__(self, minor: str) -> None:
        root = _bundled_schema_root()
        pattern = re.compile(rf"v{re.escape(minor.removeprefix('v'))}\.\d+-local-strict")
        releases = sorted((d.name for d in root.iterdir() if pattern.fullmatch(d.name)), key=_release_key)
        if not releases:
            bundled = sorted({m.group(1) for d in root.iterdir() if (m := re.match(r"v(\d+\.\d+)", d.name))})
            raise UsageError(f"kubernetes-validate bundles no schemas for Kubernetes {minor} (it has {bundled})")
        self.version = minor
        self._directory = root / releases[-1]
        self._registry: Registry | None = None
        self._validators: dict[str, Any] = {}

    def _read(self, name: str) -> Any:
        return json.loads((self._directory / f"{name}.json").read_text(encoding="utf-8"))

    def _compiled(self, name: str) -> Any:
        if name not in self._validators:
            if self._registry is None:
                definitions = self._read("_definitions")
                self._registry = Registry().with_resource(definitions["$id"], Resource.from_contents(definitions))
            try:
                schema = self._read(name)
            except OSError:  # no such kind (or a "kind" too long to be a file name)
                self._validators[name] = None
            else:
                self._validators[name] = jsonschema.Draft202012Validator(schema, registry=self._registry)
        return self._validators[name]

    def validator(self, api_version: str, kind: str) -> Any:
        """The kind's validator, or None when this Kubernetes version has no such kind (``rbac.authorization.k8s.io/v1``
        is filed as ``rbac-v1``: the group's first label)."""
        group, _, version = api_version.rpartition("/")
        label = f"{group.split('.', 1)[0]}-{version}" if group else version
        return self._compiled(f"{kind.lower()}-{label}")

    def object_meta(self) -> Any:
        return self._compiled("objectmeta-meta-v1")


# --------------------------------------------------------------------------- custom resources

RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _is_cidr(value: str) -> bool:
    return "/" in value and bool(ipaddress.ip_network(value, strict=False))


def _is_date(value: str) -> bool:
    return re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) is not None and bool(date.fromisoformat(value))


#: The string formats the API server checks in a CRD schema (each predicate may also raise ValueError); the others
#: (int32, int64, ...) are annotations it ignores, and so does this.
STRING_FORMATS: dict[str, Callable[[str], bool]] = {
    "ipv4": lambda v: ipaddress.ip_address(v).version == 4,
    "ipv6": lambda v: ipaddress.ip_address(v).version == 6,
    "cidr": _is_cidr,
    "uuid": lambda v: UUID.fullmatch(v) is not None,
    "date": _is_date,
    "date-time": lambda v: RFC3339.fullmatch(v) is not None,
    "datetime": lambda v: RFC3339.fullmatch(v) is not None,
    "byte": lambda v: base64.b64decode(v, validate=True) is not None,
}


def _strings_only(predicate: Callable[[str], bool]) -> Callable[[Any], bool]:
    """A format constrains strings; a value of another type is the ``type`` keyword's to refuse."""
    return lambda value: not isinstance(value, str) or predicate(value)


def format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    for name, predicate in STRING_FORMATS.items():
        checker.checks(name, raises=ValueError)(_strings_only(predicate))
    return checker


def _list_identity(item: Any, list_type: str, schema: dict[str, Any]) -> str | None:
    """What makes an item unique in a set (the item) or a map (its key fields, defaulted as the server does)."""
    if list_type == "set":
        return json.dumps(item, sort_keys=True, default=str)
    if not isinstance(item, dict):
        return None
    defaults = as_dict(as_dict(schema.get("items")).get("properties"))
    keys = schema.get("x-kubernetes-list-map-keys") or []
    return json.dumps([item.get(k, as_dict(defaults.get(k)).get("default")) for k in keys], default=str)


def _no_duplicates(validator: Any, list_type: Any, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    """``x-kubernetes-list-type: set|map``: the API server refuses a second equal item (or item with equal keys)."""
    if list_type not in ("set", "map") or not validator.is_type(instance, "array"):
        return
    first: dict[str, int] = {}
    for index, item in enumerate(instance):
        identity = _list_identity(item, list_type, schema)
        if identity is None:
            continue
        if identity in first:
            what = "an equal item" if list_type == "set" else f"the same {schema.get('x-kubernetes-list-map-keys')}"
            yield jsonschema.ValidationError(
                f"duplicate: item [{first[identity]}] has {what} (x-kubernetes-list-type {list_type})", path=[index]
            )
        else:
            first[identity] = index


CustomResourceValidator = jsonschema.validators.extend(
    jsonschema.Draft4Validator, {"x-kubernetes-list-type": _no_duplicates}
)
#: Keywords whose value maps names to schemas, and those whose value is a schema or a list of schemas.
NAMED_SCHEMAS = ("properties", "patternProperties", "definitions")
SCHEMA_VALUED = ("items", "additionalProperties")
JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
#: Kubernetes markers with a meaning plain JSON Schema lacks; handled by ``to_json_schema`` or a custom keyword.
KUBERNETES_MARKERS = ("x-kubernetes-list-type", "x-kubernetes-list-map-keys")


def _convert_each(value: Any, in_junctor: bool) -> Any:
    if isinstance(value, list):
        return [to_json_schema(item, in_junctor=in_junctor) for item in value]
    return to_json_schema(value, in_junctor=in_junctor)


def _copy_keywords(node: dict[str, Any], in_junctor: bool) -> dict[str, Any]:
    """The node's keywords, sub-schemas converted; Kubernetes-only markers and ``nullable`` left out."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: to_json_schema(sub, in_junctor=in_junctor) for name, sub in value.items()}
        elif key in SCHEMA_VALUED:
            out[key] = _convert_each(value, in_junctor)
        elif key in JUNCTORS:
            out[key] = _convert_each(value, True)
        elif key == "nullable" or (key.startswith("x-kubernetes-") and key not in KUBERNETES_MARKERS):
            continue
        else:
            out[key] = value
    return out


def to_json_schema(node: Any, *, in_junctor: bool = False) -> Any:
    """A Kubernetes structural schema node as JSON Schema draft 4, with the API server's reading of it.

    Under allOf/anyOf/oneOf/not (``in_junctor``) a node only adds checks to fields declared outside it, so it may
    not close an object; elsewhere an object without ``x-kubernetes-preserve-unknown-fields`` takes no other field.
    """
    if not isinstance(node, dict):
        return node
    out = _copy_keywords(node, in_junctor)
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out and "oneOf" not in out:
        out["type"] = ["integer", "string"]
    if node.get("x-kubernetes-embedded-resource"):
        declared = out.setdefault("properties", {})
        declared.setdefault("apiVersion", {"type": "string"})
        declared.setdefault("kind", {"type": "string"})
        declared.setdefault("metadata", {"type": "object"})
    closes = out.get("type") == "object" or "properties" in out
    keeps_unknown = bool(node.get("x-kubernetes-preserve-unknown-fields"))
    if closes and not in_junctor and not keeps_unknown and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if node.get("nullable"):
        if isinstance(out.get("type"), str) and "enum" not in out:
            out["type"] = [out["type"], "null"]
        else:
            out = {"anyOf": [{"type": "null"}, out]}
    return out


@dataclass
class CrdVersion:
    """One version of a CRD: whether it is served and its schema, compiled on first use."""

    served: bool
    schema: dict[str, Any] | None
    _validator: Any = field(default=None, repr=False)

    def validator(self) -> Any:
        if self._validator is None:
            root = to_json_schema(self.schema or {})
            declared = root.setdefault("properties", {})
            declared.setdefault("apiVersion", {"type": "string"})
            declared.setdefault("kind", {"type": "string"})
            declared["metadata"] = {"type": "object"}  # checked as ObjectMeta, like a built-in's
            self._validator = CustomResourceValidator(root, format_checker=format_checker())
        return self._validator


@dataclass
class CrdKind:
    """A custom resource kind and the file its schemas came from."""

    group: str
    kind: str
    source: str
    versions: dict[str, CrdVersion]


def _read_schema_file(path: Path) -> CrdKind:
    """One ``tools/crd_schemas.py`` document."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        versions = {
            name: CrdVersion(bool(entry.get("served")), entry.get("schema"))
            for name, entry in document["versions"].items()
        }
        return CrdKind(document["group"], document["kind"], path.name, versions)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path}: not a schema file of tools/crd_schemas.py: {exc!r}") from exc


def load_crd_kinds(directories: Sequence[Path]) -> dict[tuple[str, str], CrdKind]:
    """Every schema file of the directories, by (group, kind); a later directory wins for the same kind."""
    kinds: dict[tuple[str, str], CrdKind] = {}
    for directory in directories:
        if not directory.is_dir():
            raise UsageError(f"schema directory not found: {directory}")
        for path in sorted(directory.glob("*.json")):
            crd = _read_schema_file(path)
            kinds[(crd.group, crd.kind)] = crd
    if not kinds:
        raise UsageError(f"no schema files in {', '.join(map(str, directories))} (make them: tools/crd_schemas.py)")
    return kinds


# --------------------------------------------------------------------------- checking objects


@dataclass
class Verdict:
    """One object's findings; ``skipped`` when nothing knows its kind and unknown kinds may pass."""

    findings: list[Finding]
    skipped: bool = False


class ObjectChecker:
    """Checks objects against the built-in and custom resource schemas."""

    def __init__(self, builtins: BuiltinSchemas, crds: dict[tuple[str, str], CrdKind], allow_unknown: bool) -> None:
        self.builtins, self.crds, self.allow_unknown = builtins, crds, allow_unknown

    def check(self, obj: Any) -> Verdict:
        """A CRD schema wins over a built-in one (gateway.networking.k8s.io ends in .k8s.io but is a CRD's)."""
        if not isinstance(obj, dict):
            return Verdict([("(root)", f"a {type(obj).__name__}, not an object (a mapping)")])
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not (api_version and isinstance(api_version, str) and kind and isinstance(kind, str)):
            absent = [
                name
                for name, value in (("apiVersion", api_version), ("kind", kind))
                if not value or not isinstance(value, str)
            ]
            return Verdict([("(root)", f"{' and '.join(absent)} missing or not a string")])
        group, _, version = api_version.rpartition("/")
        findings = _metadata_findings(obj)
        crd = self.crds.get((group, kind))
        if crd is not None:
            return Verdict(findings + self._custom(obj, crd, version))
        validator = self.builtins.validator(api_version, kind) if is_builtin_group(group) else None
        if validator is not None:
            return Verdict(findings + schema_findings(validator, obj))
        if self.allow_unknown:
            return Verdict(findings, skipped=not findings)
        why = f"no schema for {kind} {api_version}: not built into Kubernetes {self.builtins.version}, no CRD schema"
        return Verdict([*findings, ("(root)", why)])

    def _custom(self, obj: dict[str, Any], crd: CrdKind, version: str) -> list[Finding]:
        crd_version = crd.versions.get(version)
        if crd_version is None or not crd_version.served:
            served = ", ".join(f"{crd.group}/{v}" for v, entry in crd.versions.items() if entry.served) or "none"
            state = "is not served" if crd_version else "does not exist"
            return [("apiVersion", f"{crd.kind} version {version} {state} (served: {served}; {crd.source})")]
        findings = self._custom_metadata(as_dict(obj.get("metadata")))
        try:
            return findings + schema_findings(crd_version.validator(), obj)
        except (jsonschema.SchemaError, re.error) as exc:
            return [*findings, ("(root)", f"the schema in {crd.source} is unusable: {exc}")]

    def _custom_metadata(self, meta: Mapping[str, Any]) -> list[Finding]:
        """ObjectMeta's schema, and the name rule every custom resource has (a DNS-1123 subdomain)."""
        findings = schema_findings(self.builtins.object_meta(), meta, ("metadata",)) if meta else []
        name = meta.get("name")
        if isinstance(name, str) and name and (len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name)):
            findings.append(("metadata.name", f"{name!r} is not a DNS-1123 subdomain"))
        return findings


def _metadata_findings(obj: dict[str, Any]) -> list[Finding]:
    """Every object needs metadata with a name (or a generateName)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [("metadata", "missing or not a mapping")]
    if not meta.get("name") and not meta.get("generateName"):
        return [("metadata", "needs a name or a generateName")]
    return []


@dataclass
class Tally:
    valid: int = 0
    invalid: int = 0
    skipped: int = 0

    def summary(self, label: str) -> str:
        total = self.valid + self.invalid + self.skipped
        skipped = f", {self.skipped} skipped (no schema)" if self.skipped else ""
        return f"{label}{total} objects: {self.valid} valid, {self.invalid} invalid{skipped}"


def _with_prefix(prefix: str, path: str) -> str:
    if not prefix:
        return path
    return prefix if path == "(root)" else f"{prefix}.{path}"


def check_set(files: Sequence[Path], checker: ObjectChecker, admission: bool, verbose: bool) -> Tally:
    """Check one set of files as one cluster would get them (their Namespaces decide admission); print problems."""
    loaded = [load_file(path) for path in files]
    objects = [obj for f in loaded for _, _, obj in f.objects]
    levels = namespace_levels(objects) if admission else {}
    tally = Tally()
    for file in loaded:
        if file.error is not None:
            print(Problem(file.name, "-", "(file)", file.error))
            tally.invalid += 1
        for index, prefix, obj in file.objects:
            verdict = checker.check(obj)
            findings = verdict.findings + admission_findings(obj, levels)
            ref = object_ref(obj, index)
            for path, message in findings:
                print(Problem(file.name, ref, _with_prefix(prefix, path), message))
            if findings:
                tally.invalid += 1
            elif verdict.skipped:
                tally.skipped += 1
            else:
                tally.valid += 1
            if verbose and not findings:
                print(f"{file.name}: {ref}: {'skipped (no schema)' if verdict.skipped else 'valid'}")
    return tally


# --------------------------------------------------------------------------- command line


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.validate", description=__doc__ and __doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH", help="manifest files or directories (one set)")
    parser.add_argument("--stack", action="append", default=[], help="a stack's rendered/<stack> (repeatable)")
    parser.add_argument("--rendered", type=Path, default=RENDERED_DIR, help="where the plan wrote (default: rendered)")
    parser.add_argument(
        "--schemas", type=Path, action="append", help="CRD schema directory, repeatable (default: schemas/crds)"
    )
    parser.add_argument("--kubernetes-version", default=KUBERNETES_VERSION, metavar="X.Y", help="for built-in kinds")
    parser.add_argument("--allow-unknown", action="store_true", help="pass objects no schema knows, counted skipped")
    parser.add_argument("--no-admission", action="store_true", help="skip the Pod Security admission check")
    parser.add_argument("-v", "--verbose", action="store_true", help="also print every valid object")
    return parser.parse_args(argv)


def _sets(args: argparse.Namespace) -> list[tuple[str, list[Path]]]:
    """(label, files) of each set to check: the PATHs as one, else each stack's rendered directory."""
    if args.paths:
        if args.stack:
            raise UsageError("give PATHs or --stack, not both")
        return [("", collect_files(args.paths))]
    stacks = args.stack or list_stacks(PROJECT_DIR)
    if not stacks:
        raise UsageError(f"no Pulumi.<stack>.yaml in {PROJECT_DIR} and no --stack")
    sets = []
    for stack in stacks:
        directory = args.rendered / stack
        if not directory.is_dir():
            raise UsageError(f"{directory} does not exist: plan it first (make plan)")
        sets.append((f"{stack}: ", collect_files([directory])))
    return sets


def main(argv: Sequence[str] | None = None) -> int:
    """Check every set; see the module docstring for the exit status."""
    args = _parse(argv)
    try:
        sets = _sets(args)
        checker = ObjectChecker(
            BuiltinSchemas(args.kubernetes_version), load_crd_kinds(args.schemas or [SCHEMA_DIR]), args.allow_unknown
        )
    except UsageError as exc:
        print(f"validate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    invalid = False
    for label, files in sets:
        tally = check_set(files, checker, admission=not args.no_admission, verbose=args.verbose)
        print(tally.summary(label))
        invalid = invalid or tally.invalid > 0
    return EXIT_INVALID if invalid else EXIT_VALID


if __name__ == "__main__":
    sys.exit(main())
