"""The position recorder: the running pod's record of how far its backup got, kept outside the backup export.

Why: everything on the NFS export can be rolled back by whoever controls the export (a snapshot, a copied old
directory), and a rollback younger than ``backup.auth.maxAge`` passes the manifest's age check. So the signer writes
the highest position it has signed (``<16 hex txid> <signed_at>``) into a pod-local file, and this native sidecar
(components/scripts/position-recorder.sh, in a shell-and-curl image) copies it into the served witness ConfigMap
under the key ``position``. The restore reads that key through the witness volume and refuses a replica signed below
it (exit 44), unless ``backup.auth.allowRollback`` holds today's UTC date.

Least privilege: the recorder alone holds an API token, from a projected volume mounted into it only (the pod keeps
``automountServiceAccountToken: false``). Its ServiceAccount's Role allows ``get`` and ``patch`` on the one witness
ConfigMap, nothing else; it mounts neither the database, the export nor the backup key. Pulumi writes the witness
with server-side apply and owns only its ``served`` key; the recorder's merge patches own ``position`` under their
own field manager, so neither overwrites the other.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    ContainerArgsDict,
    ProjectedVolumeSourceArgsDict,
    VolumeArgsDict,
    VolumeMountArgsDict,
)
from pulumi_kubernetes.meta.v1 import ObjectMetaArgsDict
from pulumi_kubernetes.rbac.v1 import PolicyRuleArgsDict

from headscale_ha.components.pod import container_security, labels, resources
from headscale_ha.components.settings import ComputeResources
from headscale_ha.components.shell_scripts import packaged_script

RECORDER_CONTAINER = "position-recorder"
SCRIPT_NAME = "position-recorder.sh"
#: The key of the script in the backup's config ConfigMap.
RECORDER_SCRIPT_KEY = "position-recorder.sh"
#: The served witness's key the recorder writes, and the file the restore reads it from in the witness volume.
WITNESS_KEY = "position"
#: The pod-local hand-over from the signer (writes) to the recorder (reads): a small memory emptyDir.
POSITION_VOLUME = "backup-position"
POSITION_MOUNT = "/run/backup-position"
POSITION_FILE = f"{POSITION_MOUNT}/position"
TOKEN_VOLUME = "recorder-token"
#: The recorder's own /tmp: its request header (the token) is written there, so it is shared with no container.
TMP_VOLUME = "recorder-tmp"
TOKEN_MOUNT = "/var/run/secrets/headscale-ha/recorder"
#: A bound token the kubelet refreshes well before it expires (the script re-reads it on every request).
TOKEN_SECONDS = 3600
FIELD_MANAGER = "headscale-ha-position-recorder"
#: How often the recorder compares the signer's position with what it last recorded.
INTERVAL_SECONDS = 5


def recorder_account(app: str) -> str:
    """The ServiceAccount (and Role, RoleBinding) of an application's position recorder."""
    return f"{app}-position-recorder"


def recorder_script() -> str:
    """Text of components/scripts/position-recorder.sh."""
    return packaged_script(SCRIPT_NAME)


def recorder_volumes() -> list[VolumeArgsDict]:
    """The hand-over emptyDir and the recorder's projected token (the pod's ServiceAccount) with the cluster CA."""
    token: ProjectedVolumeSourceArgsDict = {
        "sources": [
            {"service_account_token": {"path": "token", "expiration_seconds": TOKEN_SECONDS}},
            {"config_map": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        ],
        "default_mode": 0o440,
    }
    return [
        {"name": POSITION_VOLUME, "empty_dir": {"medium": "Memory", "size_limit": "1Mi"}},
        {"name": TOKEN_VOLUME, "projected": token},
        {"name": TMP_VOLUME, "empty_dir": {"medium": "Memory", "size_limit": "1Mi"}},
    ]


def position_mount(*, read_only: bool) -> VolumeMountArgsDict:
    """The hand-over volume: the signer writes it, the recorder reads it."""
    return {"name": POSITION_VOLUME, "mount_path": POSITION_MOUNT, "read_only": read_only}


def recorder_container(
    *,
    image: str,
    witness: str,
    namespace: str,
    script_file: str,
    config_mount: VolumeMountArgsDict,
    amounts: ComputeResources,
) -> ContainerArgsDict:
    """The native sidecar: defined before the signer, so it starts before it and stops after it (its last round
    records the signer's last position)."""
    return {
        "name": RECORDER_CONTAINER,
        "image": image,
        "command": ["/bin/sh", script_file],
        "restart_policy": "Always",
        "env": [
            {"name": "POSITION_FILE", "value": POSITION_FILE},
            {"name": "NAMESPACE", "value": namespace},
            {"name": "CONFIG_MAP", "value": witness},
            {"name": "DATA_KEY", "value": WITNESS_KEY},
            {"name": "TOKEN_FILE", "value": f"{TOKEN_MOUNT}/token"},
            {"name": "CA_FILE", "value": f"{TOKEN_MOUNT}/ca.crt"},
            {"name": "INTERVAL_SECONDS", "value": str(INTERVAL_SECONDS)},
            {"name": "FIELD_MANAGER", "value": FIELD_MANAGER},
        ],
        "volume_mounts": [
            position_mount(read_only=True),
            {"name": TOKEN_VOLUME, "mount_path": TOKEN_MOUNT, "read_only": True},
            config_mount,
            {"name": TMP_VOLUME, "mount_path": "/tmp"},
        ],
        "resources": resources(amounts),
        "security_context": container_security(),
    }


def recorder_rbac(
    name: str, *, app: str, part_of: str, namespace: str, witness: str, opts: pulumi.ResourceOptions
) -> tuple[k8s.core.v1.ServiceAccount, k8s.rbac.v1.Role, k8s.rbac.v1.RoleBinding]:
    """The recorder's ServiceAccount (no automounted token) and a Role bound to it alone: get and patch on the
    witness ConfigMap by name. No create (which RBAC cannot restrict by name): Pulumi creates the witness."""
    own = recorder_account(app)
    meta: ObjectMetaArgsDict = {"name": own, "namespace": namespace, "labels": labels(app, "backup", part_of)}
    account = k8s.core.v1.ServiceAccount(
        f"{name}-recorder-account", metadata=meta, automount_service_account_token=False, opts=opts
    )
    rule: PolicyRuleArgsDict = {
        "api_groups": [""],
        "resources": ["configmaps"],
        "resource_names": [witness],
        "verbs": ["get", "patch"],
    }
    role = k8s.rbac.v1.Role(f"{name}-recorder-role", metadata=meta, rules=[rule], opts=opts)
    binding = k8s.rbac.v1.RoleBinding(
        f"{name}-recorder-binding",
        metadata=meta,
        role_ref={"api_group": "rbac.authorization.k8s.io", "kind": "Role", "name": own},
        subjects=[{"kind": "ServiceAccount", "name": own, "namespace": namespace}],
        opts=opts,
    )
    return account, role, binding
