"""The whole of ``make diff`` on a committed copy of this project and a changed working tree of it: tools.diff.planning
(a git worktree of the base, each tree planned by its own code in a subprocess running tools/diff/dump.py) and the
command, ``python -m tools.diff``. The base is planned once, for every case.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.source_files import copy_checkout
from tools.diff.planning import DiffError, dump_ref, dump_tree
from tools.diff.render import render
from tools.diff.report import EXIT_CHANGES, EXIT_DATA_LOSS, Report, exit_code
from tools.diff.stacks import diff_dumps
from tools.fields import is_secret
from tools.harness import PROJECT_DIR

# ------------------------------------------------------------------------------------------------ end to end

HYDRA_BASE_EXTRA = """\
  headscale-ha:backup:
    nfs: {server: nfs.internal.example.com, path: /export/headscale-backup}
    litestream: {image: docker.io/litestream/litestream:0.5.17}
    local: {storage: persistent}
  headscale-ha:routerAuthKeys:
    - secure: v1:ROUTERKEYZERO
    - secure: v1:ROUTERKEYONE
"""


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, env={**os.environ, **(env or {})}
    )
    return result.stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository of this project's working tree (tracked and untracked, not ignored), with hydra on
    persistent storage and secure router keys, committed once."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the end-to-end diff needs it")
    if subprocess.run(["git", "rev-parse"], cwd=PROJECT_DIR, capture_output=True, check=False).returncode != 0:
        pytest.skip(f"{PROJECT_DIR} is not a git checkout: there is no base to compare with")
    root = tmp_path_factory.mktemp("diff") / "main"
    copy_checkout(root)
    hydra = root / "Pulumi.hydra.yaml"
    hydra.write_text(hydra.read_text() + HYDRA_BASE_EXTRA)
    _git(root, "init", "--quiet")
    _git(root, "add", "--all")
    identity = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    _git(root, "commit", "--quiet", "--no-gpg-sign", "-m", "base", env=identity)
    return root


@pytest.fixture(scope="module")
def base_dump(repo: Path) -> dict[str, Any]:
    """The base planned once, through a git worktree of HEAD (its own code), for every end-to-end case."""
    return dump_ref(repo, "HEAD")


@pytest.fixture
def work(repo: Path) -> Iterator[Path]:
    """The repository's working tree for one case; put back to HEAD afterwards."""
    yield repo
    _git(repo, "checkout", "--quiet", "--", ".")


def _head_diff(repo: Path, base_dump: dict[str, Any]) -> tuple[Report, str]:
    report = diff_dumps(base_dump, dump_tree(repo, label="the working tree"))
    return report, render(report)


def _run_cli(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.diff", *args], cwd=repo, capture_output=True, text=True, check=False, timeout=300
    )


def test_cli_a_clean_working_tree_says_no_changes_exits_0_and_removes_its_worktree(work: Path) -> None:
    result = _run_cli(work)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"diff HEAD \([0-9a-f]{12}\) -> working tree: no changes; exit 0\n", result.stdout)
    assert len(_git(work, "worktree", "list").splitlines()) == 1, "the base's worktree is removed"


def test_cli_a_storage_class_change_replaces_the_claim_with_data_loss_exit_3(work: Path) -> None:
    hydra = work / "Pulumi.hydra.yaml"
    text = hydra.read_text()
    (storage_class,) = re.findall(r"^    storageClass: (\S+)$", text, flags=re.MULTILINE)
    hydra.write_text(text.replace(f"storageClass: {storage_class}", "storageClass: review-class"))
    result = _run_cli(work, "--stack", "hydra")
    assert result.returncode == EXIT_DATA_LOSS, result.stdout + result.stderr
    out = result.stdout
    assert out.startswith("=== stack hydra:")
    assert (
        "DATA LOSS: PersistentVolumeClaim headscale/headscale-data replaced (spec.storageClassName changed "
        f'"{storage_class}" -> "review-class")' in out
    )
    assert "+- PersistentVolumeClaim headscale/headscale-data  (hydra-headscale-data)" in out
    assert "cosmos" not in out
    assert "tailnet" not in out
    assert out.strip().splitlines()[-1].endswith("exit 3")


def test_a_secure_value_change_reaches_its_secret_as_changed_without_the_value(
    work: Path, base_dump: dict[str, Any]
) -> None:
    hydra = work / "Pulumi.hydra.yaml"
    hydra.write_text(hydra.read_text().replace("v1:ROUTERKEYZERO", "v1:ROUTERKEYROTATED"))
    report, text = _head_diff(work, base_dump)
    block = text.split("Secret tailnet-gateway/subnet-router-authkey-0", 1)[1].split("\n  ~", 1)[0]
    assert "stringData.authkey: changed (secret)" in block
    assert "Secret tailnet-gateway/subnet-router-authkey-1" not in text, "only the key whose ciphertext changed"
    assert "headscale-ha:routerAuthKeys: secure value changed" in text
    assert "ROUTERKEY" not in text
    assert "offline placeholder" not in text
    digests = {f.new["secret"] for s in report.stacks for c in s.changes for f in c.fields if f.secret}
    assert digests
    assert not any(d in text for d in digests)


def test_a_shared_config_change_shows_in_every_stack(work: Path, base_dump: dict[str, Any]) -> None:
    project = work / "Pulumi.yaml"
    text = project.read_text()
    (image,) = re.findall(r"image: (ghcr.io/tale/headplane:\d+\.\d+\.\d+)$", text, flags=re.MULTILINE)
    major_minor, patch = image.rsplit(".", 1)
    bumped = f"{major_minor}.{int(patch) + 1}"
    project.write_text(text.replace(image, bumped))
    report, text = _head_diff(work, base_dump)
    assert [s.name for s in report.stacks] == ["cosmos", "hydra"]
    for stack in ("cosmos", "hydra"):
        block = text.split(f"=== stack {stack}:")[1].split("=== stack")[0]
        assert f'spec.template.spec.containers[name=headplane].image: "{image}" -> "{bumped}"' in block
    assert exit_code(report) == EXIT_CHANGES


