"""Headplane: the web UI at /admin, with its own SQLite database and its own Litestream directory.

It runs in its own Deployment (not in Headscale's pod), so it scales and restarts independently and needs no
access to Headscale's process; the price is Headplane's "limited mode" (no editing of Headscale's config file).
With the policy in file mode (the default) Headplane's ACL editor shows the live policy but cannot save it:
Headscale refuses API writes outside database mode; policy changes go through Git.

With automatic failover (``HeadplaneArgs.lease``) every site runs Headplane, but it serves only where its site holds
the witness Lease: a follower gate waits until the site has held it for a whole lease (so any other site's Headplane
has stopped), and a watcher stops Headplane and its backup when the Lease is another's or when it cannot see its
site renew (components/witness_lease.py; docs/witness-lease.md "Headplane").
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pulumi_kubernetes.core.v1 import ContainerArgsDict, PodSpecArgsDict, VolumeArgsDict

from headscale_ha.components.headplane_config import (
    HTTP_PORT,
    HeadplaneConfigInput,
    HeadplanePaths,
    headplane_config_yaml,
)
from headscale_ha.components.identity import application_backup_key
from headscale_ha.components.litestream import CONFIG_VOLUME as LITESTREAM_CONFIG_VOLUME
from headscale_ha.components.litestream import LitestreamBackup, record_served
from headscale_ha.components.pod import (
    Meta,
    checksum,
    container_security,
    labels,
    object_name,
    pod_security,
    resources,
    scheduling,
)
from headscale_ha.components.replicated_sqlite import replicated_sqlite
from headscale_ha.components.serving_lease import ServedPod, ServingLease, ServingLeaseArgs
from headscale_ha.components.settings import BackupSettings, ClusterSettings, ComputeResources, OidcSettings
from headscale_ha.components.workload import PodRecoveryFacts, cluster_service, recovery_facts, singleton_deployment

APP = "headplane"
PATHS = HeadplanePaths()
HEADPLANE_SECRET = "headplane-secrets"
CONFIG_MAP_NAME = "headplane-config"
CONFIG_FILE = "/etc/headplane/config.yaml"
#: Where each key of HEADPLANE_SECRET is mounted (only the keys the Secret holds are).
SECRET_FILES = {
    "cookie-secret": PATHS.cookie_secret,
    "headscale-api-key": PATHS.api_key,
    "oidc-client-secret": PATHS.oidc_client_secret,
}
#: What the watcher's fence stops, in order: Headplane (Node.js: its process is ``node``), then its replication and
#: the backup signer.
FENCED_WRITERS = ("node", "litestream", "sign.sh")


@dataclass(frozen=True, kw_only=True)
class HeadplaneArgs:
    """What one Headplane needs: its image and sizing, where it runs, the Headscale it manages, its backup."""

    namespace: str  # namespace of the Deployment, its Secret, ConfigMap, claim and Service
    image: str  # Headplane image (a 0.6 release: the config keys are checked against 0.6.3)
    replicas: int  # 1 to serve, 0 to keep everything but run nothing (a standby site); never more than 1
    resources: ComputeResources  # the Headplane container's requests and limits
    cluster: ClusterSettings  # placement: worker nodes, excluded nodes, tolerated node loss
    storage_size: str  # size of Headplane's own SQLite volume
    storage_class: str | None = None  # StorageClass of that volume; None: the cluster's default
    public_hostname: str  # public name; Headplane answers at https://<public_hostname>/admin
    headscale_url: str  # in-cluster URL of Headscale's HTTP port
    oidc: OidcSettings | None = None  # OIDC login through Headscale's client; None: API-key login only
    oidc_client_secret: pulumi.Input[str] | None = None  # that client's secret, kept a Pulumi secret; None: not mounted
    #: Headscale API key Headplane's OIDC logins act with, kept a Pulumi secret. Stored and mounted only with
    #: ``oidc`` (Headplane 0.6 reads it for nothing else); None: not mounted.
    api_key: pulumi.Input[str] | None = None
    backup: BackupSettings  # Litestream settings and the NFS target (`backup.nfs` must be set)
    metrics: bool = False  # serve the Litestream sidecar's metrics (scraped with monitoring on)
    require_backup: bool = False  # the restore refuses to start empty (a standby must restore, never start empty)
    #: After a real loss of both Headplane's volume and its backup on a site that has served: today's UTC date lets
    #: the restore start empty on that date only; None: refused (exit 24).
    allow_empty_start: str | None = None
    #: The tailnet's backup key (a secret, HeadscaleServer.backup_key): Headplane's replica is signed and its restores
    #: authenticated with Headplane's own key, derived from it (components/identity.application_backup_key), so no
    #: holder of Headplane's key can sign Headscale's replica; None: no authentication.
    backup_key: pulumi.Input[str] | None = None
    #: With automatic failover: this site's place behind the witness Lease, which Headplane follows (it serves only
    #: where its site holds the Lease; ``replicas`` 1 at every site); None: it runs where ``replicas`` says.
    lease: ServingLeaseArgs | None = None


def _own_backup_key(tailnet_key: pulumi.Input[str] | None) -> pulumi.Output[str] | None:
    """Headplane's own backup key, a secret, derived from the tailnet's (None: no authentication)."""
    if tailnet_key is None:
        return None
    return pulumi.Output.secret(tailnet_key).apply(lambda key: application_backup_key(key, APP))


def headplane_config_input(args: HeadplaneArgs) -> HeadplaneConfigInput:
    """The renderer's input: the args' own, plus where this pod mounts its data and secret files."""
    return HeadplaneConfigInput(
        image=args.image,
        public_hostname=args.public_hostname,
        headscale_url=args.headscale_url,
        oidc=args.oidc,
        paths=PATHS,
    )


class Headplane(pulumi.ComponentResource):
    """The Headplane Deployment, its secrets, its volume and its backup.

    Outputs (registered, and attributes of the same name in snake_case):
    - ``url``: where users reach the UI, ``https://<public_hostname>/admin``;
    - ``serviceName`` / ``servicePort``: the in-cluster Service (HTTP) a route or a NetworkPolicy points at;
    - ``secretName``: the Secret with the cookie secret and, with OIDC, the API key and the OIDC client secret;
    - ``configMapName``: the ConfigMap with the rendered config.yaml;
    - ``dataClaimName``: the claim of Headplane's own SQLite volume on persistent storage; None on disposable
      storage (an emptyDir or ephemeral volume that the restore fills from the backup).
    """

    secrets: k8s.core.v1.Secret
    lease: ServingLease | None
    config_map: k8s.core.v1.ConfigMap
    volume: k8s.core.v1.PersistentVolumeClaim | None
    data_volume: VolumeArgsDict
    backup: LitestreamBackup
    deployment: k8s.apps.v1.Deployment
    pod_spec: PodSpecArgsDict
    recovery_facts: PodRecoveryFacts  # what the pod spec says about its recovery (the site's `recovery` output)
    service: k8s.core.v1.Service
    url: str
    service_name: str
    service_port: int
    secret_name: str
    config_map_name: str
    data_claim_name: pulumi.Output[str] | None

    def __init__(self, name: str, args: HeadplaneArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:headplane:Headplane", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        meta: Meta = {"namespace": args.namespace, "labels": labels(APP, "ui")}
        self.secrets, secret_keys = self._secrets(name, args, meta)
        config_text = headplane_config_yaml(headplane_config_input(args))
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata={**meta, "name": CONFIG_MAP_NAME},
            data={"config.yaml": config_text},
            opts=child,
        )
        backed_up = replicated_sqlite(
            name,
            parent=self,
            meta=meta,
            backup=args.backup,
            storage_class=args.storage_class,
            require_backup=args.require_backup,
            allow_empty_start=args.allow_empty_start,
            app=APP,
            size=args.storage_size,
            data_dir=PATHS.data_dir,
            db_file="hp_persist.db",
            metrics=args.metrics,
            cluster=args.cluster,
            backup_key=_own_backup_key(args.backup_key),
        )
        self.volume, self.backup, self.data_volume = backed_up.claim, backed_up.backup, backed_up.volume
        self.pod_spec = self._pod_spec(args, {key: path for key, path in SECRET_FILES.items() if key in secret_keys})
        self.lease = self._lease(name, args) if args.lease is not None else None
        if self.lease is not None:
            self.pod_spec = self.lease.gate(self.pod_spec)
        self.recovery_facts = recovery_facts(APP, self.pod_spec)
        self.deployment = singleton_deployment(
            f"{name}-deployment",
            meta=meta,
            app=APP,
            component="ui",
            replicas=args.replicas,
            pod_spec=self.pod_spec,
            annotations={"checksum/config": checksum(config_text, self.backup.config_checksum)},
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[
                    self.config_map,
                    self.secrets,
                    *self.backup.pod_dependencies,
                    *(self.lease.dependencies if self.lease is not None else []),
                ],
            ),
            await_ready=self.lease is None,
        )
        if args.lease is None or args.require_backup:
            # The served witness, once this rollout is ready (Headplane's own: its restore is separate from
            # Headscale's). Behind the lease only a standby's (as `standby`) is written, as for Headscale.
            replicas = args.replicas if args.lease is None else 0
            record_served(self.backup, self.deployment, replicas=replicas, parent=self)
        self.service = cluster_service(f"{name}-service", meta=meta, app=APP, ports={"http": HTTP_PORT}, parent=self)
        self._register_names(args)

    def _lease(self, name: str, args: HeadplaneArgs) -> ServingLease:
        """The follower's objects: its gate copies Headplane's and Litestream's config into ``serving``."""
        assert args.lease is not None
        pod = ServedPod(
            app=APP,
            namespace=args.namespace,
            image=args.backup.auth.recorder_image,
            resources=resources(args.backup.litestream.resources),
            service_account=self.backup.service_account_name,
            served={"config": "headplane", LITESTREAM_CONFIG_VOLUME: "litestream"},
            writers=FENCED_WRITERS,
            follows=True,
        )
        return ServingLease(f"{name}-lease", args.lease, pod, pulumi.ResourceOptions(parent=self))

    def _secrets(self, name: str, args: HeadplaneArgs, meta: Meta) -> tuple[k8s.core.v1.Secret, list[str]]:
        """The Secret HEADPLANE_SECRET and the keys it holds: the cookie secret, and with OIDC the API key and the
        client secret when the args hold them."""
        child = pulumi.ResourceOptions(parent=self)
        # Exactly 32 characters: Headplane's schema demands it; letters and digits survive any trimming.
        cookie = random.RandomPassword(f"{name}-cookie-secret", length=32, special=False, opts=child)
        items = {"cookie-secret": pulumi.Output.secret(cookie.result)}
        if args.api_key is not None and args.oidc is not None:
            items["headscale-api-key"] = pulumi.Output.secret(args.api_key)
        if args.oidc is not None and args.oidc_client_secret is not None:
            items["oidc-client-secret"] = pulumi.Output.secret(args.oidc_client_secret)
        secret = k8s.core.v1.Secret(
            f"{name}-secrets", metadata={**meta, "name": HEADPLANE_SECRET}, type="Opaque", string_data=items, opts=child
        )
        return secret, list(items)

    def _register_names(self, args: HeadplaneArgs) -> None:
        """The names other programs need, as attributes and as the registered outputs."""
        self.url = f"https://{args.public_hostname}/admin"
        self.service_name, self.service_port = APP, HTTP_PORT
        self.secret_name = HEADPLANE_SECRET
        self.config_map_name = CONFIG_MAP_NAME
        self.data_claim_name = self.volume.metadata.apply(object_name) if self.volume else None
        self.register_outputs(
            {
                "url": self.url,
                "serviceName": self.service_name,
                "servicePort": self.service_port,
                "secretName": self.secret_name,
                "configMapName": self.config_map_name,
                "dataClaimName": self.data_claim_name,
            }
        )

    def _pod_spec(self, args: HeadplaneArgs, secret_files: dict[str, str]) -> PodSpecArgsDict:
        secret_dir = PATHS.cookie_secret.rsplit("/", 1)[0]
        volumes: list[VolumeArgsDict] = [
            {"name": "config", "config_map": {"name": CONFIG_MAP_NAME, "default_mode": 0o444}},
            {
                "name": "secrets",
                "secret": {
                    "secret_name": HEADPLANE_SECRET,
                    "default_mode": 0o440,
                    "items": [{"key": key, "path": path.rsplit("/", 1)[1]} for key, path in secret_files.items()],
                },
            },
            self.data_volume,
            {"name": "tmp", "empty_dir": {"size_limit": "64Mi"}},
            *self.backup.pod_volumes,
        ]
        container: ContainerArgsDict = {
            "name": APP,
            "image": args.image,
            "ports": [{"name": "http", "container_port": HTTP_PORT, "protocol": "TCP"}],
            # Liveness must not depend on Headscale: /admin/healthz fails whenever Headscale is down.
            "liveness_probe": {"tcp_socket": {"port": "http"}, "period_seconds": 15, "failure_threshold": 4},
            "readiness_probe": {"http_get": {"path": "/admin/healthz", "port": "http"}, "period_seconds": 10},
            "resources": resources(args.resources),
            "security_context": container_security(),
            "volume_mounts": [
                {"name": "config", "mount_path": CONFIG_FILE, "sub_path": "config.yaml", "read_only": True},
                {"name": "secrets", "mount_path": secret_dir, "read_only": True},
                {"name": "data", "mount_path": PATHS.data_dir},
                {"name": "tmp", "mount_path": "/tmp"},
            ],
        }
        return {
            **self.backup.pod_account(),
            "automount_service_account_token": False,
            "enable_service_links": False,
            "security_context": pod_security(),
            **scheduling(args.cluster),
            "init_containers": self.backup.pod_init_containers,
            "containers": [container],
            "volumes": volumes,
        }
