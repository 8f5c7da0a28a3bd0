"""The engine model (tests/models/engine), one rule at a time, on tiny programs: each test runs a program written to
tmp_path through `Engine.run` and asserts the step (op, how, reasons) and what it did to the fake cluster and the
state. The rules are pulumi/pulumi's step generator and pulumi-kubernetes 4.x's, as tests/models/engine/README.md
says, and the real tier (tests/real) holds the model to them."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import requests

from headscale_ha.components.endpoint import PUBLIC_NAME
from tests.models.engine.apiserver import Cluster
from tests.models.engine.engine import Engine
from tests.models.engine.lifecycle import _headscale_serves
from tests.models.engine.state import ResourceState, RunResult
from tests.models.engine.world import StepError, World, kubeconfig_for
from tests.models.headscale import FakeHeadscale
from tools import pulumi_internals as sdk
from tools.harness import UNKNOWN
from tools.kubernetes_rules import provider_replacement

DEFAULT = "default_" + version("pulumi_kubernetes").replace(".", "_")  # the default provider's resource name
HEADER = """\
import json

import pulumi
import pulumi_kubernetes as k8s
from pulumi import ResourceOptions

cfg = pulumi.Config()


def jcfg(key, default):
    return json.loads(cfg.get(key) or json.dumps(default))
"""

#: One object of kind ``p:kind`` in namespace app (named "settings", or autonamed with ``p:name=auto``); ``p:value``
#: lands in the kind's field that matters (data, an image, a storage class); its options come from config.
OBJECT = """
ns = k8s.core.v1.Namespace("ns", metadata={"name": "app"})
kind, value = cfg.get("kind") or "ConfigMap", cfg.get("value") or "1"
meta = {"namespace": ns.metadata.name, "labels": {"tier": cfg.get("tier") or "a"}, "annotations": jcfg("notes", {})}
if cfg.get("name") != "auto":
    meta["name"] = "settings"
opts = ResourceOptions(
    protect=cfg.get_bool("protect") or False,
    retain_on_delete=cfg.get_bool("retain") or False,
    ignore_changes=jcfg("ignore", []),
    replace_on_changes=jcfg("roc", []),
    delete_before_replace=cfg.get_bool("dbr"),
)
pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": f"busybox:{value}"}]}
immutable = cfg.get_bool("immutable")
make = {
    "ConfigMap": lambda: k8s.core.v1.ConfigMap("obj", metadata=meta, data={"a": value}, immutable=immutable, opts=opts),
    "Secret": lambda: k8s.core.v1.Secret("obj", metadata=meta, string_data={"a": value}, immutable=immutable,
                                         opts=opts),
    "Job": lambda: k8s.batch.v1.Job("obj", metadata=meta, spec={"template": {"spec": pod}}, opts=opts),
    "PersistentVolumeClaim": lambda: k8s.core.v1.PersistentVolumeClaim("obj", metadata=meta, opts=opts, spec={
        "accessModes": ["ReadWriteOnce"], "storageClassName": f"class-{value}",
        "volumeMode": cfg.get("volumeMode") or "Filesystem", "resources": {"requests": {"storage": "1Gi"}}}),
    "Deployment": lambda: k8s.apps.v1.Deployment("obj", metadata=meta, opts=opts, spec={
        "selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": pod["containers"]}}}),
}
if not cfg.get_bool("drop"):
    pulumi.export("name", make[kind]().metadata.name)
