"""Headplane: the web UI at /admin, with its own SQLite database and its own Litestream directory.

It runs in its own Deployment (not in Headscale's pod), so it scales and restarts independently and needs no
access to Headscale's process; the price is Headplane's "limited mode" (no editing of Headscale's config file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.headplane_config import HeadplanePaths, headplane_config_yaml
from components.litestream import LitestreamBackup, backed_up_volume
from components.pod import checksum, container_security, labels, pod_security, resources, scheduling
from components.settings import Role
from components.workload import cluster_service, singleton_deployment
from program.config import StackConfig

APP = "headplane"
PORT = 3000
PATHS = HeadplanePaths()
SECRET_NAME = "headplane-secrets"
CONFIG_FILE = "/etc/headplane/config.yaml"


@dataclass(frozen=True, kw_only=True)
class HeadplaneArgs:
    config: StackConfig
    namespace: str
    headscale_url: str  # in-cluster URL of Headscale's HTTP port
    api_key: pulumi.Output[str] | None = None  # minted by the provider; else the headplaneApiKey config


def headplane_replicas(config: StackConfig) -> int:
    return 0 if config.role is Role.STANDBY else 1


class Headplane(pulumi.ComponentResource):
    """The Headplane Deployment, its secrets, its volume and its backup."""

    secrets: k8s.core.v1.Secret
    config_map: k8s.core.v1.ConfigMap
    volume: k8s.core.v1.PersistentVolumeClaim
    backup: LitestreamBackup
    deployment: k8s.apps.v1.Deployment
    service: k8s.core.v1.Service

    def __init__(self, name: str, args: HeadplaneArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:headplane:Headplane", name, None, opts)
        config, namespace = args.config, args.namespace
        child = pulumi.ResourceOptions(parent=self)
        meta = {"namespace": namespace, "labels": labels(APP, "ui")}

        # Exactly 32 characters: Headplane's schema demands it; letters and digits survive any trimming.
        cookie = random.RandomPassword(f"{name}-cookie-secret", length=32, special=False, opts=child)
        items = {"cookie-secret": pulumi.Output.secret(cookie.result)}
        if args.api_key is not None:
            items["headscale-api-key"] = args.api_key
        elif config.headplane_api_key is not None:
            items["headscale-api-key"] = pulumi.Output.secret(config.headplane_api_key.get_secret_value())
        if config.headscale.oidc is not None and config.oidc_client_secret is not None:
            items["oidc-client-secret"] = pulumi.Output.secret(config.oidc_client_secret.get_secret_value())
        self.secrets = k8s.core.v1.Secret(
            f"{name}-secrets", metadata={**meta, "name": SECRET_NAME}, type="Opaque", string_data=items, opts=child
        )
        config_text = headplane_config_yaml(config, headscale_url=args.headscale_url, paths=PATHS)
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata={**meta, "name": "headplane-config"},
            data={"config.yaml": config_text},
            opts=child,
        )
        self.volume, self.backup = backed_up_volume(
            name,
            parent=self,
            meta=meta,
            config=config,
            app=APP,
            size=config.headplane.storage_size,
            data_dir=PATHS.data_dir,
            db_file="hp_persist.db",
        )
        secret_files = {
            "cookie-secret": PATHS.cookie_secret,
            "headscale-api-key": PATHS.api_key,
            "oidc-client-secret": PATHS.oidc_client_secret,
        }
        pod_spec = self._pod_spec(config, {k: v for k, v in secret_files.items() if k in items})
        self.deployment = singleton_deployment(
            f"{name}-deployment",
            meta=meta,
            app=APP,
            component="ui",
            replicas=headplane_replicas(config),
            pod_spec=pod_spec,
            annotations={"checksum/config": checksum(config_text, self.backup.config_checksum)},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.config_map, self.secrets]),
        )
        self.service = cluster_service(f"{name}-service", meta=meta, app=APP, ports={"http": PORT}, parent=self)
        self.register_outputs({"url": f"https://{config.tailnet.public_hostname}/admin"})

    def _pod_spec(self, config: StackConfig, secret_files: dict[str, str]) -> dict[str, Any]:
        secret_dir = PATHS.cookie_secret.rsplit("/", 1)[0]
        volumes: list[dict[str, Any]] = [
            {"name": "config", "configMap": {"name": "headplane-config", "defaultMode": 0o444}},
            {
                "name": "secrets",
                "secret": {
                    "secretName": SECRET_NAME,
                    "defaultMode": 0o440,
                    "items": [{"key": key, "path": path.rsplit("/", 1)[1]} for key, path in secret_files.items()],
                },
            },
            {"name": "data", "persistentVolumeClaim": {"claimName": "headplane-data"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
            *self.backup.volumes,
        ]
        container = {
            "name": APP,
            "image": config.headplane.image,
            "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
            # Liveness must not depend on Headscale: /admin/healthz fails whenever Headscale is down.
            "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 15, "failureThreshold": 4},
            "readinessProbe": {"httpGet": {"path": "/admin/healthz", "port": "http"}, "periodSeconds": 10},
            "resources": resources(config.headplane.resources),
            "securityContext": container_security(),
            "volumeMounts": [
                {"name": "config", "mountPath": CONFIG_FILE, "subPath": "config.yaml", "readOnly": True},
                {"name": "secrets", "mountPath": secret_dir, "readOnly": True},
                {"name": "data", "mountPath": PATHS.data_dir},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        }
        return {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security(),
            **scheduling(config.cluster),
            "initContainers": self.backup.init_containers,
            "containers": [container],
            "volumes": volumes,
        }
