"""HeadscaleServer: the singleton Deployment, its identity, volume, backup wiring and Service."""

from __future__ import annotations

import re

import yaml

from offline.harness import SECRET, ProgramRun


def _object(run: ProgramRun, kind: str, name: str) -> dict:
    matches = [o for o in run.kubernetes_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{len(matches)} {kind}/{name}"
    return matches[0]


def _pod(run: ProgramRun, name: str = "headscale") -> dict:
    return _object(run, "Deployment", name)["spec"]["template"]["spec"]


def test_active_runs_exactly_one_replica_recreated(run_stack) -> None:
    spec = _object(run_stack("hydra"), "Deployment", "headscale")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


def test_standby_keeps_everything_but_runs_nothing(run_stack) -> None:
    run = run_stack("cosmos")
    assert _object(run, "Deployment", "headscale")["spec"]["replicas"] == 0
    assert _object(run, "PersistentVolumeClaim", "headscale-data")["spec"]["storageClassName"] == "local-path"
    env = {e["name"]: e["value"] for e in _pod(run)["initContainers"][0]["env"]}
    assert env["REQUIRE_BACKUP"] == "true", "a standby that scales up must restore, never start empty"


def test_scheduling_avoids_control_plane_and_excluded_nodes(run_stack) -> None:
    pod = _pod(run_stack("hydra"))
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
                {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["hydra-gpu-1"]},
            ]
        }
    ]
    assert {(t["key"], t["tolerationSeconds"]) for t in pod["tolerations"]} == {
        ("node.kubernetes.io/not-ready", 60),
        ("node.kubernetes.io/unreachable", 60),
    }


def test_every_container_is_restricted_and_bounded(run_stack) -> None:
    pod = _pod(run_stack("hydra"))
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"] + pod["initContainers"]:
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, container["name"]
        assert security["allowPrivilegeEscalation"] is False, container["name"]
        assert security["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert set(container["resources"]) == {"requests", "limits"}, container["name"]


def test_probes_use_the_unauthenticated_health_endpoint(run_stack) -> None:
    (container,) = _pod(run_stack("hydra"))["containers"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["image"] == "ghcr.io/juanfont/headscale:0.29.2"
    assert container["args"] == ["serve"]


def test_restore_runs_before_replication_and_the_app(run_stack) -> None:
    pod = _pod(run_stack("hydra"))
    restore, sidecar = pod["initContainers"]
    assert restore["name"] == "restore"
    assert "restartPolicy" not in restore, "the restore must finish before anything else starts"
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["args"] == ["replicate", "-config", "/etc/litestream/litestream.yml"]
    env = {e["name"]: e["value"] for e in restore["env"]}
    assert env["DB_PATH"] == "/var/lib/headscale/db.sqlite"
    assert env["BACKUP_DIR"] == "/backup/headscale"
    assert env["IDENTITY_FILE"] == "/etc/headscale/identity/noise_private.key"
    assert env["REQUIRE_BACKUP"] == "false"
    backup = next(v for v in pod["volumes"] if v["name"] == "backup")
    assert backup == {"name": "backup", "persistentVolumeClaim": {"claimName": "litestream-backup"}}
    for container in (restore, sidecar):
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "backup"]
        assert mount == {"name": "backup", "mountPath": "/backup/headscale", "subPath": "headscale"}


def test_volume_is_rwo_and_survives_a_destroy(run_stack) -> None:
    run = run_stack("hydra")
    claim = _object(run, "PersistentVolumeClaim", "headscale-data")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["storageClassName"] == "ceph-block"
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"


def test_identity_keys_are_random_secret_and_mounted_read_only(run_stack) -> None:
    run = run_stack("hydra")
    keys = [r for r in run.resources if r.type == "random:index/randomBytes:RandomBytes"]
    assert sorted(r.name for r in keys) == ["hydra-headscale-derp-key", "hydra-headscale-noise-key"]
    assert all(r.inputs["length"] == 32 for r in keys)
    secret = _object(run, "Secret", "headscale-identity")
    assert secret["stringData"] == {"noise.key": SECRET, "derp.key": SECRET}
    mount = next(m for m in _pod(run)["containers"][0]["volumeMounts"] if m["name"] == "identity")
    assert mount == {"name": "identity", "mountPath": "/etc/headscale/identity", "readOnly": True}


def test_identity_never_lands_in_a_config_map(run_stack) -> None:
    run = run_stack("hydra")
    for obj in run.kubernetes_objects():
        if obj["kind"] == "ConfigMap":
            assert not re.search(r"privkey:[0-9a-f]{64}", yaml.safe_dump(obj)), obj["metadata"]["name"]
    config = yaml.safe_load(_object(run, "ConfigMap", "headscale-config")["data"]["config.yaml"])
    assert config["noise"]["private_key_path"] == "/etc/headscale/identity/noise_private.key"
    assert config["policy"]["mode"] == "database"


def test_imported_identity_replaces_the_generated_one(run_stack, lab_project) -> None:
    project = lab_project(
        "  headscale-ha:noisePrivateKey:\n    secure: v1:AAAA\n  headscale-ha:derpPrivateKey:\n    secure: v1:BBBB\n"
    )
    run = run_stack("lab", project_dir=project)
    assert not [r for r in run.resources if r.type.startswith("random:index/randomBytes")]
    assert _object(run, "Secret", "headscale-identity")["stringData"] == {"noise.key": SECRET, "derp.key": SECRET}


def test_a_config_change_rolls_the_pod(run_stack, project_copy) -> None:
    base = _object(run_stack("hydra"), "Deployment", "headscale")
    project = project_copy()
    text = (project / "Pulumi.yaml").read_text().replace("nameservers: [1.1.1.1, 1.0.0.1]", "nameservers: [9.9.9.9]")
    (project / "Pulumi.yaml").write_text(text)
    changed = _object(run_stack("hydra", project_dir=project), "Deployment", "headscale")
    annotation = "checksum/config"
    assert (
        base["spec"]["template"]["metadata"]["annotations"][annotation]
        != (changed["spec"]["template"]["metadata"]["annotations"][annotation])
    )


def test_service_exposes_http_and_metrics_only(run_stack) -> None:
    ports = _object(run_stack("hydra"), "Service", "headscale")["spec"]["ports"]
    assert {(p["name"], p["port"]) for p in ports} == {("http", 8080), ("metrics", 9090)}


def test_a_single_node_cluster_lets_the_control_plane_host_the_pods(run_stack) -> None:
    run = run_stack("cosmos")
    for kind, name in (
        ("Deployment", "headscale"),
        ("StatefulSet", "subnet-router"),
        ("Deployment", "tailnet-gateway"),
    ):
        spec = _object(run, kind, name)["spec"]["template"]["spec"]
        assert "nodeAffinity" not in spec["affinity"], name
        assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"} in (
            spec["tolerations"]
        ), name