"""


class Rig:
    """One cluster "c" (the ambient kubeconfig of stack dev names it), an engine, and the program ``body``."""

    def __init__(self, tmp_path: Path, body: str, **config: str) -> None:
        self.cluster = Cluster("c", server="https://10.0.0.1:6443")
        self.other = Cluster("d", server="https://10.0.0.2:6443")
        self.world = World(
            clusters={"c": self.cluster, "d": self.other}, ambient_kubeconfig={"dev": kubeconfig_for(self.cluster)}
        )
        self.engine = Engine(self.world)
        self.program = tmp_path / "__main__.py"
        self.program.write_text(HEADER + textwrap.dedent(body))
        self.config = {f"p:{k}": v for k, v in config.items()}

    def run(self, kind: str = "up", config: Mapping[str, str] | None = None) -> RunResult:
        merged = {**self.config, **(config or {})}
        return self.engine.run(kind, project="p", stack="dev", config=merged, program=self.program)

    def ok(self, kind: str = "up", config: Mapping[str, str] | None = None) -> RunResult:
        result = self.run(kind, config)
        assert result.error is None, result.text()
        return result

    def fails(self, kind: str, config: Mapping[str, str] | None, *words: str) -> RunResult:
        result = self.run(kind, config)
        assert result.error is not None, result.text()
        assert all(word in result.error for word in words), result.error
        return result

    @property
    def state(self) -> dict[str, ResourceState]:
        return {r.name: r for r in self.engine.stack("p", "dev").resources.values()}

    def live(self, kind: str = "ConfigMap", name: str = "settings") -> dict[str, Any]:
        found = self.cluster.find(kind, name, "app" if kind != "Namespace" else None)
        assert found is not None, f"{kind} {name} is not in the cluster"
        return found


def _step(result: RunResult, name: str = "obj") -> tuple[str, str]:
    step = result.of(name)
    return step.op, step.how


# ------------------------------------------------------------------------------------------------ create, same, update


def test_create_then_same_then_an_in_place_update(tmp_path: Path) -> None:
    rig = Rig(tmp_path, OBJECT)
    first = rig.ok()
    assert first.ops() == [("create", DEFAULT), ("create", "ns"), ("create", "obj")]
    uid = rig.live()["metadata"]["uid"]
    log = list(rig.cluster.log)
    assert log == ['create namespaces "app"', "create configmaps \"settings\" in namespace 'app'"]
    second = rig.ok()
    assert [s.op for s in second.steps] == ["same"] * 3
    assert rig.cluster.log == log  # no write at all
    third = rig.ok(config={"p:tier": "b"})
    assert third.ops() == [("update", "obj")]
    assert third.of("obj").fields == ("metadata.labels.tier",)
    assert rig.live()["metadata"]["uid"] == uid
    assert rig.live()["metadata"]["labels"] == {"tier": "b"}
    assert rig.state["obj"].inputs["metadata"]["labels"] == {"tier": "b"}


# ------------------------------------------------------------------------------------------ ConfigMap / Secret data

CM_WHY = "data.a: pulumi-kubernetes replaces a ConfigMap whose data changes"
SECRET_WHY = "stringData.a: pulumi-kubernetes replaces a Secret whose data changes"


@pytest.mark.parametrize(
    ("kind", "config", "why"),
    [
        ("ConfigMap", {}, CM_WHY),
        ("ConfigMap", {"kubernetes:enableConfigMapMutable": "true"}, None),
        ("ConfigMap", {"kubernetes:enableSecretMutable": "true"}, CM_WHY),
        ("ConfigMap", {"kubernetes:enableConfigMapMutable": "true", "p:immutable": "true"}, CM_WHY),
        ("Secret", {}, SECRET_WHY),
        ("Secret", {"kubernetes:enableSecretMutable": "true"}, None),
        ("Secret", {"kubernetes:enableSecretMutable": "true", "p:immutable": "true"}, SECRET_WHY),
    ],
    ids=["cm", "cm-mutable", "cm-secret-flag", "cm-immutable", "secret", "secret-mutable", "secret-immutable"],
)
def test_data_change_replaces_unless_the_mutable_flag(tmp_path: Path, kind: str, config: dict, why: str | None) -> None:
    rig = Rig(tmp_path, OBJECT, kind=kind)
    rig.ok(config=config)
    uid = rig.live(kind)["metadata"]["uid"]
    up = rig.ok(config={**config, "p:value": "2"})
    step = up.of("obj")
    field = "data" if kind == "ConfigMap" else "stringData"
    if why is None:
        assert (step.op, step.fields) == ("update", (f"{field}.a",))
        assert rig.live(kind)["metadata"]["uid"] == uid
    else:
        assert (step.op, step.how) == ("replace", "delete-before-replace")
        assert len(step.reasons) == 1, step.reasons
        assert step.reasons[0].startswith(why), step.reasons
        assert [line.split()[0] for line in rig.cluster.log[-2:]] == ["delete", "create"]
        assert rig.live(kind)["metadata"]["uid"] != uid
    assert rig.live(kind)[field] == {"a": "2"}


# ------------------------------------------------------------------------------------------------ forceNew, naming


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("Job", "spec.template.spec.containers[name=c].image: spec.template of a Job is immutable"),
        ("PersistentVolumeClaim", "spec.storageClassName: spec.storageClassName of a claim is immutable"),
    ],
)
def test_a_force_new_field_replaces_a_named_object_delete_first(tmp_path: Path, kind: str, reason: str) -> None:
    rig = Rig(tmp_path, OBJECT, kind=kind)
    rig.ok()
    uid = rig.live(kind)["metadata"]["uid"]
    step = rig.ok(config={"p:value": "2"}).of("obj")
    assert (step.op, step.how, step.reasons) == ("replace", "delete-before-replace", (reason,))
    assert rig.live(kind)["metadata"]["uid"] != uid
    assert [line.split()[0] for line in rig.cluster.log[-2:]] == ["delete", "create"]


def test_an_autonamed_object_is_replaced_create_first_under_a_fresh_name(tmp_path: Path) -> None:
    rig = Rig(tmp_path, OBJECT, name="auto")
    first = rig.ok().outputs["name"]
    assert first.startswith("obj-")
    assert rig.live(name=first)["metadata"]["annotations"]["pulumi.com/autonamed"] == "true"
    up = rig.ok(config={"p:value": "2"})
    assert _step(up) == ("replace", "create-before-delete")
    second = up.outputs["name"]
    assert second != first
    assert rig.live(name=second)["data"] == {"a": "2"}
    assert rig.cluster.find("ConfigMap", first) is None
    assert [line.split()[0] for line in rig.cluster.log[-2:]] == ["create", "delete"]  # the old one deleted last


# ------------------------------------------------------------------------------------------------ retainOnDelete


def test_a_removed_retained_object_is_dropped_from_the_state_but_kept(tmp_path: Path) -> None:
    rig = Rig(tmp_path, OBJECT, retain="true")
    rig.ok()
    uid = rig.live()["metadata"]["uid"]
    up = rig.ok(config={"p:drop": "true"})
    assert up.ops() == [("delete", "obj")]
    assert up.of("obj").how == "retained"
    assert rig.live()["metadata"]["uid"] == uid
    assert "obj" not in rig.state


def test_a_retained_named_object_cannot_be_replaced_delete_first(tmp_path: Path) -> None:
    """The delete half skips the provider's Delete, so the create meets the object it left: AlreadyExists; the
    engine had already removed the old resource from the state."""
    rig = Rig(tmp_path, OBJECT, kind="PersistentVolumeClaim", retain="true")
    rig.ok()
    uid = rig.live("PersistentVolumeClaim")["metadata"]["uid"]
    failed = rig.fails("up", {"p:value": "2"}, "AlreadyExists", "already exists")
    assert _step(failed) == ("replace", "delete-before-replace")
    assert "obj" not in rig.state
    assert rig.live("PersistentVolumeClaim")["metadata"]["uid"] == uid
    assert rig.live("PersistentVolumeClaim")["spec"]["storageClassName"] == "class-1"


# ------------------------------------------------------------------------------------------------ protect


@pytest.mark.parametrize(("old", "new"), [(True, True), (True, False), (False, True)])
def test_protect_refuses_a_replace_only_when_protected_before_and_after(tmp_path: Path, old: bool, new: bool) -> None:
    rig = Rig(tmp_path, OBJECT)
    rig.ok(config={"p:protect": str(old).lower()})
    uid = rig.live()["metadata"]["uid"]
    change = {"p:protect": str(new).lower(), "p:value": "2"}
    if old and new:
        rig.fails("up", change, "unable to replace", "protection")
        assert rig.live()["metadata"]["uid"] == uid
        assert rig.state["obj"].inputs["data"] == {"a": "1"}
    else:
        assert _step(rig.ok(config=change)) == ("replace", "delete-before-replace")
        assert rig.live()["metadata"]["uid"] != uid
        assert rig.state["obj"].protect is new


def test_protect_refuses_a_delete_in_preview_and_up(tmp_path: Path) -> None:
    rig = Rig(tmp_path, OBJECT, protect="true")
    rig.ok()
    for kind in ("preview", "up"):
        rig.fails(kind, {"p:drop": "true"}, "cannot be deleted", "protected")
    rig.fails("destroy", None, "protected")
    assert rig.live()["data"] == {"a": "1"}
    assert "obj" in rig.state


# ------------------------------------------------------------------------------------------------ existing objects

ADOPT = """
k8s.core.v1.ConfigMap("obj", metadata={"name": "settings", "namespace": "app", "annotations": jcfg("notes", {})},
                      data=jcfg("data", {"a": "1"}))
