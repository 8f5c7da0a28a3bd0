"""The wiring check: every rule fires on a broken reference and stays quiet on a sound one.

Objects are small dicts built by hand; one test runs the real program's plans and only reports what it finds.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tools.wiring import External, Finding, OptionalRef, check_wiring, main, selector_matches

NS = "app"
LABELS = {"app": "web"}


# ------------------------------------------------------------------------------------------------ builders


def meta(name: str, ns: str | None = NS, **extra: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, **extra}
    if ns is not None:
        m["namespace"] = ns
    return m


def container(name: str = "main", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "example/app:1", **fields}


def pod_spec(*containers: dict[str, Any], volumes: list | None = None, **fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers) or [container()], **fields}
    if volumes is not None:
        spec["volumes"] = volumes
    return spec


def deployment(spec: dict[str, Any] | None = None, name: str = "web", ns: str | None = NS, labels=None) -> dict:
    labels = labels or LABELS
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(name, ns),
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec or pod_spec()},
        },
    }


def secret(name: str, *keys: str, ns: str = NS, string: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(name, ns),
        ("stringData" if string else "data"): dict.fromkeys(keys, "eA=="),
    }


def config_map(name: str, *keys: str, ns: str = NS) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name, ns), "data": dict.fromkeys(keys, "x")}


def claim(name: str, ns: str = NS, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(name, ns), "spec": spec}


def service(name: str = "web", ports=None, selector=None, ns: str = NS, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(name, ns),
        "spec": {
            "selector": LABELS if selector is None else selector,
            "ports": ports if ports is not None else [{"name": "http", "port": 80, "targetPort": "http"}],
            **spec,
        },
    }


def web(**fields: Any) -> dict[str, Any]:
    """A deployment whose one container declares port `http` 8080/TCP."""
    return deployment(pod_spec(container(ports=[{"name": "http", "containerPort": 8080}], **fields)))


def mounted(volume: dict[str, Any], **mount: Any) -> dict[str, Any]:
    """A deployment mounting one volume at /v."""
    c = container(volumeMounts=[{"name": volume["name"], "mountPath": "/v", **mount}])
    return deployment(pod_spec(c, volumes=[volume]))


def check(*objects: dict[str, Any], **kwargs: Any) -> list[Finding]:
    return check_wiring([copy.deepcopy(o) for o in objects], **kwargs)


def texts(findings: list[Finding]) -> list[str]:
    return [str(f) for f in findings]


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, texts(findings)
    return findings[0]


# ---------------------------------------------------------------------------------------- Finding and API


def test_finding_reads_as_object_path_message() -> None:
    finding = only(check(mounted({"name": "data", "persistentVolumeClaim": {"claimName": "litestream-backup"}})))
    assert finding.obj == "Deployment/app/web"
    assert finding.path == "spec.template.spec.volumes[0].persistentVolumeClaim"
    assert str(finding) == (
        "Deployment/app/web: spec.template.spec.volumes[0].persistentVolumeClaim: claim 'litestream-backup' is not "
        "rendered and not a documented external object: the pod would stay Pending (FailedMount / unbound claim)"
    )


def test_a_sound_set_has_no_findings() -> None:
    assert check(web(), service(), secret("s", "k"), config_map("c", "k")) == []


def test_inputs_are_not_modified() -> None:
    objects = [mounted({"name": "c", "configMap": {"name": "missing"}})]
    before = copy.deepcopy(objects)
    check_wiring(objects)
    assert objects == before


def test_unknown_values_are_skipped_not_reported() -> None:
    """Names only known after a deployment (Pulumi's unknown markers) cannot be checked offline."""
    marker = object()
    assert check(mounted({"name": "c", "configMap": {"name": marker}})) == []


def test_external_that_the_set_renders_or_makes_is_reported() -> None:
    rendered = External(kind="Secret", namespace=NS, name="s", created_by="the user")
    finding = only(check(secret("s"), externals=[rendered]))
    assert (finding.obj, finding.path, "stale" in finding.message) == ("Secret/app/s", "metadata.name", True)
    made = External(kind="Secret", namespace=NS, name="public-tls", created_by="the user")
    finding = only(check(certificate(), externals=[made]))
    assert (finding.obj, finding.path) == ("Certificate/app/public", "spec.secretName")
    assert "two owners" in finding.message
    elsewhere = External(kind="Secret", namespace="other", name="s", created_by="the user")
    assert check(secret("s"), externals=[elsewhere]) == []


# -------------------------------------------------------------------------------------- pod templates


def _with_template(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    template = {"metadata": {"labels": LABELS}, "spec": spec}
    body: dict[str, Any] = {
        "Pod": {"metadata": {**meta("w"), "labels": LABELS}, "spec": spec},
        "CronJob": {
            "metadata": meta("w"),
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}},
        },
    }.get(kind, {"metadata": meta("w"), "spec": {"template": template}})
    return {"apiVersion": "v1" if kind == "Pod" else "apps/v1", "kind": kind, **body}


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
    finding = only(check(_with_template(kind, spec)))
    assert (finding.obj, finding.path) == (f"{kind}/app/w", f"{prefix}.containers[0].envFrom[0].secretRef")
    assert check(_with_template(kind, spec), secret("env")) == []