def test_a_renamed_resource_in_the_program_is_reported_replaced_with_both_urns(
    work: Path, base_dump: dict[str, Any]
) -> None:
    site = work / "program" / "site.py"
    source = site.read_text()
    assert 'self._namespace("namespace", args.namespace,' in source
    site.write_text(
        source.replace(
            'self._namespace("namespace", args.namespace,', 'self._namespace("control-namespace", args.namespace,'
        )
    )
    report, text = _head_diff(work, base_dump)
    old = "urn:pulumi:hydra::headscale-ha::headscale-ha:site:TailnetSite$kubernetes:core/v1:Namespace::hydra-namespace"
    assert (
        f"Pulumi resource identity changed, from {old} to {old.replace('hydra-namespace', 'hydra-control-namespace')}"
        in text
    )
    assert "+- Namespace headscale  (hydra-control-namespace)" in text
    assert exit_code(report) == EXIT_CHANGES, "retained: nothing is lost, the up fails or adopts it"


def test_a_base_without_the_planning_api_fails_with_a_clear_message(repo: Path, tmp_path: Path) -> None:
    index = {"GIT_INDEX_FILE": str(tmp_path / "index")}
    _git(repo, "read-tree", "HEAD", env=index)
    _git(repo, "rm", "--cached", "--quiet", "tools/plan.py", env=index)
    tree = _git(repo, "write-tree", env=index)
    identity = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    commit = _git(repo, "commit-tree", tree, "-p", "HEAD", "-m", "no plan", env=identity)
    with pytest.raises(DiffError, match=r"its tools lack what the diff needs .*tools.plan"):
        dump_ref(repo, commit, ["hydra"])
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    with pytest.raises(DiffError, match="git rev-parse"):
        dump_ref(repo, "no-such-ref")


def test_a_base_without_the_diff_package_is_planned_by_the_running_dumper(
    repo: Path, tmp_path: Path, base_dump: dict[str, Any]
) -> None:
    """A base from before tools/diff/ (any older commit) has no dumper of its own: the running checkout's plans it,
    with the base's tools, to the same resources and outputs."""
    index = {"GIT_INDEX_FILE": str(tmp_path / "index")}
    _git(repo, "read-tree", "HEAD", env=index)
    _git(repo, "rm", "-r", "--cached", "--quiet", "tools/diff", env=index)
    tree = _git(repo, "write-tree", env=index)
    identity = {name: "t" for name in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME")}
    identity |= {name: "t@t" for name in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL")}
    commit = _git(repo, "commit-tree", tree, "-p", "HEAD", "-m", "no tools/diff", env=identity)
    old = dump_ref(repo, commit, ["hydra"])["stacks"]["site/hydra"]
    expected = base_dump["stacks"]["site/hydra"]
    assert old["outputs"] == expected["outputs"]
    by_urn = {r["urn"]: r for r in expected["resources"]}
    assert {r["urn"]: r for r in old["resources"]} == by_urn
    assert len(_git(repo, "worktree", "list").splitlines()) == 1


def test_the_dump_holds_no_secret_in_clear(base_dump: dict[str, Any]) -> None:
    text = json.dumps(base_dump)
    assert "ROUTERKEY" not in text
    assert "offline placeholder for secret" not in text
    hydra = {r["name"]: r for r in base_dump["stacks"]["site/hydra"]["resources"]}
    identity = hydra["hydra-headscale-identity"]["inputs"]
    values = [*identity.get("data", {}).values(), *identity.get("stringData", {}).values()]
    assert identity["kind"] == "Secret"
    assert values
    assert all(is_secret(v) for v in values)
    keys = [r for r in base_dump["stacks"]["identity/tailnet"]["resources"] if r["type"].endswith("RandomBytes")]
    assert keys
    assert all(r["protect"] for r in keys)


def test_cli_a_policy_rule_added_in_git_is_summarised_with_the_restart_it_causes(
    work: Path, base_dump: dict[str, Any]
) -> None:
    policy = work / "policy" / "base.hujson"
    text = policy.read_text()
    anchor = "    // Ops may ping the servers.\n"
    assert anchor in text
    rule = '    {"action": "accept", "src": ["group:ops"], "proto": "tcp", "dst": ["tag:bastion:8443"]},\n'
    policy.write_text(text.replace(anchor, rule + anchor))
    report, out = _head_diff(work, base_dump)
    hydra = out.split("=== stack hydra:")[1].split("=== stack")[0]
    recovery = next(s for s in base_dump["stacks"].values() if s["stack"] == "hydra")["outputs"]["recovery"]
    (row,) = [r for r in recovery["applications"]["headscale"]["failures"] if r["failure"] == "podReplaced"]
    assert (
        f"restarts Headscale (Recreate stops the old pod before the new one starts): down for about "
        f"{row['rtoSeconds']:g} s" in hydra
    )
    assert "  acls[+] group:ops -> tag:bastion:8443 (tcp)\n" in hydra
    assert hydra.index("acls[+]") < hydra.index("the policy's JSON")
    assert hydra.count("the same digest change as") == 2
    cosmos = out.split("=== stack cosmos:")[1].split("=== stack")[0]
    assert "Headscale is at 0 replicas here" in cosmos, "the standby restarts nothing"
    assert "restarts Headscale" not in cosmos
    assert exit_code(report) == EXIT_CHANGES