"""
UPSERT = {"PULUMI_K8S_UPSERT_EXISTING_OBJECTS": "true"}
FORCE = {"pulumi.com/patchForce": "true"}


@pytest.mark.parametrize(
    ("env", "data", "notes", "error"),
    [
        ({}, {"a": "1"}, {}, "already exists"),
        (UPSERT, {"a": "1", "b": "2"}, {}, None),
        (UPSERT, {"a": "2"}, {}, "conflict"),
        (UPSERT, {"a": "2"}, FORCE, None),
    ],
    ids=["create-fails", "upsert-adopts", "upsert-conflict", "upsert-forced"],
)
def test_an_object_made_outside_pulumi(tmp_path: Path, env: dict, data: dict, notes: dict, error: str | None) -> None:
    rig = Rig(tmp_path, ADOPT, data=json.dumps(data), notes=json.dumps(notes))
    rig.world.env.update(env)
    rig.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}, manager="kubectl")
    outside = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "app"}}
    uid = rig.cluster.create({**outside, "data": {"a": "1"}}, manager="kubectl")["metadata"]["uid"]
    assert _step(rig.ok("preview")) == ("create", "")  # a preview's create falls back to the inputs
    if error is not None:
        rig.fails("up", None, error)
        assert "obj" not in rig.state
        assert rig.live()["data"] == {"a": "1"}
        return
    assert _step(rig.ok()) == ("create", "")
    assert rig.live()["metadata"]["uid"] == uid
    assert rig.live()["data"] == data
    assert rig.ok().ops() == []
    rig.ok("destroy")
    assert rig.cluster.find("ConfigMap", "settings") is None  # adopted: the resource owns its lifecycle


# ------------------------------------------------------------------------------------------------ refused updates


def test_an_update_the_api_server_refuses_fails_and_keeps_the_old_inputs(tmp_path: Path) -> None:
    rig = Rig(tmp_path, OBJECT, kind="PersistentVolumeClaim")
    rig.ok()
    change = {"p:volumeMode": "Block"}
    preview = rig.fails("preview", change, "field is immutable")  # the dry-run patch is refused already
    assert (preview.of("obj").op, preview.of("obj").fields) == ("update", ("spec.volumeMode",))
    rig.fails("up", change, "field is immutable", "spec.volumeMode")
    assert rig.state["obj"].inputs["spec"]["volumeMode"] == "Filesystem"
    assert rig.state["obj"].init_errors  # a partial failure: the object could be read back
    assert rig.live("PersistentVolumeClaim")["spec"]["volumeMode"] == "Filesystem"
    back = rig.ok()
    assert back.ops() == [("update", "obj")]  # unchanged, but its init error makes it an update
    assert rig.state["obj"].init_errors == []
    assert rig.ok().ops() == []


# ------------------------------------------------------------------------------------------------ awaits


def test_an_unready_deployment_is_a_partial_failure_awaited_again(tmp_path: Path) -> None:
    rig = Rig(tmp_path, OBJECT, kind="Deployment")
    rig.cluster.unready.add("settings")
    rig.fails("up", None, "timed out")
    assert rig.cluster.now == 600.0
    uid = rig.live("Deployment")["metadata"]["uid"]
    assert rig.state["obj"].init_errors
    again = rig.fails("up", None, "timed out")
    step = again.of("obj")
    assert (step.op, step.fields) == ("update", ("(init errors: awaited again)",))
    rig.cluster.unready.clear()
    assert rig.ok().ops() == [("update", "obj")]
    assert rig.live("Deployment")["metadata"]["uid"] == uid
    assert rig.state["obj"].init_errors == []
    assert rig.ok().ops() == []


def test_skip_await_does_not_wait_for_an_unready_deployment(tmp_path: Path) -> None:
    rig = Rig(tmp_path, OBJECT, kind="Deployment", notes=json.dumps({"pulumi.com/skipAwait": "true"}))
    rig.cluster.unready.add("settings")
    rig.ok()
    assert rig.cluster.now == 0.0
    assert rig.state["obj"].init_errors == []


CUSTOM = """
ns = k8s.core.v1.Namespace("ns", metadata={"name": "app"})
meta = {"name": "w", "namespace": ns.metadata.name, "annotations": jcfg("notes", {})}
k8s.apiextensions.CustomResource("widget", api_version="example.com/v1", kind="Widget", spec={"size": 1}, metadata=meta)
"""
WAIT = {"pulumi.com/waitFor": "condition=Ready"}


@pytest.mark.parametrize(
    ("notes", "ready_after", "now", "error"),
    [
        ({}, 300.0, 0.0, None),
        (WAIT, 300.0, 300.0, None),
        (WAIT, 900.0, 600.0, "timed out"),
        ({**WAIT, "pulumi.com/timeoutSeconds": "1000"}, 900.0, 900.0, None),
    ],
    ids=["not-awaited", "wait-for", "wait-for-timeout", "timeout-seconds"],
)
def test_a_custom_resource_is_awaited_only_with_wait_for(
    tmp_path: Path, notes: dict, ready_after: float, now: float, error: str | None
) -> None:
    rig = Rig(tmp_path, CUSTOM, notes=json.dumps(notes))
    rig.cluster.ready_after["Widget"] = ready_after
    result = rig.run()
    assert result.error is None if error is None else error in str(result.error), result.text()
    assert rig.cluster.now == now
    live = rig.live("Widget", "w")
    ready = [{"type": "Ready", "status": "True"}]
    assert live.get("status", {}).get("conditions") == (ready if notes and error is None else None)
    assert bool(rig.state["widget"].init_errors) is (error is not None)


@pytest.mark.parametrize("replace_unready", [True, False])
def test_a_failed_job_is_replaced_only_with_replace_unready(tmp_path: Path, replace_unready: bool) -> None:
    notes = {"pulumi.com/replaceUnready": "true"} if replace_unready else {}
    rig = Rig(tmp_path, OBJECT, kind="Job", notes=json.dumps(notes))
    outcomes = iter(["exit 3"])  # the first run of the Job fails; any later run would succeed

    def runner(_cluster: Cluster, _job: dict) -> str | None:
        return next(outcomes, None)

    rig.cluster.job_runner = runner
    rig.fails("up", None, "exit 3")
    uid = rig.live("Job")["metadata"]["uid"]
    assert rig.live("Job")["status"]["conditions"][0]["type"] == "Failed"
    assert rig.state["obj"].init_errors
    if replace_unready:
        again = rig.ok()
        step = again.of("obj")
        assert (step.op, step.how) == ("replace", "delete-before-replace")
        assert step.reasons == ("pulumi.com/replaceUnready: the Job is not complete",)
        assert rig.live("Job")["metadata"]["uid"] != uid
        assert rig.live("Job")["status"]["conditions"][0]["type"] == "Complete"
    else:
        again = rig.fails("up", None, "exit 3")  # the same Job, still failed: awaited again, fails again
        assert again.of("obj").op == "update"
        assert rig.live("Job")["metadata"]["uid"] == uid


# ------------------------------------------------------------------------------------------------ provider changes

PROVIDER = """
provider = None
if cfg.get("provider") == "explicit":
    provider = k8s.Provider("k", kubeconfig=cfg.get("kubeconfig"), cluster_identifier=cfg.get("cid"))