def test_missing_namespace_means_default() -> None:
    workload = deployment(pod_spec(container(envFrom=[{"configMapRef": {"name": "c"}}])), ns=None)
    assert only(check(workload, config_map("c", ns=NS))).obj == "Deployment/default/web"
    assert "rendered in namespace 'app'" in only(check(workload, config_map("c", ns=NS))).message
    assert check(workload, config_map("c", ns="default")) == []


# -------------------------------------------------------------------------------- Secrets and ConfigMaps


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


def test_external_keys_are_checked_only_when_listed() -> None:
    workload = mounted({"name": "s", "secret": {"secretName": "ext", "items": [{"key": "k", "path": "k"}]}})
    documented = External(kind="Secret", namespace=NS, name="ext", keys=frozenset({"other"}), created_by="the user")
    assert "created by the user" in only(check(workload, externals=[documented])).message
    unlisted = External(kind="Secret", namespace=NS, name="ext", created_by="the user")
    assert check(workload, externals=[unlisted]) == []
    with_key = External(kind="Secret", namespace=NS, name="ext", keys=frozenset({"k"}), created_by="the user")
    assert check(workload, externals=[with_key]) == []


def test_external_in_another_namespace_does_not_count() -> None:
    workload = mounted({"name": "s", "secret": {"secretName": "ext"}})
    elsewhere = External(kind="Secret", namespace="other", name="ext", created_by="the user")
    assert len(check(workload, externals=[elsewhere])) == 1


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


# ---------------------------------------------------------------------------------------- optional refs


OPTIONAL_ENV = [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "authkey", "key": "k", "optional": True}}}]
DECLARED = OptionalRef(namespace=NS, workload="Deployment/web", name="authkey", absence_shown_by="log line")


def test_undeclared_optional_reference_is_a_finding_even_when_present() -> None:
    workload = deployment(pod_spec(container(env=OPTIONAL_ENV)))
    assert "not declared: a pod would run silently without it" in only(check(workload, secret("authkey", "k"))).message
    assert "not rendered" in only(check(workload)).message


def test_declared_optional_reference_may_be_missing() -> None:
    workload = deployment(pod_spec(container(env=OPTIONAL_ENV)))
    assert check(workload, optional_refs=[DECLARED]) == []
    assert check(workload, secret("authkey", "k"), optional_refs=[DECLARED]) == []


def test_declared_optional_reference_still_needs_its_key_when_present() -> None:
    workload = deployment(pod_spec(container(env=OPTIONAL_ENV)))
    assert only(check(workload, secret("authkey", "other"), optional_refs=[DECLARED])).path.endswith(".key")


def test_a_key_a_running_pod_writes_later_may_be_missing_from_an_optional_source() -> None:
    """The kubelet skips an optional volume's missing item (pkg/volume/configmap: `if optional { continue }`): a key
    declared as written at runtime (the witness's recorded position) is not a finding; any other missing key is."""
    items = [{"key": "served", "path": "served"}, {"key": "position", "path": "position"}]
    workload = mounted({"name": "w", "configMap": {"name": "witness", "optional": True, "items": items}})
    plain = OptionalRef(namespace=NS, workload="Deployment/web", name="witness", absence_shown_by="log line")
    later = OptionalRef(
        namespace=NS,
        workload="Deployment/web",
        name="witness",
        absence_shown_by="log line",
        runtime_keys=frozenset({"position"}),
    )
    rendered = config_map("witness", "served")
    assert only(check(workload, rendered, optional_refs=[plain])).path.endswith("items[1].key")
    assert check(workload, rendered, optional_refs=[later]) == []
    assert only(check(workload, config_map("witness", "other"), optional_refs=[later])).path.endswith("items[0].key")


