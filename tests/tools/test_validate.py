"""tools/validate.py: what every stack and option set renders is valid, broken objects are refused with the file,
the object and the path named, `make validate` needs nothing beside the checkout, and, when ../shared is beside
it, the project's validator and ../shared/tools/validate_manifests.py accept and refuse the same objects."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support.option_sets import ALL_SETS, option_set_run
from tests.support.source_files import copy_checkout
from tests.support.stacks import project_copier
from tools import pod_security, validate
from tools.harness import PROJECT_DIR
from tools.plan import plan_stack, write_rendered
from tools.stack_files import list_stacks

#: The shipped stacks as `make plan` renders them (no secret assumed), beside test_main's option sets.
MAKE_PLAN = [f"{stack} (make plan)" for stack in list_stacks(PROJECT_DIR)]
HYDRA = "hydra (make plan)"
#: A problem line of either validator: "file: object: path: message" (the file is a path without ": ").
PROBLEM = re.compile(r"^(?P<file>/[^:]+\.ya?ml): ")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory, planned_stack_outputs) -> Callable[[str], Path]:
    """``rendered(name)``: the directory an option set (or a shipped stack) renders to, planned once per module."""
    cache: dict[str, Path] = {}

    def render(name: str) -> Path:
        if name not in cache:
            outputs = {key: dict(copy.deepcopy(value)) for key, value in planned_stack_outputs.items()}
            scratch = tmp_path_factory.mktemp("set")
            if name in MAKE_PLAN:
                run = plan_stack(name.split()[0], stack_outputs=outputs)
            else:
                run = option_set_run(name, project_copier(tmp_path_factory.mktemp("project")), outputs)
            write_rendered(run, scratch / "out")
            cache[name] = scratch / "out"
        return cache[name]

    return render


def _run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    """tools/validate.py in-process: (exit status, stdout + stderr)."""
    status = validate.main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def _shared(shared_dir: Path, directory: Path) -> subprocess.CompletedProcess[str]:
    """../shared's validator on a directory's YAML files, as the Makefile used to run it."""
    files = sorted(str(p) for p in directory.rglob("*.yaml"))
    tool = shared_dir / "tools" / "validate_manifests.py"
    return subprocess.run([sys.executable, str(tool), *files], capture_output=True, text=True, check=False)


def _refused_files(output: str) -> set[str]:
    return {m["file"] for line in output.splitlines() if (m := PROBLEM.match(line))}


def _yaml_count(directory: Path) -> int:
    return sum(1 for _ in directory.rglob("*.yaml"))


# --------------------------------------------------------------------------- what the program renders is valid


@pytest.mark.parametrize("name", MAKE_PLAN + ALL_SETS)
def test_what_every_stack_and_option_set_renders_validates(name: str, rendered, capsys) -> None:
    directory = rendered(name)
    status, output = _run(capsys, directory)
    count = _yaml_count(directory)
    assert status == validate.EXIT_VALID, output
    assert output.strip().splitlines()[-1] == f"{count} objects: {count} valid, 0 invalid"


def test_the_rendered_kinds_need_every_kind_of_check(rendered) -> None:
    """The sets above hold built-in kinds, custom resources and pods in restricted namespaces: each check runs."""
    objects = [yaml.safe_load(p.read_text()) for name in MAKE_PLAN for p in rendered(name).rglob("*.yaml")]
    crds = validate.load_crd_kinds([validate.SCHEMA_DIR])
    custom = {o["kind"] for o in objects if (o["apiVersion"].rpartition("/")[0], o["kind"]) in crds}
    assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "HTTPRoute", "Certificate"} <= custom
    levels = validate.namespace_levels(objects)
    assert set(levels.values()) == {"restricted"}, levels
    assert any(pod_security.pod_template(o) and o["metadata"]["namespace"] in levels for o in objects)


def test_the_stacks_of_the_checkout_are_checked_each_on_its_own(tmp_path: Path, rendered, capsys) -> None:
    for name in MAKE_PLAN:
        shutil.copytree(rendered(name), tmp_path / name.split()[0])
    status, output = _run(capsys, "--rendered", tmp_path)
    assert status == validate.EXIT_VALID, output
    summaries = [line for line in output.splitlines() if " objects: " in line]
    assert [line.split(":")[0] for line in summaries] == [name.split()[0] for name in MAKE_PLAN]


# --------------------------------------------------------------------------- broken objects are refused


def _set(path: tuple[str | int, ...], value: object) -> Callable[[dict], None]:
    def change(obj: dict) -> None:
        node = obj
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return change


def _nfs_backup(obj: dict) -> None:
    backup = next(v for v in obj["spec"]["template"]["spec"]["volumes"] if v["name"] == "backup")
    backup.pop("persistentVolumeClaim")
    backup["nfs"] = {"server": "nfs.internal.example.com", "path": "/export/headscale-backup"}


CONTAINER = ("spec", "template", "spec", "containers", 0)
#: name -> (file under the stack's directory, change, the object as named, the path, part of the message).
BROKEN: dict[str, tuple[str, Callable[[dict], None], str, str, str]] = {
    "a Deployment's wrong field type": (
        "headscale/deployment-headscale.yaml",
        _set(("spec", "replicas"), "three"),
        "Deployment headscale/headscale",
        "spec.replicas",
        "'three' is not of type 'integer'",
    ),
    "an unknown field of a ServiceMonitor": (
        "headscale/servicemonitor-headscale.yaml",
        _set(("spec", "scrapeEvery"), "30s"),
        "ServiceMonitor headscale/headscale",
        "spec.scrapeEvery",
        "unknown field",
    ),
    "a pod running as root in a restricted namespace": (
        "headscale/deployment-headplane.yaml",
        _set((*CONTAINER, "securityContext", "runAsUser"), 0),
        "Deployment headscale/headplane",
        "spec.template.spec.containers[0].securityContext.runAsUser",
        "Pod Security: namespace 'headscale' enforces restricted: 0 (root) is not allowed",
    ),
    "an inline nfs volume in a restricted namespace": (
        "headscale/deployment-headscale.yaml",
        _nfs_backup,
        "Deployment headscale/headscale",
        "spec.template.spec.volumes[",
        "volume 'backup' of type nfs is not allowed",
    ),
    "a misspelt metadata field of a built-in kind": (
        "_cluster/namespace-headscale.yaml",
        _set(("metadata", "nmae"), "typo"),
        "Namespace headscale",
        "metadata.nmae",
        "unknown field",
    ),
    "a custom resource of a version its CRD lacks": (
        "headscale/httproute-headscale-public.yaml",
        _set(("apiVersion",), "gateway.networking.k8s.io/v9"),
        "HTTPRoute headscale/headscale-public",
        "apiVersion",
        "does not exist (served: gateway.networking.k8s.io/v1",
    ),
    "a custom resource's bad format": (
        "_cluster/ciliumloadbalancerippool-tailnet-hydra.yaml",
        _set(("spec", "blocks", 0, "cidr"), "172.29.250.0/33"),
        "CiliumLoadBalancerIPPool tailnet-hydra",
        "spec.blocks[0].cidr",
        "is not a 'cidr'",
    ),
    "a custom resource's wrong metadata type": (
        "headscale/prometheusrule-headscale-ha.yaml",
        _set(("metadata", "labels"), ["not", "a", "map"]),
        "PrometheusRule headscale/headscale-ha",
        "metadata.labels",
        "is not of type 'object'",
    ),
    "a custom resource's name that is no DNS subdomain": (
        "headscale/certificate-headscale-public.yaml",
        _set(("metadata", "name"), "Headscale_Public"),
        "Certificate headscale/Headscale_Public",
        "metadata.name",
        "is not a DNS-1123 subdomain",
    ),
    "a kind no schema knows": (
        "headscale/service-headscale.yaml",
        _set(("apiVersion",), "example.com/v1"),
        "Service headscale/headscale",
        "(root)",
        "no schema for Service example.com/v1",
    ),
}


@pytest.fixture
def broken(rendered, tmp_path: Path) -> Callable[[str], tuple[Path, Path]]:
    """``broken(case)``: a copy of hydra's plan with one object changed; (the directory, the changed file)."""

    def make(case: str) -> tuple[Path, Path]:
        relative, change, *_ = BROKEN[case]
        directory = tmp_path / "hydra"
        shutil.copytree(rendered(HYDRA), directory)
        path = directory / relative
        obj = yaml.safe_load(path.read_text())
        change(obj)
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        return directory, path

    return make


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_object_is_refused_naming_the_file_object_and_path(case: str, broken, capsys) -> None:
    directory, path = broken(case)
    _, _, ref, field_path, message = BROKEN[case]
    status, output = _run(capsys, directory)
    assert status == validate.EXIT_INVALID, output
    problems = [line for line in output.splitlines() if PROBLEM.match(line)]
    assert problems, output
    assert all(line.startswith(f"{path}: {ref}: ") for line in problems), output
    assert any(line.startswith(f"{path}: {ref}: {field_path}") and message in line for line in problems), output
    assert output.strip().splitlines()[-1].endswith(", 1 invalid")


