"""Pod references: volumes and their keys, env, mounts and subPaths, probes, pull secrets, the service account,
in the pod template of every workload kind.
"""

from __future__ import annotations

import pytest

from tests.support.wiring_objects import (
    NS,
    check,
    claim,
    config_map,
    container,
    deployment,
    meta,
    mounted,
    only,
    pod_spec,
    secret,
    with_template,
)
from tools.wiring import External


@pytest.mark.parametrize(
    ("kind", "prefix"),
    [
        ("Pod", "spec"),
        ("Deployment", "spec.template.spec"),
        ("StatefulSet", "spec.template.spec"),
        ("DaemonSet", "spec.template.spec"),
        ("ReplicaSet", "spec.template.spec"),
        ("Job", "spec.template.spec"),
        ("CronJob", "spec.jobTemplate.spec.template.spec"),
    ],
)
def test_every_workload_kind_has_its_pod_template_checked(kind: str, prefix: str) -> None:
    spec = pod_spec(container(envFrom=[{"secretRef": {"name": "env"}}]))
    finding = only(check(with_template(kind, spec)))
    assert (finding.obj, finding.path) == (f"{kind}/app/w", f"{prefix}.containers[0].envFrom[0].secretRef")
    assert check(with_template(kind, spec), secret("env")) == []


def test_secret_volume() -> None:
    workload = mounted({"name": "s", "secret": {"secretName": "creds"}})
    assert "FailedMount" in only(check(workload)).message
    assert check(workload, secret("creds", "a")) == []


def test_config_map_volume() -> None:
    workload = mounted({"name": "c", "configMap": {"name": "conf"}})
    assert only(check(workload)).path == "spec.template.spec.volumes[0].configMap"
    assert check(workload, config_map("conf", "a")) == []


def test_projected_sources() -> None:
    sources = [{"secret": {"name": "s"}}, {"configMap": {"name": "c"}}, {"serviceAccountToken": {"path": "token"}}]
    workload = mounted({"name": "p", "projected": {"sources": sources}})
    assert [f.path for f in check(workload)] == [
        "spec.template.spec.volumes[0].projected.sources[0].secret",
        "spec.template.spec.volumes[0].projected.sources[1].configMap",
    ]
    assert check(workload, secret("s"), config_map("c")) == []


def test_volume_items_keys_must_exist() -> None:
    workload = mounted({"name": "s", "secret": {"secretName": "id", "items": [{"key": "noise.key", "path": "n"}]}})
    finding = only(check(workload, secret("id", "derp.key", string=True)))
    assert finding.path == "spec.template.spec.volumes[0].secret.items[0].key"
    assert "key 'noise.key' is not in Secret 'id' (it holds: derp.key)" in finding.message
    assert check(workload, secret("id", "noise.key", string=True)) == []


@pytest.mark.parametrize(("field", "kind"), [("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")])
def test_env_key_refs(field: str, kind: str) -> None:
    make = secret if kind == "Secret" else config_map
    env = [{"name": "A", "value": "x"}, {"name": "B", "valueFrom": {field: {"name": "src", "key": "b"}}}]
    workload = deployment(pod_spec(container(env=env)))
    finding = only(check(workload))
    assert finding.path == f"spec.template.spec.containers[0].env[1].valueFrom.{field}"
    assert "CreateContainerConfigError" in finding.message
    assert only(check(workload, make("src", "a"))).path.endswith(f"{field}.key")
    assert check(workload, make("src", "b")) == []


def test_env_from() -> None:
    workload = deployment(pod_spec(container(envFrom=[{"configMapRef": {"name": "c"}}, {"secretRef": {"name": "s"}}])))
    assert len(check(workload)) == 2
    assert check(workload, config_map("c"), secret("s")) == []


def test_init_and_ephemeral_containers_are_checked() -> None:
    spec = pod_spec(
        initContainers=[container("init", envFrom=[{"secretRef": {"name": "a"}}])],
        ephemeralContainers=[container("debug", envFrom=[{"secretRef": {"name": "b"}}])],
    )
    assert [f.path for f in check(deployment(spec))] == [
        "spec.template.spec.initContainers[0].envFrom[0].secretRef",
        "spec.template.spec.ephemeralContainers[0].envFrom[0].secretRef",
    ]
    assert check(deployment(spec), secret("a"), secret("b")) == []