def test_optional_declaration_is_per_workload_and_namespace() -> None:
    workload = deployment(pod_spec(container(env=OPTIONAL_ENV)))
    other = OptionalRef(namespace=NS, workload="StatefulSet/web", name="authkey", absence_shown_by="x")
    assert len(check(workload, optional_refs=[other])) == 1


def test_optional_volume() -> None:
    workload = mounted({"name": "s", "secret": {"secretName": "authkey", "optional": True}})
    assert len(check(workload)) == 1
    assert check(workload, optional_refs=[DECLARED]) == []


# -------------------------------------------------------------------------------------- claims and volumes


def test_claim_volume() -> None:
    workload = mounted({"name": "d", "persistentVolumeClaim": {"claimName": "data"}})
    assert check(workload, claim("data")) == []
    external = External(kind="PersistentVolumeClaim", namespace=NS, name="data", created_by="the user")
    assert check(workload, externals=[external]) == []
    assert len(check(workload, claim("data", ns="other"))) == 1


def _pv(name: str = "pv1", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta(name, None), "spec": spec}


def test_claim_volume_name_must_be_a_persistent_volume() -> None:
    assert "stay Pending" in only(check(claim("data", volumeName="pv1"))).message
    assert check(claim("data", volumeName="pv1"), _pv()) == []
    external = External(kind="PersistentVolume", namespace=None, name="pv1", created_by="the NFS admin")
    assert check(claim("data", volumeName="pv1"), externals=[external]) == []


def test_persistent_volume_claim_ref_must_be_this_claim() -> None:
    reserved = _pv(claimRef={"namespace": NS, "name": "other"})
    assert "reserved (claimRef)" in only(check(claim("data", volumeName="pv1"), reserved)).message
    assert check(claim("data", volumeName="pv1"), _pv(claimRef={"namespace": NS, "name": "data"})) == []


def test_storage_class_must_agree_when_both_set() -> None:
    pvc = claim("data", volumeName="pv1", storageClassName="fast")
    assert only(check(pvc, _pv(storageClassName=""))).path == "spec.storageClassName"
    assert check(pvc, _pv(storageClassName="fast")) == []
    assert check(pvc, _pv()) == []


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
    sts = _with_template("StatefulSet", pod_spec(container(volumeMounts=[{"name": "data", "mountPath": "/d"}])))
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


# ----------------------------------------------------------------------------------------------- probes


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


# --------------------------------------------------------------------------------------------- Services


def test_service_selector_must_match_a_pod_template() -> None:
    finding = only(check(web(), service(selector={"app": "api"})))
    assert (finding.path, "no endpoints" in finding.message) == ("spec.selector", True)
    assert check(web(), service()) == []


def test_service_selector_must_not_reach_another_workloads_pods() -> None:
    """A Job's pod labelled like the server (a rehearsal, a backup) would become an endpoint of the server's
    Service: traffic would reach a pod that does not serve."""
    ports = [{"name": "http", "containerPort": 8080}]
    twin = deployment(pod_spec(container(ports=ports)), name="rehearsal")
    finding = only(check(web(), twin, service()))
    assert finding.path == "spec.selector"
    assert "matches the pods of" in finding.message
    assert "rehearsal" in finding.message
    own = deployment(pod_spec(container(ports=ports)), name="rehearsal", labels={"app": "web-rehearsal"})
    assert check(web(), own, service()) == []


def test_service_selector_looks_only_in_its_namespace() -> None:
    assert len(check(web(), service(ns="other"))) == 1


def test_service_named_target_port() -> None:
    broken = service(ports=[{"name": "m", "port": 9090, "targetPort": "metrics"}])
    assert "named 'metrics'" in only(check(web(), broken)).message
    assert check(web(), service()) == []


def test_service_numeric_target_port() -> None:
    broken = service(ports=[{"port": 80, "targetPort": 8081}])
    assert "containerPort 8081/TCP" in only(check(web(), broken)).message
    defaulted = service(ports=[{"port": 8081}])
    assert "defaults to port" in only(check(web(), defaulted)).message
    assert check(web(), service(ports=[{"port": 80, "targetPort": 8080}])) == []