opts = ResourceOptions(provider=provider)
ns = k8s.core.v1.Namespace("ns", metadata={"name": "app"}, opts=opts)
k8s.core.v1.ConfigMap("obj", metadata={"name": "settings", "namespace": ns.metadata.name}, data={"a": "1"}, opts=opts)
"""


def _rotated(cluster: Cluster) -> str:
    """The same cluster's kubeconfig with a new CA: another active cluster to pulumi-kubernetes."""
    return kubeconfig_for(cluster).replace("{server:", "{certificate-authority-data: bmV3, server:")


def test_default_to_an_explicit_ambient_provider_moves_the_objects(tmp_path: Path) -> None:
    rig = Rig(tmp_path, PROVIDER)
    rig.ok()
    log = list(rig.cluster.log)
    up = rig.ok(config={"p:provider": "explicit"})
    assert up.ops() == [("create", "k"), ("delete", DEFAULT)]
    assert rig.cluster.log == log
    assert rig.state["obj"].provider_urn.endswith("::k")


@pytest.mark.parametrize(
    ("before", "after", "provider_step"),
    [
        ({}, {"kubeconfig": "rotated"}, ("replace", "active cluster changed")),
        ({"cid": "site"}, {"kubeconfig": "rotated", "cid": "site"}, ("update", "")),
        ({"cid": "site"}, {"cid": "other"}, ("replace", "clusterIdentifier changed")),
    ],
    ids=["cluster-changed", "same-identifier", "identifier-changed"],
)
def test_an_explicit_provider_change(tmp_path: Path, before: dict, after: dict, provider_step: tuple) -> None:
    rig = Rig(tmp_path, PROVIDER, provider="explicit", **before)
    rig.config["p:kubeconfig"] = kubeconfig_for(rig.cluster)
    rig.ok()
    log = list(rig.cluster.log)
    change = {f"p:{k}": _rotated(rig.cluster) if v == "rotated" else v for k, v in after.items()}
    result = rig.run(config=change)
    step = result.of("k")
    assert step.op == provider_step[0], step.line()
    assert provider_step[1] in " ".join(step.reasons), step.line()
    if step.op == "update":
        assert result.error is None
        assert result.ops() == [("update", "k")]
        assert rig.cluster.log == log
    else:  # every object replaced create-first: the same cluster already has them
        assert _step(result, "ns") == ("replace", "create-before-delete")
        assert result.of("ns").reasons[0].startswith("provider k -> k:")
        assert result.error is not None
        assert "already exists" in result.error
        assert rig.cluster.log == log