def test_image_pull_secrets() -> None:
    workload = deployment(pod_spec(imagePullSecrets=[{"name": "registry"}]))
    assert "ImagePullBackOff" in only(check(workload)).message
    assert check(workload, secret("registry")) == []


def test_claim_volume() -> None:
    workload = mounted({"name": "d", "persistentVolumeClaim": {"claimName": "data"}})
    assert check(workload, claim("data")) == []
    external = External(kind="PersistentVolumeClaim", namespace=NS, name="data", created_by="the user")
    assert check(workload, externals=[external]) == []
    assert len(check(workload, claim("data", ns="other"))) == 1


def test_service_account() -> None:
    workload = deployment(pod_spec(serviceAccountName="runner"))
    assert "ServiceAccount admission" in only(check(workload)).message
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("runner")}
    assert check(workload, account) == []
    assert check(deployment(pod_spec(serviceAccountName="default"))) == []


def test_volume_mount_must_name_a_volume() -> None:
    workload = deployment(pod_spec(container(volumeMounts=[{"name": "nope", "mountPath": "/x"}])))
    assert "API server would reject" in only(check(workload)).message
    assert check(mounted({"name": "tmp", "emptyDir": {}})) == []


def test_statefulset_claim_templates_are_mountable() -> None:
    sts = with_template("StatefulSet", pod_spec(container(volumeMounts=[{"name": "data", "mountPath": "/d"}])))
    sts["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "data"}}]
    assert check(sts) == []
    del sts["spec"]["volumeClaimTemplates"]
    assert len(check(sts)) == 1


def test_unused_volume() -> None:
    spec = pod_spec(volumes=[{"name": "tmp", "emptyDir": {}}])
    assert "mounted by no container" in only(check(deployment(spec))).message
    assert check(mounted({"name": "tmp", "emptyDir": {}})) == []


def test_sub_path_with_items_must_be_an_item_path() -> None:
    volume = {"name": "c", "configMap": {"name": "conf", "items": [{"key": "config.yaml", "path": "etc/config.yaml"}]}}
    assert (
        "CreateContainerConfigError"
        in only(check(mounted(volume, subPath="config.yaml"), config_map("conf", "config.yaml"))).message
    )
    assert check(mounted(volume, subPath="etc/config.yaml"), config_map("conf", "config.yaml")) == []
    assert check(mounted(volume, subPath="etc"), config_map("conf", "config.yaml")) == []


def test_sub_path_without_items_must_be_a_key() -> None:
    volume = {"name": "c", "configMap": {"name": "conf"}}
    assert only(check(mounted(volume, subPath="config.yml"), config_map("conf", "config.yaml"))).path.endswith(
        ".subPath"
    )
    assert check(mounted(volume, subPath="config.yaml"), config_map("conf", "config.yaml")) == []
    # an object outside the set: its keys are not known (only the missing object itself is reported)
    assert len(check(mounted(volume, subPath="anything"))) == 1


@pytest.mark.parametrize("probe", ["livenessProbe", "readinessProbe", "startupProbe"])
def test_probe_named_port_must_be_a_port_of_the_container(probe: str) -> None:
    ports = [{"name": "http", "containerPort": 8080}]
    broken = deployment(pod_spec(container(ports=ports, **{probe: {"httpGet": {"path": "/", "port": "metrics"}}})))
    finding = only(check(broken))
    assert finding.path == f"spec.template.spec.containers[0].{probe}.httpGet.port"
    assert "it names: http" in finding.message
    sound = deployment(pod_spec(container(ports=ports, **{probe: {"tcpSocket": {"port": "http"}}})))
    numeric = deployment(pod_spec(container(ports=ports, **{probe: {"tcpSocket": {"port": 9999}}})))
    assert check(sound) == check(numeric) == []


def test_probe_port_of_another_container_does_not_count() -> None:
    other = container("side", ports=[{"name": "admin", "containerPort": 9000}])
    main_c = container(readinessProbe={"httpGet": {"port": "admin"}})
    assert len(check(deployment(pod_spec(main_c, other)))) == 1