def test_service_port_protocol_must_agree() -> None:
    udp = service(ports=[{"port": 53, "targetPort": 8080, "protocol": "UDP"}])
    assert "8080/UDP" in only(check(web(), udp)).message
    dns = deployment(pod_spec(container(ports=[{"containerPort": 8080, "protocol": "UDP"}])))
    assert check(dns, udp) == []


def test_service_reaches_native_sidecar_ports() -> None:
    sidecar = container("proxy", restartPolicy="Always", ports=[{"name": "proxy", "containerPort": 9000}])
    workload = deployment(pod_spec(initContainers=[sidecar]))
    assert check(workload, service(ports=[{"port": 90, "targetPort": "proxy"}])) == []
    sidecar.pop("restartPolicy")  # a plain init container serves nothing
    assert (
        len(check(deployment(pod_spec(initContainers=[sidecar])), service(ports=[{"port": 90, "targetPort": "proxy"}])))
        == 1
    )


@pytest.mark.parametrize(
    "skipped",
    [
        service(selector={}),
        service(selector={"app": "none"}, type="ExternalName", externalName="example.com"),
        service(ports=[{"name": "none", "port": 1}], clusterIP="None"),
    ],
    ids=["no-selector", "external-name", "headless-numeric"],
)
def test_services_the_rules_do_not_apply_to(skipped: dict[str, Any]) -> None:
    assert check(web(), skipped) == []


def test_headless_service_named_port_is_still_checked() -> None:
    assert len(check(web(), service(ports=[{"port": 1, "targetPort": "nope"}], clusterIP="None"))) == 1


# ---------------------------------------------------------------------------------------------- Ingress


def ingress(service_name: str = "web", port: dict | None = None, tls_secret: str | None = None) -> dict[str, Any]:
    backend = {"service": {"name": service_name, "port": port or {"number": 80}}}
    spec: dict[str, Any] = {
        "rules": [{"host": "a.example.com", "http": {"paths": [{"path": "/", "backend": backend}]}}]
    }
    if tls_secret:
        spec["tls"] = [{"hosts": ["a.example.com"], "secretName": tls_secret}]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta("ing"), "spec": spec}


def test_ingress_backend_service_and_port() -> None:
    path = "spec.rules[0].http.paths[0].backend.service"
    assert only(check(web(), ingress("api"))).path == path
    assert only(check(web(), service(), ingress(port={"number": 8080}))).path == f"{path}.port"
    assert only(check(web(), service(), ingress(port={"name": "https"}))).path == f"{path}.port"
    assert check(web(), service(), ingress()) == []
    assert check(web(), service(), ingress(port={"name": "http"})) == []


def test_ingress_tls_secret() -> None:
    assert "default (untrusted) certificate" in only(check(web(), service(), ingress(tls_secret="tls"))).message
    assert check(web(), service(), ingress(tls_secret="tls"), secret("tls", "tls.crt", "tls.key")) == []
    assert len(check(web(), service(), ingress(tls_secret="tls"), secret("tls", "tls.crt"))) == 1


# ----------------------------------------------------------------------------------- cert-manager


def certificate(secret_name: str = "public-tls", name: str = "public") -> dict[str, Any]:
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": meta(name),
        "spec": {"secretName": secret_name, "issuerRef": {"kind": "ClusterIssuer", "name": "letsencrypt"}},
    }


def test_certificate_provides_its_secret() -> None:
    assert check(web(), service(), ingress(tls_secret="public-tls"), certificate()) == []
    assert len(check(web(), service(), ingress(tls_secret="public-tls"), certificate("other"))) == 1


def test_certificate_secret_also_rendered_is_a_conflict() -> None:
    finding = only(check(certificate(), secret("public-tls", "tls.crt", "tls.key")))
    assert (finding.obj, finding.path) == ("Certificate/app/public", "spec.secretName")
    assert "two owners" in finding.message


# ---------------------------------------------------------------------------------------- Gateway API


def gateway(listeners: list[dict[str, Any]] | None = None, name: str = "gw", ns: str = NS) -> dict[str, Any]:
    default = [
        {
            "name": "https",
            "port": 443,
            "protocol": "HTTPS",
            "hostname": "a.example.com",
            "tls": {"certificateRefs": [{"kind": "Secret", "name": "public-tls"}]},
        },
        {"name": "http", "port": 80, "protocol": "HTTP"},
    ]
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": meta(name, ns),
        "spec": {"gatewayClassName": "cilium", "listeners": default if listeners is None else listeners},
    }