def test_a_provider_moved_to_another_cluster_recreates_there_and_deletes_here(tmp_path: Path) -> None:
    rig = Rig(tmp_path, PROVIDER, provider="explicit")
    rig.config["p:kubeconfig"] = kubeconfig_for(rig.cluster)
    rig.ok()
    up = rig.ok(config={"p:kubeconfig": kubeconfig_for(rig.other)})
    assert [_step(up, n) for n in ("k", "ns", "obj")] == [("replace", "create-before-delete")] * 3
    assert rig.other.find("ConfigMap", "settings", "app") is not None
    assert rig.cluster.find("ConfigMap", "settings", "app") is None
    assert rig.cluster.find("Namespace", "app") is None


# ------------------------------------------------------------------------------------------------ delete order

ORDER = """
import pulumi_random as random

k = k8s.Provider("k")
comp = pulumi.ComponentResource("test:index:Group", "comp")
ns = k8s.core.v1.Namespace("ns", metadata={"name": "app"}, opts=ResourceOptions(provider=k))
k8s.core.v1.ConfigMap("obj", metadata={"name": "settings", "namespace": "app"}, data={"a": "1"},
                      opts=ResourceOptions(provider=k, depends_on=[ns], parent=comp))
random.RandomBytes("rnd", length=4)
"""


def test_destroy_deletes_dependents_first_and_a_waves_kubernetes_objects_first(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ORDER)
    rig.ok()
    destroy = rig.ok("destroy")
    order = [s.name for s in destroy.steps]
    assert all(s.op == "delete" for s in destroy.steps)
    assert len(order) == len(set(order)) == 6
    position = order.index
    assert position("obj") < position("ns") < position("k")  # depends_on, then the provider last
    assert position("obj") < position("comp")  # a child before its parent
    assert position("obj") < position("rnd")  # one wave: the Kubernetes object first
    assert position("k") == len(order) - 1
    assert list(rig.cluster.object_keys()) == []
    assert rig.state == {}


