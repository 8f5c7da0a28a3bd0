"""The package's LitestreamBackup: the Python component's resources, its pod fragments as outputs, secrets kept."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
from pulumi.errors import InputPropertyError

from headscale_ha.components import litestream
from headscale_ha.components.settings import BackupSettings
from headscale_ha.package.backup_volume import BackupVolume
from headscale_ha.package.litestream import LitestreamBackup
from tests.support.component_run import build_component, refused
from tests.support.component_tree import inputs_of, subtree
from tools.harness import SECRET

BACKUP_KEY, FINGERPRINT = "cd" * 32, "SHA256:" + "ef" * 32

#: A program protecting Vaultwarden's SQLite database, as it would call the package (snake_case: the host's keys).
BASE: dict[str, Any] = {
    "app": "vaultwarden",
    "part_of": "vaultwarden",
    "namespace": "vault",
    "settings": {},
    "db_path": "/data/db.sqlite3",
    "data_volume": "data",
    "data_mount": "/data",
    "backup_claim": "tailnet-backups",
}


def _python_args(**changes: Any) -> litestream.LitestreamBackupArgs:
    fields: dict[str, Any] = {
        "app": "vaultwarden",
        "part_of": "vaultwarden",
        "namespace": "vault",
        "settings": BackupSettings(),
        "db_path": "/data/db.sqlite3",
        "data_volume": "data",
        "data_mount": "/data",
        "pvc_name": None,
        "backup_claim": "tailnet-backups",
    }
    return litestream.LitestreamBackupArgs(**(fields | changes))


SIGNED = {
    "backup_key": BACKUP_KEY,
    "identity_fingerprint": FINGERPRINT,
    "record_position": True,
    "metrics_port": 9091,
    "allow_empty_start": "2025-06-01",
    "upgrade_version": "1.34.0",
    "upgrade_scratch_size": "3Gi",
}
VOLSYNC = {"local": {"storage": "persistent"}, "volsync": {"repository": "restic-vault", "keep_daily": 3}}

#: (case, the package's inputs, the Python component's args for the same backup).
CASES: list[tuple[str, Callable[[], dict[str, Any]], Callable[[], litestream.LitestreamBackupArgs]]] = [
    ("unsigned, disposable, no metrics", lambda: BASE, _python_args),
    (
        "signed with the position recorder, metrics, the pre-upgrade snapshot",
        lambda: BASE | SIGNED,
        lambda: _python_args(**SIGNED),
    ),
    (
        "a standby with VolSync snapshots of its claim",
        lambda: BASE | {"settings": VOLSYNC, "pvc_name": "vaultwarden-data", "require_backup": True},
        lambda: _python_args(
            settings=BackupSettings.model_validate(VOLSYNC), pvc_name="vaultwarden-data", require_backup=True
        ),
    ),
    (
        "signed, but the recorder turned off in the settings",
        lambda: BASE | SIGNED | {"settings": {"auth": {"record_position": False}}},
        lambda: _python_args(**SIGNED, settings=BackupSettings.model_validate({"auth": {"record_position": False}})),
    ),
]
IDS = [case[0] for case in CASES]


def _fragments_of(backup: LitestreamBackup) -> None:
    pulumi.export(
        "fragments",
        {
            "initContainers": backup.init_containers,
            "volumes": backup.volumes,
            "configChecksum": backup.config_checksum,
            "serviceAccountName": backup.service_account_name,
            "configMapName": backup.config_map_name,
            "backupDir": backup.backup_dir,
        },
    )


def _python_fragments(backup: litestream.LitestreamBackup) -> None:
    pulumi.export(
        "fragments",
        {
            "initContainers": backup.init_containers,
            "volumes": backup.volumes,
            "configChecksum": backup.config_checksum,
            "serviceAccountName": backup.service_account_name,
            "configMapName": backup.config_map.metadata.apply(lambda metadata: metadata.name),
            "backupDir": backup.backup_dir,
        },
    )


@pytest.mark.parametrize(("case", "package_args", "python_args"), CASES, ids=IDS)
def test_registers_what_the_python_component_registers_one_level_down(case, package_args, python_args):
    package = build_component(lambda: LitestreamBackup("vault-backup", package_args()))
    python = build_component(lambda: litestream.LitestreamBackup("vault-backup", python_args()))
    ours = subtree(package.resources, "headscale-ha:index:LitestreamBackup", "vault-backup")
    assert ours[0][:2] == ("headscale-ha:litestream:LitestreamBackup", "vault-backup")
    below = [(chain.split("/", 1)[1], name, inputs) for chain, name, inputs in ours[1:]]
    assert below == subtree(python.resources, "headscale-ha:litestream:LitestreamBackup", "vault-backup")
    assert "vault-backup-config" in [name for _, name, _ in below]


@pytest.mark.parametrize(("case", "package_args", "python_args"), CASES, ids=IDS)
def test_the_pod_fragments_are_the_python_components_attributes(case, package_args, python_args):
    package = build_component(lambda: _fragments_of(LitestreamBackup("b", package_args())))
    python = build_component(lambda: _python_fragments(litestream.LitestreamBackup("b", python_args())))
    assert package.outputs["fragments"] == python.outputs["fragments"]
    assert package.outputs["fragments"]["initContainers"][0]["name"] == "restore"  # restore-before-serve


def test_the_outputs_a_consumer_wires_its_pod_and_monitoring_with():
    def build() -> None:
        backup = LitestreamBackup("b", BASE | SIGNED)
        pulumi.export(
            "outputs",
            {
                "serviceAccountName": backup.service_account_name,
                "podLabels": backup.pod_labels,
                "metricsServiceName": backup.metrics_service_name,
                "backupKeySecretName": backup.backup_key_secret_name,
                "initContainers": backup.init_containers.apply(lambda cs: [c["name"] for c in cs]),
            },
        )

    assert build_component(build).outputs["outputs"] == {
        "serviceAccountName": "vaultwarden-position-recorder",
        "podLabels": {"app.kubernetes.io/name": "vaultwarden", "app.kubernetes.io/part-of": "vaultwarden"},
        "metricsServiceName": "vaultwarden-litestream",
        "backupKeySecretName": "vaultwarden-backup-key",
        "initContainers": ["restore", "pre-upgrade", "position-recorder", "backup-signer", "litestream"],
    }

    def unsigned() -> None:
        backup = LitestreamBackup("b", BASE)
        pulumi.export(
            "outputs",
            [backup.service_account_name, backup.metrics_service_name, backup.backup_key_secret_name],
        )

    assert build_component(unsigned).outputs["outputs"] == [None, None, None]


def test_the_metrics_service_selects_the_pod_by_the_labels_exported():
    def build() -> None:
        pulumi.export("labels", LitestreamBackup("b", BASE | {"metrics_port": 9091}).pod_labels)

    run = build_component(build)
    service = inputs_of(run.resources, "kubernetes:core/v1:Service", "b-metrics")
    assert service["spec"]["selector"] == run.outputs["labels"]


@pytest.mark.parametrize("require_backup", [False, True])
def test_the_served_witness_is_what_record_served_writes(require_backup):
    def package() -> None:
        pulumi.export("witness", LitestreamBackup("b", BASE | {"require_backup": require_backup}).served_witness)

    def python() -> None:
        backup = litestream.LitestreamBackup("b", _python_args(require_backup=require_backup))
        workload = k8s.core.v1.ConfigMap("workload", metadata={"name": "stand-in", "namespace": "vault"})
        litestream.record_served(backup, workload, replicas=1, parent=backup)

    witness = build_component(package).outputs["witness"]
    patch = inputs_of(build_component(python).resources, "kubernetes:core/v1:ConfigMapPatch", "b-served")
    assert {"metadata": patch["metadata"], "data": patch["data"]} == witness


def test_a_secret_input_stays_secret():
    def build() -> None:
        backup = LitestreamBackup(
            "b",
            BASE
            | {
                "backup_key": pulumi.Output.secret(BACKUP_KEY),
                "identity_fingerprint": pulumi.Output.secret(FINGERPRINT),
            },
        )
        pulumi.export("initContainers", backup.init_containers)

    run = build_component(build)
    key = inputs_of(run.resources, "kubernetes:core/v1:Secret", "b-backup-key")
    assert key["stringData"] == {"backup.key": SECRET}
    # The fingerprint reaches the restore's environment: the fragments holding it are a secret as a whole.
    assert run.outputs["initContainers"] is SECRET
    shown = json.dumps([r.inputs for r in run.resources], default=repr) + json.dumps(run.outputs, default=repr)
    assert BACKUP_KEY not in shown
    assert FINGERPRINT not in shown


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        (
            {"settings": {"litestream": {"resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}}},
            "settings.litestream.resources.limits",
            "is required",
        ),
        (
            {
                "settings": {
                    "litestream": {
                        "resources": {
                            "requests": {"cpu": "1", "memory": "64Mi"},
                            "limits": {"cpu": "500m", "memory": "64Mi"},
                        }
                    }
                }
            },
            "settings.litestream.resources.limits.cpu",
            "is below requests.cpu (1): raise it to 1 or more, got '500m'",
        ),
        ({"settings": {"litestream": {"colour": "red"}}}, "settings.litestream.colour", "is not an input of this type"),
        ({"settings": {"local": {"storage": "persistent"}, "volsync": {}}}, "settings.volsync.repository", "required"),
        ({"settings": {"auth": {"max_age": "0s"}}}, "settings.auth.maxAge", "a zero age refuses every restore"),
        ({"settings": VOLSYNC}, "pvcName", "is required with settings.volsync"),
        (
            {"db_path": "/var/lib/db.sqlite3"},
            "dbPath",
            "must lie inside dataMount (/data), the volume the restore fills",
        ),
        ({"db_path": "db.sqlite3"}, "dbPath", "must be an absolute path without '..', got 'db.sqlite3'"),
        ({"data_volume": "litestream-config"}, "dataVolume", "'litestream-config' is a volume of the backup's own"),
        ({"app": "Vault_Warden"}, "app", "must be a DNS label"),
        ({"metrics_port": 0}, "metricsPort", "must be a port from 1 to 65535, got 0"),
        ({"allow_empty_start": "2025-13-01"}, "allowEmptyStart", "'2025-13-01' is not a date YYYY-MM-DD"),
        ({"upgrade_scratch_size": "lots"}, "upgradeScratchSize", "must be a Kubernetes quantity"),
    ],
)
def test_a_bad_input_is_refused_at_its_schema_path_before_anything_is_registered(changes, path, message):
    error = refused(lambda: LitestreamBackup("b", BASE | changes))
    assert error.property_path == path
    assert message in error.reason


def test_without_a_claim_the_backup_mounts_the_claim_a_backup_volume_makes_for_the_same_export():
    """A consumer whose SDK cannot pass BackupVolume's claimName into this plain input gives the NFS settings to
    both: the names agree, so the pod mounts the claim the BackupVolume made."""
    nfs = {"server": "nas.lan", "path": "/export/vault"}
    inputs = {k: v for k, v in BASE.items() if k != "backup_claim"} | {"settings": {"nfs": nfs}}
    run = build_component(lambda: LitestreamBackup("b", inputs))
    volume = build_component(lambda: BackupVolume("backups", {"namespace": "vault", "part_of": "vault", "nfs": nfs}))
    (claim,) = [r.inputs for r in volume.resources if r.type == "kubernetes:core/v1:PersistentVolumeClaim"]
    python = build_component(
        lambda: litestream.LitestreamBackup(
            "b",
            _python_args(settings=BackupSettings.model_validate({"nfs": nfs}), backup_claim=claim["metadata"]["name"]),
        )
    )
    ours = [
        (p.split("/", 1)[1], n, i)
        for p, n, i in subtree(run.resources, "headscale-ha:index:LitestreamBackup", "b")
        if "/" in p
    ]
    assert ours == subtree(python.resources, "headscale-ha:litestream:LitestreamBackup", "b")


def test_without_a_claim_or_an_export_the_backup_is_refused():
    inputs = {k: v for k, v in BASE.items() if k != "backup_claim"}
    with pytest.raises(InputPropertyError) as caught:
        build_component(lambda: LitestreamBackup("b", inputs))
    assert (caught.value.property_path, caught.value.reason) == (
        "backupClaim",
        "backupClaim: is required unless settings.nfs names the export, got neither",
    )