def route(kind: str = "HTTPRoute", parent: dict | None = None, backends=None, ns: str = NS, **spec: Any) -> dict:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": kind,
        "metadata": meta("r", ns),
        "spec": {
            "parentRefs": [parent or {"name": "gw", "sectionName": "https"}],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}] if backends is None else backends}],
            **spec,
        },
    }


SITE = (web(), service(), certificate())


def test_a_sound_gateway_setup() -> None:
    assert check(*SITE, gateway(), route(hostnames=["a.example.com"])) == []


def test_route_backend_service_must_exist_with_port() -> None:
    missing = only(check(*SITE, gateway(), route(backends=[{"name": "api", "port": 80}])))
    assert (missing.path, "BackendNotFound" in missing.message) == ("spec.rules[0].backendRefs[0]", True)
    wrong_port = only(check(*SITE, gateway(), route(backends=[{"name": "web", "port": 8080}])))
    assert wrong_port.path == "spec.rules[0].backendRefs[0].port"
    assert len(check(*SITE, gateway(), route(backends=[{"name": "web"}]))) == 1


def test_route_backend_of_another_kind_is_not_checked() -> None:
    assert check(*SITE, gateway(), route(backends=[{"group": "example.com", "kind": "Bucket", "name": "b"}])) == []


def test_route_cross_namespace_backend_needs_a_reference_grant() -> None:
    backends = [{"name": "web", "namespace": "other", "port": 80}]
    other = (
        deployment(pod_spec(container(ports=[{"name": "http", "containerPort": 8080}])), ns="other"),
        service(ns="other"),
    )
    assert "RefNotPermitted" in only(check(*SITE, *other, gateway(), route(backends=backends))).message
    grant = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": meta("allow", "other"),
        "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": NS}],
            "to": [{"group": "", "kind": "Service"}],
        },
    }
    assert check(*SITE, *other, grant, gateway(), route(backends=backends)) == []


def test_route_parent_gateway_must_resolve() -> None:
    assert "never be Accepted" in only(check(*SITE, route())).message
    external = External(kind="Gateway", namespace=NS, name="gw", created_by="the platform team")
    assert check(*SITE, route(), externals=[external]) == []


def test_route_section_name_must_be_a_listener() -> None:
    finding = only(check(*SITE, gateway(), route(parent={"name": "gw", "sectionName": "grpc"})))
    assert (finding.path, "NoMatchingParent" in finding.message) == ("spec.parentRefs[0].sectionName", True)
    assert check(*SITE, gateway(), route(parent={"name": "gw", "sectionName": "http"})) == []


def test_route_must_be_attachable_to_the_listener() -> None:
    tls_route = route("TLSRoute", parent={"name": "gw", "sectionName": "https"})
    assert "protocol HTTPS does not carry TLSRoute" in only(check(*SITE, gateway(), tls_route)).message
    elsewhere = route(ns="other", backends=[], parent={"name": "gw", "namespace": NS, "sectionName": "https"})
    assert "only takes routes from namespace 'app'" in only(check(gateway(), certificate(), elsewhere)).message
    listeners = gateway()["spec"]["listeners"]
    listeners[0]["allowedRoutes"] = {"namespaces": {"from": "All"}}
    assert check(gateway(listeners), certificate(), elsewhere) == []
    hosts = route(hostnames=["b.example.com"])
    assert "NoMatchingListenerHostname" in only(check(*SITE, gateway(), hosts)).message
    wildcard = gateway([{**gateway()["spec"]["listeners"][0], "hostname": "*.example.com"}])
    assert check(*SITE, wildcard, route(hostnames=["a.example.com"])) == []


def test_gateway_certificate_refs() -> None:
    finding = only(check(gateway()))
    assert (finding.path, "InvalidCertificateRef" in finding.message) == (
        "spec.listeners[0].tls.certificateRefs[0]",
        True,
    )
    assert check(gateway(), certificate()) == []
    external = External(kind="Secret", namespace=NS, name="public-tls", created_by="the user")
    assert check(gateway(), externals=[external]) == []