# ------------------------------------------------------------------------------------ ignoreChanges, replaceOnChanges


@pytest.mark.parametrize(
    ("ignore", "change", "path"),
    [(["data"], {"p:value": "2"}, "data"), (["metadata.labels"], {"p:tier": "b"}, "metadata")],
)
def test_ignore_changes_keeps_the_old_value(tmp_path: Path, ignore: list, change: dict, path: str) -> None:
    rig = Rig(tmp_path, OBJECT, ignore=json.dumps(ignore))
    rig.ok()
    before = rig.live()[path]
    log = list(rig.cluster.log)
    assert _step(rig.ok(config=change)) == ("same", "")
    assert rig.live()[path] == before
    assert rig.cluster.log == log
    assert rig.state["obj"].inputs[path] == {k: v for k, v in before.items() if k != "uid"}


@pytest.mark.parametrize(
    ("extra", "how", "error"),
    [
        ({}, "create-before-delete", "already exists"),
        ({"p:name": "auto"}, "create-before-delete", None),
        ({"p:dbr": "true"}, "delete-before-replace", None),
    ],
    ids=["named", "autonamed", "delete-before-replace-option"],
)
def test_replace_on_changes_is_an_engine_replace(tmp_path: Path, extra: dict, how: str, error: str | None) -> None:
    rig = Rig(tmp_path, OBJECT, roc=json.dumps(["data"]))
    rig.config.update({"kubernetes:enableConfigMapMutable": "true", **extra})
    rig.ok()
    result = rig.run(config={"p:value": "2"})
    step = result.of("obj")
    assert (step.op, step.how, step.reasons) == ("replace", how, ("replaceOnChanges: data.a",))
    assert (result.error is None) if error is None else (error in str(result.error)), result.text()


# ------------------------------------------------------------------------------------------------ preview

PREVIEW = """
ns = k8s.core.v1.Namespace("ns", metadata={"name": "app"})
meta = {"name": "settings", "namespace": ns.metadata.name}
cm = k8s.core.v1.ConfigMap("obj", metadata=meta, data={"a": cfg.get("value") or "1"})
svc = k8s.core.v1.Service("svc", metadata={**meta, "name": "web"}, spec={"ports": [{"port": 80}]})
pulumi.export("id", cm.id)
pulumi.export("data", cm.data)
pulumi.export("status", svc.status)
"""


def test_preview_writes_nothing_and_leaves_computed_outputs_unknown(tmp_path: Path) -> None:
    rig = Rig(tmp_path, PREVIEW)
    rig.config["kubernetes:enableConfigMapMutable"] = "true"
    preview = rig.ok("preview")
    assert sorted(preview.ops()) == [("create", DEFAULT), ("create", "ns"), ("create", "obj"), ("create", "svc")]
    assert preview.outputs == {"id": UNKNOWN, "data": {"a": "1"}, "status": UNKNOWN}
    assert rig.cluster.log == []
    assert rig.state == {}
    up = rig.ok()
    assert up.outputs["id"] == "app/settings"
    assert up.outputs["status"] is None
    log = list(rig.cluster.log)
    changed = rig.ok("preview", {"p:value": "2"})
    assert changed.ops() == [("update", "obj")]
    assert rig.cluster.log == log
    assert rig.live()["data"] == {"a": "1"}
    assert rig.state["obj"].inputs["data"] == {"a": "1"}


# ------------------------------------------------------------------------------------------------ dynamic providers

DYNAMIC = """
from tests.support.engine_sample_provider import Sample

sample = Sample("sample", log=cfg.require("log"), size=cfg.get("size") or "1", explode=cfg.get("explode") or "")
pulumi.export("serial", sample.serial)
"""


def test_a_dynamic_provider_through_the_real_host(tmp_path: Path) -> None:
    calls = tmp_path / "calls.log"
    rig = Rig(tmp_path, DYNAMIC, log=str(calls))

    def run(kind: str, **config: str) -> tuple[RunResult, list[str]]:
        calls.write_text("")
        return rig.ok(kind, {f"p:{k}": v for k, v in config.items()}), calls.read_text().splitlines()

    preview, seen = run("preview")
    assert _step(preview, "sample") == ("create", "")
    assert seen == ["check 1"]
    assert preview.outputs["serial"] == UNKNOWN
    up, seen = run("up")
    assert seen == ["check 1", "create 1"]
    assert isinstance(up.outputs["serial"], str)
    preview, seen = run("preview", size="2")
    step = preview.of("sample")
    assert (step.op, step.how, step.reasons) == ("replace", "create-before-delete", ("size: its provider replaces",))
    assert seen == ["check 2", "diff 2", "check 2"]  # the engine checks a replacement again, without olds
    replaced, seen = run("up", size="2")
    assert seen == ["check 2", "diff 2", "check 2", "create 2", "delete 1"]
    assert replaced.outputs["serial"] != up.outputs["serial"]


