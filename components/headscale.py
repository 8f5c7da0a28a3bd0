"""HeadscaleServer: the strict singleton, its identity, its volume, its backup and its Service.

One replica at most, strategy Recreate (two pods never overlap), worker nodes only, and in the SQLite
stage no pod starts before the restore init container has checked the identity contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.headscale_config import (
    PASSWORD_ENV,
    STUN_PORT,
    HeadscalePaths,
    PostgresConnection,
    headscale_config_yaml,
)
from components.litestream import LitestreamBackup, backed_up_volume
from components.pod import checksum, container_security, labels, pod_security, resources, scheduling, selector
from components.postgres import DATABASE, OWNER, app_secret, read_write_host
from components.settings import DatabaseStage, Role
from components.workload import cluster_service, singleton_deployment
from program.config import StackConfig

APP = "headscale"
HTTP_PORT = 8080
METRICS_PORT = 9090
PATHS = HeadscalePaths()
IDENTITY_SECRET = "headscale-identity"
#: The embedded DERP relay's STUN listener (UDP): reached by clients from the internet, so it has its own Service.
STUN_SERVICE = "headscale-stun"
STUN_SHARING_KEY = "headscale-public"
STUN_CONTAINER_PORT: dict[str, Any] = {"name": "stun", "containerPort": STUN_PORT, "protocol": "UDP"}
NOISE_ITEM, DERP_ITEM = "noise.key", "derp.key"


#: The identity Secret as every pod that needs the Noise key mounts it (the server, the migration Job).
IDENTITY_VOLUME: dict[str, Any] = {
    "name": "identity",
    "secret": {
        "secretName": IDENTITY_SECRET,
        "defaultMode": 0o440,
        "items": [
            {"key": NOISE_ITEM, "path": PATHS.noise_key.rsplit("/", 1)[1]},
            {"key": DERP_ITEM, "path": PATHS.derp_key.rsplit("/", 1)[1]},
        ],
    },
}
IDENTITY_MOUNT: dict[str, Any] = {"name": "identity", "mountPath": PATHS.noise_key.rsplit("/", 1)[0], "readOnly": True}
SERVER_CONFIG_VOLUME: dict[str, Any] = {
    "name": "config",
    "configMap": {"name": "headscale-config", "defaultMode": 0o444},
}
SERVER_CONFIG_MOUNT: dict[str, Any] = {
    "name": "config",
    "mountPath": "/etc/headscale/config.yaml",
    "subPath": "config.yaml",
    "readOnly": True,
}
OIDC_SECRET = "headscale-oidc"
OIDC_ITEM = "client-secret"
OIDC_VOLUME: dict[str, Any] = {
    "name": "oidc",
    "secret": {
        "secretName": OIDC_SECRET,
        "defaultMode": 0o440,
        "items": [{"key": OIDC_ITEM, "path": PATHS.oidc_client_secret.rsplit("/", 1)[1]}],
    },
}
OIDC_MOUNT: dict[str, Any] = {"name": "oidc", "mountPath": PATHS.oidc_client_secret.rsplit("/", 1)[0], "readOnly": True}


def stun_annotations(config: StackConfig) -> dict[str, str]:
    """Clients send STUN to the address the public hostname resolves to: with Cilium LB-IPAM the Service asks for the
    site's public address and shares it (sharing key) with the public Gateway's Service, which must carry the same
    key. Pulumi does not wait for an address: the pool is the user's, and a standby has no pod behind it."""
    annotations = {"pulumi.com/skipAwait": "true"}
    if config.site.public_address is not None:
        annotations |= {
            "lbipam.cilium.io/ips": str(config.site.public_address),
            "lbipam.cilium.io/sharing-key": STUN_SHARING_KEY,
        }
    return annotations