# ---------------------------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "api"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["api"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["api"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, False),
        ({}, True),
    ],
)
def test_selector_matches(selector: dict[str, Any], expected: bool) -> None:
    assert selector_matches(selector, LABELS) is expected


def network_policy(selector: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta("np"),
        "spec": {"podSelector": selector, "policyTypes": ["Ingress"]},
    }


def pdb(selector: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta("pdb"),
        "spec": {"selector": selector, "maxUnavailable": 1},
    }


@pytest.mark.parametrize(("make", "path"), [(network_policy, "spec.podSelector"), (pdb, "spec.selector")])
def test_policy_selectors_must_select_a_pod_template(make: Any, path: str) -> None:
    assert only(check(web(), make({"matchLabels": {"app": "api"}}))).path == path
    assert len(check(web(), make({"matchExpressions": [{"key": "app", "operator": "In", "values": ["api"]}]}))) == 1
    assert check(web(), make({"matchLabels": LABELS})) == []
    assert check(web(), make({"matchExpressions": [{"key": "app", "operator": "Exists"}]})) == []
    assert check(make({})) == []  # every pod of the namespace


# -------------------------------------------------------------------------------------------------- RBAC


def binding(
    role_kind: str = "Role", role: str = "reader", subject_ns: str | None = None, kind: str = "RoleBinding"
) -> dict:
    subject: dict[str, Any] = {"kind": "ServiceAccount", "name": "runner"}
    if subject_ns:
        subject["namespace"] = subject_ns
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta("b", None if kind == "ClusterRoleBinding" else NS),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [subject],
    }


ACCOUNT = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("runner")}
ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta("reader"), "rules": []}


def test_role_binding_role_ref() -> None:
    assert "403 Forbidden" in only(check(ACCOUNT, binding())).message
    assert check(ACCOUNT, ROLE, binding()) == []


def test_role_binding_cluster_role_ref() -> None:
    assert len(check(ACCOUNT, binding("ClusterRole", "custom"))) == 1
    external = External(kind="ClusterRole", namespace=None, name="custom", created_by="the operator chart")
    assert check(ACCOUNT, binding("ClusterRole", "custom"), externals=[external]) == []
    assert check(ACCOUNT, binding("ClusterRole", "view")) == []


def test_binding_service_account_subjects() -> None:
    assert only(check(ROLE, binding())).path == "subjects[0]"
    assert check(ROLE, ACCOUNT, binding()) == []
    assert len(check(ROLE, ACCOUNT, binding(subject_ns="other"))) == 1


def test_cluster_role_binding() -> None:
    assert len(check(binding("ClusterRole", "view", subject_ns=NS, kind="ClusterRoleBinding"))) == 1
    assert check(ACCOUNT, binding("ClusterRole", "view", subject_ns=NS, kind="ClusterRoleBinding")) == []


# ---------------------------------------------------------------------------------------------- StatefulSet


def test_statefulset_service_name_must_be_a_headless_service() -> None:
    sts = _with_template("StatefulSet", pod_spec())
    sts["spec"]["serviceName"] = "peers"
    assert "stable DNS names" in only(check(sts)).message
    assert "not headless" in only(check(sts, service("peers", selector={}))).message
    assert check(sts, service("peers", selector={}, clusterIP="None")) == []


def test_statefulset_provides_its_claims() -> None:
    sts = _with_template("StatefulSet", pod_spec(container(volumeMounts=[{"name": "data", "mountPath": "/d"}])))
    sts["spec"].update({"replicas": 2, "volumeClaimTemplates": [{"metadata": {"name": "data"}}]})
    assert (
        check(sts, volsync_source("data-w-1", "restic"), secret("restic", "RESTIC_REPOSITORY", "RESTIC_PASSWORD")) == []
    )
    assert (
        len(check(sts, volsync_source("data-w-2", "restic"), secret("restic", "RESTIC_REPOSITORY", "RESTIC_PASSWORD")))
        == 1
    )


# ------------------------------------------------------------------------------------------ CloudNativePG


def cluster(name: str = "db", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": meta(name),
        "spec": {"instances": 1, **spec},
    }