def test_an_exception_in_a_dynamic_create_fails_the_up(tmp_path: Path) -> None:
    rig = Rig(tmp_path, DYNAMIC, log=str(tmp_path / "calls.log"), explode="boom")
    failed = rig.fails("up", None, "create exploded: boom")
    assert _step(failed, "sample") == ("create", "")
    assert "sample" not in rig.state


# ------------------------------------------------------------------------------------------------ DiffConfig

A = kubeconfig_for(Cluster("a", server="https://10.0.0.1:6443"))
B = kubeconfig_for(Cluster("b", server="https://10.0.0.2:6443"))
TWO = (
    "apiVersion: v1\nkind: Config\ncurrent-context: one\n"
    "clusters:\n- {name: a, cluster: {server: 'https://10.0.0.1:6443'}}\n"
    "- {name: b, cluster: {server: 'https://10.0.0.2:6443'}}\n"
    "contexts:\n- {name: one, context: {cluster: a, user: u}}\n- {name: two, context: {cluster: b, user: u}}\n"
    "users:\n- {name: u, user: {token: t}}\n"
)


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ({"kubeconfig": A}, {"kubeconfig": A}, None),
        ({}, {"kubeconfig": B}, None),  # ambient (an empty config) to explicit: never a replace
        ({"kubeconfig": A}, {}, None),
        ({"context": "one"}, {"context": "two"}, None),  # no kubeconfig: no active cluster to compare
        ({"kubeconfig": A}, {"kubeconfig": B}, "active cluster changed"),
        ({"kubeconfig": TWO}, {"kubeconfig": TWO, "context": "two"}, "active cluster changed"),
        ({"kubeconfig": TWO}, {"kubeconfig": TWO, "cluster": "b"}, "active cluster changed"),
        ({"kubeconfig": TWO}, {"kubeconfig": TWO, "context": "missing"}, None),
        ({"kubeconfig": A}, {"kubeconfig": sdk.UNKNOWN}, "kubeconfig is unknown"),
        ({}, {"context": sdk.UNKNOWN}, "context is unknown"),
        ({"kubeconfig": A, "clusterIdentifier": "x"}, {"kubeconfig": B, "clusterIdentifier": "x"}, None),
        ({"kubeconfig": A, "clusterIdentifier": "x"}, {"kubeconfig": sdk.UNKNOWN, "clusterIdentifier": "x"}, None),
        ({"clusterIdentifier": "x"}, {"clusterIdentifier": "y"}, "clusterIdentifier changed"),
        ({"kubeconfig": A}, {"kubeconfig": B, "clusterIdentifier": "x"}, "active cluster changed"),  # added
        ({}, {"renderYamlToDirectory": "out"}, "renderYamlToDirectory changed"),
        ({"kubeconfig": A}, {"kubeconfig": A, "enableConfigMapMutable": "true", "namespace": "x"}, None),
    ],
)
def test_provider_replacement(old: dict, new: dict, why: str | None) -> None:
    result = provider_replacement(old, new)
    assert (result is None) if why is None else (why in str(result)), result


# ------------------------------------------------------------------------------------------------ the public URL