def server_files(config: StackConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Volumes and mounts of every file the rendered config.yaml names: each container that loads the config
    (the server, the migration Job's configtest steps) needs all of them, or Headscale stops reading it."""
    volumes = [SERVER_CONFIG_VOLUME, IDENTITY_VOLUME]
    mounts = [SERVER_CONFIG_MOUNT, IDENTITY_MOUNT]
    if config.headscale.oidc is not None:
        volumes.append(OIDC_VOLUME)
        mounts.append(OIDC_MOUNT)
    return volumes, mounts


@dataclass(frozen=True, kw_only=True)
class HeadscaleServerArgs:
    config: StackConfig
    namespace: str


def headscale_replicas(config: StackConfig) -> int:
    """0 on a standby and while migrating (registrations pause, tunnels keep running); else the configured 0 or 1."""
    if config.role is Role.STANDBY or config.database.stage is DatabaseStage.MIGRATING:
        return 0
    return config.headscale.replicas


def _node_key(name: str, imported: str | None, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    """`privkey:` + 64 hex: imported from secret config, or 32 random bytes kept in Pulumi state."""
    if imported is not None:
        return pulumi.Output.secret(imported)
    # Protected: these bytes exist only in the Pulumi state; `destroy` or a replacement would lose the tailnet's
    # identity for good, so both refuse until someone unprotects them on purpose.
    protected = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(protect=True))
    key = random.RandomBytes(name, length=32, opts=protected)
    return pulumi.Output.secret(key.hex.apply(lambda value: f"privkey:{value}"))


class HeadscaleServer(pulumi.ComponentResource):
    """The Headscale Deployment and everything only it uses."""

    identity: k8s.core.v1.Secret
    config_map: k8s.core.v1.ConfigMap
    volume: k8s.core.v1.PersistentVolumeClaim | None
    backup: LitestreamBackup | None
    deployment: k8s.apps.v1.Deployment
    service: k8s.core.v1.Service
    stun_service: k8s.core.v1.Service | None = None
    api_url: str
    noise_key: pulumi.Output[str]
    derp_key: pulumi.Output[str]

    def __init__(self, name: str, args: HeadscaleServerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:headscale:HeadscaleServer", name, None, opts)
        config, namespace = args.config, args.namespace
        child = pulumi.ResourceOptions(parent=self)
        meta = {"namespace": namespace, "labels": labels(APP, "control-plane")}

        if config.identity_from is not None and config.noise_private_key is None:
            # A standby serves with the active site's identity, read from that stack's secret `identity` output.
            active = pulumi.StackReference(f"{name}-active-stack", stack_name=config.identity_from, opts=child)
            identity = active.require_output("identity")
            noise = pulumi.Output.secret(identity.apply(lambda keys: keys["noisePrivateKey"]))
            derp = pulumi.Output.secret(identity.apply(lambda keys: keys["derpPrivateKey"]))
        else:
            noise = _node_key(f"{name}-noise-key", config.noise_private_key, child)
            derp = _node_key(f"{name}-derp-key", config.derp_private_key, child)
        self.noise_key, self.derp_key = noise, derp
        self.identity = k8s.core.v1.Secret(
            f"{name}-identity",
            metadata={**meta, "name": IDENTITY_SECRET},
            type="Opaque",
            string_data={NOISE_ITEM: noise, DERP_ITEM: derp},
            # Retained: `destroy` leaves the keys in the cluster (the restore's identity check needs them).
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )
        secrets: dict[str, Any] = {}
        if config.headscale.oidc is not None and config.oidc_client_secret is not None:
            secrets["oidc"] = k8s.core.v1.Secret(
                f"{name}-oidc",
                metadata={**meta, "name": OIDC_SECRET},
                type="Opaque",
                string_data={OIDC_ITEM: pulumi.Output.secret(config.oidc_client_secret.get_secret_value())},
                opts=child,
            )

        postgres = None
        if config.database.stage is DatabaseStage.POSTGRES:
            postgres = PostgresConnection(host=read_write_host(namespace), name=DATABASE, user=OWNER)
        config_text = headscale_config_yaml(config, paths=PATHS, postgres=postgres)
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata={**meta, "name": "headscale-config"},
            data={"config.yaml": config_text},
            opts=child,
        )

        sqlite = config.database.stage in (DatabaseStage.SQLITE, DatabaseStage.MIGRATING)
        self.volume = None
        self.backup = None
        if sqlite:
            self.volume, self.backup = backed_up_volume(
                name,
                parent=self,
                meta=meta,
                config=config,
                app=APP,
                size=config.headscale.storage_size,
                data_dir=PATHS.data_dir,
                db_file="db.sqlite",
                identity_file=PATHS.noise_key,
            )

        pod_annotations = {
            "checksum/config": checksum(config_text, self.backup.config_checksum if self.backup else ""),
        }
        self.deployment = singleton_deployment(
            f"{name}-deployment",
            meta=meta,
            app=APP,
            component="control-plane",
            replicas=headscale_replicas(config),
            pod_spec=self._pod_spec(config, sqlite),
            annotations=pod_annotations,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.config_map, self.identity, *secrets.values()]),
        )
        self.service = cluster_service(
            f"{name}-service", meta=meta, app=APP, ports={"http": HTTP_PORT, "metrics": METRICS_PORT}, parent=self
        )
        if config.headscale.derp.embedded:
            self.stun_service = k8s.core.v1.Service(
                f"{name}-stun",
                metadata={**meta, "name": STUN_SERVICE, "annotations": stun_annotations(config)},
                spec={
                    "type": "LoadBalancer",
                    # Local: STUN answers with the source address it sees, so it must be the client's own.
                    "externalTrafficPolicy": "Local",
                    "selector": selector(APP),
                    "ports": [{"name": "stun", "port": STUN_PORT, "targetPort": "stun", "protocol": "UDP"}],
                },
                opts=child,
            )
        self.api_url = f"http://{APP}.{namespace}.svc.cluster.local:{HTTP_PORT}"
        self.register_outputs({"apiUrl": self.api_url, "replicas": headscale_replicas(config)})

    def _pod_spec(self, config: StackConfig, sqlite: bool) -> dict[str, Any]:
        volumes, mounts = server_files(config)
        volumes += [
            {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ]
        mounts += [{"name": "run", "mountPath": PATHS.run_dir}, {"name": "tmp", "mountPath": "/tmp"}]
        init_containers: list[dict[str, Any]] = []
        if sqlite and self.backup is not None:
            volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": "headscale-data"}})
            mounts.append({"name": "data", "mountPath": PATHS.data_dir})
            volumes.extend(self.backup.volumes)
            init_containers = self.backup.init_containers
        else:
            volumes.append({"name": "data", "emptyDir": {"sizeLimit": "64Mi"}})
            mounts.append({"name": "data", "mountPath": PATHS.data_dir})
        http_probe = {"httpGet": {"path": "/health", "port": "http"}, "timeoutSeconds": 3}
        env: list[dict[str, Any]] = []
        if config.database.stage is DatabaseStage.POSTGRES:
            # Headscale has no password file option: the owner Secret's password reaches it as an env var.
            env.append({"name": PASSWORD_ENV, "valueFrom": {"secretKeyRef": {"name": app_secret(), "key": "password"}}})
        container = {
            "name": APP,
            "image": config.headscale.image,
            "args": ["serve"],
            **({"env": env} if env else {}),
            "ports": [
                {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
                {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
                *([STUN_CONTAINER_PORT] if config.headscale.derp.embedded else []),
            ],
            "startupProbe": {**http_probe, "periodSeconds": 5, "failureThreshold": 60},
            "livenessProbe": {**http_probe, "periodSeconds": 15, "failureThreshold": 4},
            "readinessProbe": {**http_probe, "periodSeconds": 5, "failureThreshold": 2},
            "resources": resources(config.headscale.resources),
            "securityContext": container_security(),
            "volumeMounts": mounts,
        }
        return {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 30,
            "securityContext": pod_security(),
            **scheduling(config.cluster),
            "initContainers": init_containers,
            "containers": [container],
            "volumes": volumes,
        }
