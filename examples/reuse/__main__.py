"""headscale-ha's components in another program, with its own config and none of headscale-ha's stack files.

1. Vaultwarden, an unrelated SQLite application, protected the way Headscale is: its database on a claim, a
   Litestream restore before it serves and a replicating sidecar while it runs, the backup on an NFS export
   reached through a claim, in a namespace that enforces the `restricted` Pod Security level.
2. A Headscale server built from hand-written args (no headscale-ha StackConfig).
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
from vaultwarden import Vaultwarden, VaultwardenArgs

from headscale_ha.components.backup_volume import BackupVolume, BackupVolumeArgs
from headscale_ha.components.headscale import HeadscaleServer, HeadscaleServerArgs, SqliteStorage
from headscale_ha.components.pod import PART_OF
from headscale_ha.components.settings import (
    BackupSettings,
    ClusterSettings,
    ComputeResources,
    HeadscaleSettings,
    Nfs,
    ResourceAmounts,
)

config = pulumi.Config()
namespace = config.get("namespace") or "vault"
RESTRICTED = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")}
k8s.core.v1.Namespace("vault-namespace", metadata={"name": namespace, "labels": RESTRICTED})
vault = Vaultwarden(
    "vault",
    VaultwardenArgs(
        namespace=namespace,
        nfs_server=config.require("nfsServer"),
        nfs_path=config.require("nfsPath"),
        storage_class=config.get("storageClass"),
    ),
)
pulumi.export("vaultwarden", {"service": vault.service_name, "backupClaim": vault.backup_claim})

# A Headscale server of its own, every setting written here: SQLite on a claim, restored before it serves from
# its own directory of the same NFS export, keys generated (and protected) in this stack's state.
vpn = config.get("vpnNamespace") or "vpn"
vpn_namespace = k8s.core.v1.Namespace("vpn-namespace", metadata={"name": vpn, "labels": RESTRICTED})
backup = BackupSettings(nfs=Nfs(server=config.require("nfsServer"), path=config.require("nfsPath")))
assert backup.nfs is not None
vpn_backup = BackupVolume(
    "vpn-backup",
    BackupVolumeArgs(namespace=vpn, part_of=PART_OF, nfs=backup.nfs),
    opts=pulumi.ResourceOptions(depends_on=[vpn_namespace]),
)
server = HeadscaleServer(
    "vpn-headscale",
    HeadscaleServerArgs(
        namespace=vpn,
        settings=HeadscaleSettings(
            image="ghcr.io/juanfont/headscale:0.29.2",
            version="0.29.2",
            resources=ComputeResources(
                requests=ResourceAmounts(cpu="20m", memory="64Mi"), limits=ResourceAmounts(cpu="500m", memory="256Mi")
            ),
        ),
        cluster=ClusterSettings(nodes=1, workloads_on_control_plane=True),
        database=SqliteStorage(size="512Mi", storage_class=config.get("storageClass"), backup=backup),
        server_hostname="vpn.lab.example.com",
        base_domain="nodes.lab.example.com",
        nameservers=("9.9.9.9",),
        split_dns={"lab.example.com": ("10.0.0.53",)},
    ),
    opts=pulumi.ResourceOptions(depends_on=[vpn_namespace, vpn_backup]),
)
pulumi.export(
    "headscale", {"apiUrl": server.api_url, "service": server.service_name, "dataClaim": server.data_claim_name}
)