def _headscale_site(name: str, server: str, *, image: str, replicas: int) -> Cluster:
    """A cluster with what `World.serves` looks at: Headscale's Deployment and the public HTTPRoute."""
    cluster = Cluster(name, server=server)
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "headscale"}})
    containers = [{"name": "litestream", "image": "litestream:0.5.17"}, {"name": "headscale", "image": image}]
    cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "headscale", "namespace": "headscale"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": containers}}},
        }
    )
    route = {"name": PUBLIC_NAME, "namespace": "headscale"}
    cluster.create({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": route})
    return cluster


def _headscale_spec(cluster: Cluster) -> dict[str, Any]:
    key = next(k for k in cluster.objects if k[1] == "Deployment")
    return cluster.objects[key].body["spec"]


def test_the_public_url_answers_as_the_site_that_serves_it() -> None:
    """World.serves/sync_headscale: the release follows the serving Deployment's image; nothing serving is a 503;
    the site DNS points at lost is a refused connection (and its API server times out); DNS moves to the site that
    serves next, and stays there when the lost site returns still running Headscale."""
    hydra = _headscale_site("hydra", "https://10.10.0.10:6443", image="ghcr.io/juanfont/headscale:0.28.0", replicas=1)
    cosmos = _headscale_site("cosmos", "https://10.20.0.10:6443", image="ghcr.io/juanfont/headscale:0.28.0", replicas=0)
    fake = FakeHeadscale(version="0.28.0").start()
    world = World(clusters={"hydra": hydra, "cosmos": cosmos}, headscale=fake, serves=_headscale_serves)
    world.dns_site = "hydra"

    def answer() -> int | str:
        world.sync_headscale()
        try:
            return requests.get(f"{fake.url}/version", timeout=2).json().get("version") or 503
        except ValueError:
            return 503
        except requests.ConnectionError:
            return "refused"

    try:
        url = fake.url
        fake.add_user("alice")
        assert (answer(), world.serves(world)) == ("v0.28.0", ("hydra", "0.28.0"))
        _headscale_spec(hydra)["template"]["spec"]["containers"][1]["image"] = (
            "ghcr.io/juanfont/headscale:v0.29.2@sha256:" + "0" * 64
        )
        assert (answer(), world.serves(world)) == ("v0.29.2", ("hydra", "0.29.2"))
        assert [u.name for u in fake.users.values()] == ["alice"]  # the same registry, upgraded
        hydra.unready.add("headscale")
        assert (answer(), world.serves(world)) == (503, None)
        hydra.unready.clear()
        _headscale_spec(hydra)["replicas"] = 0
        assert answer() == 503  # the gateway answers, without an upstream
        _headscale_spec(hydra)["replicas"] = 1
        world.lost.add("hydra")
        assert (answer(), world.serves(world), fake.dark) == ("refused", None, True)
        with pytest.raises(StepError, match="i/o timeout"):
            world.cluster_of(kubeconfig_for(hydra))
        _headscale_spec(cosmos)["replicas"] = 1  # cosmos promoted (on 0.28.0 still: the fake follows its image)
        assert (answer(), world.serves(world), world.dns_site) == ("v0.28.0", ("cosmos", "0.28.0"), "cosmos")
        assert fake.url == url
        world.lost.discard("hydra")  # back, its Headscale still running: DNS points at cosmos
        assert (answer(), world.serves(world)) == ("v0.28.0", ("cosmos", "0.28.0"))
        _headscale_spec(cosmos)["replicas"] = 0
        assert (answer(), world.dns_site) == ("v0.29.2", "hydra")
    finally:
        fake.stop()


# ------------------------------------------------------------------------------------------------------- aliases

#: A StatefulSet-like rename: the object "old" (Pulumi name "before") becomes "new" (Pulumi name "after"), which
#: names "before" as an alias; ``p:dbr`` replaces delete-first, ``p:twice`` adds a second claimant of the alias.
RENAMED = """
ns = k8s.core.v1.Namespace("ns", metadata={"name": "app"})
moved = cfg.get_bool("moved") or False
object_name = cfg.get("object") or "old"
options = ResourceOptions(
    aliases=[pulumi.Alias(name="before")] if moved else None, delete_before_replace=cfg.get_bool("dbr")
)
k8s.core.v1.ConfigMap("after" if moved else "before", opts=options, data={"a": "1"},
                      metadata={"name": object_name, "namespace": ns.metadata.name})
if cfg.get_bool("twice"):
    k8s.core.v1.ConfigMap("also", opts=ResourceOptions(aliases=[pulumi.Alias(name="before")]), data={"a": "1"},
                          metadata={"name": "other", "namespace": ns.metadata.name})
"""


def test_an_alias_takes_the_old_state_over_instead_of_create_and_delete(tmp_path: Path) -> None:
    rig = Rig(tmp_path, RENAMED)
    rig.ok()
    uid = rig.live(name="old")["metadata"]["uid"]
    same = rig.ok(config={"p:moved": "true"})
    assert [(s.op, s.name) for s in same.steps if s.name in ("before", "after")] == [("same", "after")]
    assert "after" in rig.state
    assert "before" not in rig.state
    assert rig.live(name="old")["metadata"]["uid"] == uid, "nothing was written"


def test_an_aliased_rename_of_the_object_is_a_delete_first_replace(tmp_path: Path) -> None:
    rig = Rig(tmp_path, RENAMED)
    rig.ok()
    moved = rig.ok(config={"p:moved": "true", "p:object": "new", "p:dbr": "true"})
    (step,) = [s for s in moved.steps if s.name in ("before", "after")]
    assert (step.op, step.name, step.how) == ("replace", "after", "delete-before-replace")
    log = [line for line in rig.cluster.log if "configmaps" in line]
    assert log[-2:] == ["delete configmaps \"old\" in namespace 'app'", "create configmaps \"new\" in namespace 'app'"]
    assert rig.cluster.find("ConfigMap", "old", "app") is None
    assert "before" not in rig.state


def test_without_the_alias_the_rename_is_a_create_and_a_delete(tmp_path: Path) -> None:
    """What the alias prevents: the old resource deleted at the end, after the new one was created."""
    renamed = Rig(tmp_path, RENAMED.replace("if moved else None", "if False else None"))
    renamed.ok()
    both = renamed.ok(config={"p:moved": "true", "p:object": "new"})
    assert [(s.op, s.name) for s in both.steps if s.name in ("before", "after")] == [
        ("create", "after"),
        ("delete", "before"),
    ]


def test_two_resources_cannot_take_one_old_state_over(tmp_path: Path) -> None:
    rig = Rig(tmp_path, RENAMED)
    rig.ok()
    rig.fails("up", {"p:moved": "true", "p:twice": "true"}, "already the old state of")