def db_env(secret_name: str, key: str = "password", name: str = "web") -> dict[str, Any]:
    env = [{"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}}]
    return deployment(pod_spec(container(env=env)), name=name)


def test_cnpg_cluster_provides_app_secret_and_services() -> None:
    objects = (cluster(bootstrap={"initdb": {"database": "app", "owner": "app"}}), db_env("db-app"))
    assert check(*objects) == []
    assert check(*objects, ingress("db-rw", {"name": "postgres"}), ingress("db-ro", {"number": 5432})) == []
    assert only(check(*objects, db_env("db-app", "token", name="api"))).path.endswith(".key")
    assert only(check(cluster(), ingress("db-rw", {"number": 80}))).path.endswith(".port")


def test_cnpg_default_bootstrap_is_initdb() -> None:
    assert check(cluster(), db_env("db-app")) == []


def test_cnpg_no_app_secret_for_replica_or_own_secret() -> None:
    replica = cluster(
        bootstrap={"recovery": {"source": "src", "database": "app", "owner": "app"}},
        replica={"enabled": True, "source": "src"},
        externalClusters=[{"name": "src"}],
    )
    assert "creates no application Secret for a replica" in only(check(replica, db_env("db-app"))).message
    own = cluster(bootstrap={"initdb": {"database": "app", "owner": "app", "secret": {"name": "mine"}}})
    assert len(check(own, secret("mine", "username", "password"), db_env("db-app"))) == 1
    promoted = copy.deepcopy(replica)
    promoted["spec"]["replica"]["enabled"] = False
    assert check(promoted, db_env("db-app")) == []


def test_cnpg_superuser_secret_only_when_enabled() -> None:
    assert "enableSuperuserAccess" in only(check(cluster(), db_env("db-superuser"))).message
    assert check(cluster(enableSuperuserAccess=True), db_env("db-superuser")) == []


def test_cnpg_disabled_default_services() -> None:
    disabled = cluster(managed={"services": {"disabledDefaultServices": ["ro", "r"]}})
    assert len(check(disabled, ingress("db-ro", {"number": 5432}))) == 1
    assert check(disabled, ingress("db-rw", {"number": 5432})) == []


def test_cnpg_pods_count_for_selectors_but_their_ports_are_not_known() -> None:
    policy = network_policy({"matchLabels": {"cnpg.io/cluster": "db"}})
    assert check(cluster(), policy) == []
    assert len(check(cluster("other"), policy)) == 1
    primary = service("db-primary", selector={"cnpg.io/cluster": "db", "role": "primary"}, ports=[{"port": 5432}])
    assert check(cluster(), primary) == []


def test_cnpg_cluster_secret_references() -> None:
    spec = {
        "bootstrap": {"initdb": {"database": "app", "owner": "app", "secret": {"name": "app-creds"}}},
        "externalClusters": [{"name": "src", "password": {"name": "src-pass", "key": "password"}}],
    }
    assert {f.path for f in check(cluster(**spec))} == {
        "spec.bootstrap.initdb.secret",
        "spec.externalClusters[0].password",
    }
    assert only(check(cluster(**spec), secret("app-creds"), secret("src-pass", "pw"))).path.endswith("password.key")
    assert check(cluster(**spec), secret("app-creds"), secret("src-pass", "password")) == []


def test_cnpg_external_cluster_must_not_read_the_clusters_own_generated_secrets() -> None:
    source = {"name": "src", "sslKey": {"name": "db-replication", "key": "tls.key"}}
    finding = only(check(cluster(externalClusters=[source])))
    assert "generates for this Cluster itself" in finding.message
    copied = {"name": "src", "sslKey": {"name": "src-replication", "key": "tls.key"}}
    assert check(cluster(externalClusters=[copied]), secret("src-replication", "tls.key")) == []


def test_cnpg_sources_must_be_external_clusters() -> None:
    broken = cluster(replica={"enabled": True, "source": "active"}, externalClusters=[{"name": "src"}])
    assert only(check(broken)).path == "spec.replica.source"
    sound = cluster(replica={"enabled": True, "source": "src"}, externalClusters=[{"name": "src"}])
    assert check(sound) == []


def object_store(name: str = "store", creds: str = "s3") -> dict[str, Any]:
    s3 = {"accessKeyId": {"name": creds, "key": "ID"}, "secretAccessKey": {"name": creds, "key": "KEY"}}
    return {
        "apiVersion": "barmancloud.cnpg.io/v1",
        "kind": "ObjectStore",
        "metadata": meta(name),
        "spec": {"configuration": {"destinationPath": "s3://b/p", "s3Credentials": s3}},
    }


def test_object_store_credentials() -> None:
    assert len(check(object_store())) == 2
    assert (
        only(check(object_store(), secret("s3", "ID"))).path == "spec.configuration.s3Credentials.secretAccessKey.key"
    )
    assert check(object_store(), secret("s3", "ID", "KEY")) == []


PLUGIN = [
    {"name": "barman-cloud.cloudnative-pg.io", "isWALArchiver": True, "parameters": {"barmanObjectName": "store"}}
]


def test_cluster_plugin_object_store() -> None:
    assert only(check(cluster(plugins=PLUGIN))).path == "spec.plugins[0].parameters.barmanObjectName"
    assert check(cluster(plugins=PLUGIN), object_store(), secret("s3", "ID", "KEY")) == []
    source = {
        "name": "src",
        "plugin": {"name": "barman-cloud.cloudnative-pg.io", "parameters": {"barmanObjectName": "x"}},
    }
    assert len(check(cluster(externalClusters=[source]))) == 1


def scheduled_backup(cluster_name: str = "db", method: str = "plugin") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedule": "0 0 0 * * *", "cluster": {"name": cluster_name}, "method": method}
    if method == "plugin":
        spec["pluginConfiguration"] = {"name": "barman-cloud.cloudnative-pg.io"}
    return {"apiVersion": "postgresql.cnpg.io/v1", "kind": "ScheduledBackup", "metadata": meta("daily"), "spec": spec}


def test_scheduled_backup_cluster_and_method() -> None:
    store = (object_store(), secret("s3", "ID", "KEY"))
    assert only(check(cluster(plugins=PLUGIN), *store, scheduled_backup("other"))).path == "spec.cluster"
    assert "no spec.plugins entry" in only(check(cluster(), scheduled_backup())).message
    assert "barmanObjectStore" in only(check(cluster(), scheduled_backup(method="barmanObjectStore"))).message
    assert check(cluster(plugins=PLUGIN), *store, scheduled_backup()) == []


# ------------------------------------------------------------------------------------------------- VolSync


def volsync_source(pvc: str = "data", repository: str = "restic") -> dict[str, Any]:
    return {
        "apiVersion": "volsync.backube/v1alpha1",
        "kind": "ReplicationSource",
        "metadata": meta("backup"),
        "spec": {"sourcePVC": pvc, "trigger": {"schedule": "0 * * * *"}, "restic": {"repository": repository}},
    }


def test_volsync_source_pvc_and_repository() -> None:
    assert [f.path for f in check(volsync_source())] == ["spec.sourcePVC", "spec.restic.repository"]
    repo = secret("restic", "RESTIC_REPOSITORY", "RESTIC_PASSWORD")
    assert check(volsync_source(), claim("data"), repo) == []
    external = External(kind="Secret", namespace=NS, name="restic", created_by="the user (README)")
    assert check(volsync_source(), claim("data"), externals=[external]) == []


def test_volsync_repository_needs_restic_keys() -> None:
    finding = only(check(volsync_source(), claim("data"), secret("restic", "RESTIC_REPOSITORY")))
    assert "key 'RESTIC_PASSWORD'" in finding.message


# ----------------------------------------------------------------------------------------------------- CLI


def test_cli_prints_findings_and_a_summary(tmp_path, capsys) -> None:
    import yaml

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.yaml").write_text(yaml.safe_dump_all([web(), service(selector={"app": "api"})]))
    (tmp_path / "notes.txt").write_text("not yaml: [")
    assert main([str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "2 objects, 1 findings"
    assert lines[0].startswith("Service/app/web: spec.selector: ")


def test_cli_exit_zero_without_findings(tmp_path, capsys) -> None:
    import yaml

    path = tmp_path / "list.yml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [web(), service()]}))
    assert main([str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["2 objects, 0 findings"]


# --------------------------------------------------------------------------------------------- real plans


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_real_plan_is_checkable(stack: str, stack_outputs) -> None:
    """Integration smoke test: the check runs on the program's real output. It does NOT assert zero findings
    (declaring externals and optional references is the integration's job); it prints them for information."""
    from tools.plan import plan_stack

    run = plan_stack(stack, stack_outputs=stack_outputs)
    findings = check_wiring(run.kubernetes_objects())
    assert isinstance(findings, list)
    assert all(isinstance(f, Finding) for f in findings)
    print(f"{stack}: {len(findings)} findings", *findings, sep="\n")