# --------------------------------------------------------------------------- files and the command line


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


NAMESPACE = """\
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {pod-security.kubernetes.io/enforce: restricted}}
"""
POD = """\
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: apps}
spec:
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: web
      image: registry.example.com/web:1.0.0
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
"""


def test_a_pod_is_admitted_by_its_namespace_among_the_files_only(tmp_path: Path, capsys) -> None:
    pod = yaml.safe_load(POD)
    pod["spec"]["containers"][0]["securityContext"]["privileged"] = True
    _write(tmp_path, "pod.yaml", yaml.safe_dump(pod))
    assert _run(capsys, tmp_path)[0] == validate.EXIT_VALID, "no Namespace among the files: nothing to enforce"
    _write(tmp_path, "namespace.yaml", NAMESPACE)
    status, output = _run(capsys, tmp_path)
    assert status == validate.EXIT_INVALID
    assert "spec.containers[0].securityContext.privileged: Pod Security: namespace 'apps' enforces restricted" in output
    assert _run(capsys, "--no-admission", tmp_path)[0] == validate.EXIT_VALID


def test_the_objects_of_a_list_are_checked_with_their_path(tmp_path: Path, capsys) -> None:
    items = [yaml.safe_load(NAMESPACE), {**yaml.safe_load(POD), "spce": {}}]
    path = _write(tmp_path, "list.yaml", yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    status, output = _run(capsys, path)
    assert status == validate.EXIT_INVALID
    assert f"{path}: Pod apps/web: items[1].spce: unknown field" in output
    assert output.strip().splitlines()[-1] == "2 objects: 1 valid, 1 invalid"


def test_an_unknown_kind_may_be_skipped_when_asked(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, "widget.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    assert _run(capsys, path)[0] == validate.EXIT_INVALID
    status, output = _run(capsys, "--allow-unknown", path)
    assert status == validate.EXIT_VALID
    assert output.strip() == "1 objects: 0 valid, 0 invalid, 1 skipped (no schema)"


def test_an_unparsable_file_is_refused_with_its_line(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, "bad.yaml", "apiVersion: v1\nkind: [unclosed\n")
    status, output = _run(capsys, path)
    assert status == validate.EXIT_INVALID
    assert f"{path}: -: (file): cannot parse at line" in output


def test_a_document_that_is_no_mapping_is_refused(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, "scalar.yaml", "--- just text\n")
    status, output = _run(capsys, path)
    assert status == validate.EXIT_INVALID
    assert f"{path}: document 0: (root): a str, not an object" in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/nonexistent/manifests"], "no such file or directory: /nonexistent/manifests"),
        (["--kubernetes-version", "1.2", "{file}"], "kubernetes-validate bundles no schemas for Kubernetes 1.2"),
        (["--stack", "nosuchstack"], "rendered/nosuchstack does not exist: plan it first (make plan)"),
        (["--schemas", "/nonexistent/schemas", "{file}"], "schema directory not found: /nonexistent/schemas"),
        (["--stack", "hydra", "{file}"], "give PATHs or --stack, not both"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str, tmp_path: Path, capsys) -> None:
    manifest = _write(tmp_path, "namespace.yaml", NAMESPACE)
    status, output = _run(capsys, *(arg.format(file=manifest) for arg in args))
    assert status == validate.EXIT_USAGE
    assert output.startswith("validate: ")
    assert message in output


def test_a_directory_without_manifests_is_a_usage_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "outputs.json").write_text("{}")
    status, output = _run(capsys, tmp_path)
    assert status == validate.EXIT_USAGE
    assert "no *.yaml or *.yml files in" in output


def test_the_pinned_kubernetes_version_is_bundled_by_the_pinned_kubernetes_validate() -> None:
    pins = dict(
        line.split("==") for line in (PROJECT_DIR / "requirements-dev.txt").read_text().splitlines() if "==" in line
    )
    assert pins["kubernetes-validate"].startswith(validate.KUBERNETES_VERSION + ".")
    assert validate.BuiltinSchemas(validate.KUBERNETES_VERSION).validator("apps/v1", "Deployment") is not None


# --------------------------------------------------------------------------- `make validate` stands alone


def _makefile_rule(target: str) -> str:
    text = (PROJECT_DIR / "Makefile").read_text()
    match = re.search(rf"^{target}:.*\n(?:\t.*\n)*", text, re.MULTILINE)
    assert match, f"no {target} rule in the Makefile"
    return match.group(0)


def test_the_validate_target_runs_the_projects_validator_only() -> None:
    rule = _makefile_rule("validate")
    assert "-m tools.validate" in rule
    assert "shared" not in rule


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed (Debian package make)")
def test_make_validate_passes_with_nothing_beside_the_checkout(tmp_path: Path) -> None:
    """The done-when of issue 25: a copy of the checkout alone in a directory (no ../shared) validates."""
    clone = copy_checkout(tmp_path / "alone" / "headscale-ha")
    (clone / ".venv").symlink_to(PROJECT_DIR / ".venv")
    assert not (clone.parent / "shared").exists()
    stamps = ["-o", ".venv/.runtime-installed", "-o", ".venv/.dev-installed"]  # this venv is installed: no pip
    result = subprocess.run(
        ["make", "-s", *stamps, "validate"],
        cwd=clone,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    for stack in list_stacks(clone):
        assert re.search(rf"^{stack}: (\d+) objects: \1 valid, 0 invalid$", result.stdout, re.MULTILINE), result.stdout
    assert "shared" not in result.stderr


# --------------------------------------------------------------------------- agreement with ../shared's validator


@pytest.mark.parametrize("name", MAKE_PLAN + ALL_SETS)
def test_agrees_with_shared_on_what_is_rendered(name: str, rendered, shared_dir: Path, capsys) -> None:
    directory = rendered(name)
    theirs = _shared(shared_dir, directory)
    status, output = _run(capsys, directory)
    assert (status, _refused_files(output)) == (theirs.returncode, _refused_files(theirs.stdout)), theirs.stdout
    assert theirs.stdout.strip().splitlines()[-1] == f"{_yaml_count(directory)} passed, 0 failed"


@pytest.mark.parametrize("case", list(BROKEN))
def test_agrees_with_shared_on_the_broken_objects(case: str, broken, shared_dir: Path, capsys) -> None:
    directory, path = broken(case)
    theirs = _shared(shared_dir, directory)
    status, output = _run(capsys, directory)
    assert theirs.returncode == status == validate.EXIT_INVALID, theirs.stdout
    assert _refused_files(theirs.stdout) == _refused_files(output) == {str(path)}, theirs.stdout + output
