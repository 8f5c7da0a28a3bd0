"""One realistic use of each package component, with the Python component a program builds for the same thing.

Why: the plugin test constructs each component over gRPC, as a consumer in another language would, and compares
what it registers with the Python component's registrations; ``to_wire`` writes the inputs as the consumer's SDK
sends them (the schema's camelCase names, enums as their values, maps' keys as given).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pulumi

from headscale_ha.components import (
    backup_volume,
    endpoint,
    gateway_services,
    headplane,
    headscale,
    litestream,
    subnet_routers,
)
from headscale_ha.components.settings import (
    BackupSettings,
    ClusterSettings,
    ComputeResources,
    EndpointSettings,
    FailoverMode,
    HeadscaleSettings,
    Nfs,
    Proxy,
    ResourceAmounts,
    RouterMode,
)

NFS = {"server": "nas.lan", "path": "/export/tailnet"}
RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "384Mi"}}
COMPUTE = ComputeResources(
    requests=ResourceAmounts(cpu="50m", memory="128Mi"), limits=ResourceAmounts(cpu="500m", memory="384Mi")
)
CLUSTER = {"nodes": 3, "exclude_nodes": ["gpu-1"], "toleration_seconds": 30}
HEADSCALE_URL = "http://headscale.headscale.svc.cluster.local:8080"


@dataclass(frozen=True)
class Sample:
    """A component's token and name, its inputs (snake_case, as the host hands them over) and the Python one."""

    token: str
    python_type: str
    name: str
    inputs: Callable[[], dict[str, Any]]
    python: Callable[[str], pulumi.ComponentResource]


def _headscale_server(name: str) -> headscale.HeadscaleServer:
    backup = BackupSettings(nfs=Nfs(**NFS))
    return headscale.HeadscaleServer(
        name,
        headscale.HeadscaleServerArgs(
            namespace="headscale",
            settings=HeadscaleSettings(image="ghcr.io/juanfont/headscale:0.29.2", version="0.29.2", resources=COMPUTE),
            cluster=ClusterSettings(**CLUSTER),
            database=headscale.SqliteStorage(size="1Gi", backup=backup),
            backup_key_epoch=backup.auth.key_epoch,
            server_hostname="vpn.example.org",
            base_domain="nodes.example.org",
            split_dns={"hydra.tn.example.org": ("10.10.50.10",)},
        ),
    )


PROXY = {"name": "kube-api", "port": 6443, "target_host": "10.10.0.10", "target_port": 6443}

SAMPLES: tuple[Sample, ...] = (
    Sample(
        "headscale-ha:index:LitestreamBackup",
        "headscale-ha:litestream:LitestreamBackup",
        "vault-backup",
        lambda: {
            "app": "vaultwarden",
            "part_of": "vaultwarden",
            "namespace": "vault",
            "settings": {"nfs": NFS},
            "db_path": "/data/db.sqlite3",
            "data_volume": "data",
            "data_mount": "/data",
            "backup_claim": "tailnet-backups",
        },
        lambda name: litestream.LitestreamBackup(
            name,
            litestream.LitestreamBackupArgs(
                app="vaultwarden",
                part_of="vaultwarden",
                namespace="vault",
                settings=BackupSettings(nfs=Nfs(**NFS)),
                db_path="/data/db.sqlite3",
                data_volume="data",
                data_mount="/data",
                pvc_name=None,
                backup_claim="tailnet-backups",
            ),
        ),
    ),
    Sample(
        "headscale-ha:index:BackupVolume",
        "headscale-ha:backup:BackupVolume",
        "backups",
        lambda: {"namespace": "headscale", "part_of": "headscale-ha", "nfs": NFS},
        lambda name: backup_volume.BackupVolume(
            name, backup_volume.BackupVolumeArgs(namespace="headscale", part_of="headscale-ha", nfs=Nfs(**NFS))
        ),
    ),
    Sample(
        "headscale-ha:index:HeadscaleServer",
        "headscale-ha:headscale:HeadscaleServer",
        "headscale",
        lambda: {
            "namespace": "headscale",
            "headscale": {
                "version": "0.29.2",
                "image": "ghcr.io/juanfont/headscale:0.29.2",
                "resources": RESOURCES,
            },
            "cluster": CLUSTER,
            "server_hostname": "vpn.example.org",
            "base_domain": "nodes.example.org",
            "sqlite": {"backup": {"nfs": NFS}},
            "split_dns": {"hydra.tn.example.org": ["10.10.50.10"]},
        },
        _headscale_server,
    ),
    Sample(
        "headscale-ha:index:Headplane",
        "headscale-ha:headplane:Headplane",
        "headplane",
        lambda: {
            "namespace": "headscale",
            "image": "ghcr.io/tale/headplane:0.6.3",
            "replicas": 1,
            "resources": RESOURCES,
            "cluster": CLUSTER,
            "storage_size": "256Mi",
            "public_hostname": "vpn.example.org",
            "headscale_url": HEADSCALE_URL,
            "backup": {"nfs": NFS},
        },
        lambda name: headplane.Headplane(
            name,
            headplane.HeadplaneArgs(
                namespace="headscale",
                image="ghcr.io/tale/headplane:0.6.3",
                replicas=1,
                resources=COMPUTE,
                cluster=ClusterSettings(**CLUSTER),
                storage_size="256Mi",
                public_hostname="vpn.example.org",
                headscale_url=HEADSCALE_URL,
                backup=BackupSettings(nfs=Nfs(**NFS)),
            ),
        ),
    ),
    Sample(
        "headscale-ha:index:SubnetRouters",
        "headscale-ha:gateway:SubnetRouters",
        "routers",
        lambda: {
            "namespace": "tailnet-gateway",
            "replicas": 2,
            "image": "ghcr.io/tailscale/tailscale:v1.82.5",
            "mode": RouterMode.USERSPACE,
            "routes": ["10.244.0.0/16", "10.10.50.0/24"],
            "tag": "tag:subnet-router-hydra",
            "login_server": "https://vpn.example.org",
            "hostname_prefix": "hydra",
            "cluster": CLUSTER,
        },
        lambda name: subnet_routers.SubnetRouters(
            name,
            subnet_routers.SubnetRoutersArgs(
                namespace="tailnet-gateway",
                replicas=2,
                image="ghcr.io/tailscale/tailscale:v1.82.5",
                mode=RouterMode.USERSPACE,
                routes=("10.244.0.0/16", "10.10.50.0/24"),
                tag="tag:subnet-router-hydra",
                login_server="https://vpn.example.org",
                hostname_prefix="hydra",
                cluster=ClusterSettings(**CLUSTER),
            ),
        ),
    ),
    Sample(
        "headscale-ha:index:GatewayServices",
        "headscale-ha:gateway:GatewayServices",
        "services",
        lambda: {
            "namespace": "tailnet-gateway",
            "replicas": 2,
            "coredns_image": "registry.k8s.io/coredns/coredns:v1.12.0",
            "socat_image": "docker.io/alpine/socat:1.8.0.1",
            "proxies": [PROXY],
            "dns_zone": "hydra.tn.example.org",
            "dns_hosts": {"nas": "10.10.0.20"},
            "gateway_ip": "10.10.50.10",
            "lb_pool": "10.10.50.0/24",
            "pool_name": "tailnet-hydra",
            "pool_label": "tailnet",
            "cluster": CLUSTER,
        },
        lambda name: gateway_services.GatewayServices(
            name,
            gateway_services.GatewayServicesArgs(
                namespace="tailnet-gateway",
                replicas=2,
                coredns_image="registry.k8s.io/coredns/coredns:v1.12.0",
                socat_image="docker.io/alpine/socat:1.8.0.1",
                proxies=(Proxy(**PROXY),),
                dns_zone="hydra.tn.example.org",
                dns_hosts={"nas": "10.10.0.20"},
                gateway_ip="10.10.50.10",
                lb_pool="10.10.50.0/24",
                pool_name="tailnet-hydra",
                pool_label="tailnet",
                cluster=ClusterSettings(**CLUSTER),
            ),
        ),
    ),
    Sample(
        "headscale-ha:index:PublicEndpoint",
        "headscale-ha:endpoint:PublicEndpoint",
        "public",
        lambda: {
            "namespace": "headscale",
            "hostname": "vpn.example.org",
            "headscale": {"service": "headscale", "port": 8080},
            "headplane": {"service": "headplane", "port": 3000},
            "endpoint": {"failover": FailoverMode.K8GB},
            "primary_site": "hydra",
        },
        lambda name: endpoint.PublicEndpoint(
            name,
            endpoint.PublicEndpointArgs(
                namespace="headscale",
                hostname="vpn.example.org",
                headscale=endpoint.Backend(service="headscale", port=8080),
                headplane=endpoint.Backend(service="headplane", port=3000),
                endpoint=EndpointSettings(failover=FailoverMode.K8GB),
                primary_site="hydra",
                dns_record_target=None,
            ),
        ),
    ),
)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def to_wire(value: Any, prop: Mapping[str, Any], schema: Mapping[str, Any]) -> Any:
    """``value`` as a consumer's SDK sends the property ``prop`` (a schema property, or a type with properties)."""
    if isinstance(value, Enum):
        return value.value
    if "$ref" in prop:
        token = prop["$ref"].removeprefix("#/types/")
        return to_wire(value, schema["types"][token], schema)
    if "properties" in prop and isinstance(value, Mapping):
        return {_camel(k): to_wire(v, prop["properties"][_camel(k)], schema) for k, v in value.items()}
    if prop.get("type") == "array":
        return [to_wire(item, prop["items"], schema) for item in value]
    if "additionalProperties" in prop and isinstance(value, Mapping):
        return {k: to_wire(v, prop["additionalProperties"], schema) for k, v in value.items()}
    return value


def wire_inputs(sample: Sample, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The sample's inputs as a consumer sends them to Construct."""
    resource = schema["resources"][sample.token]
    return to_wire(sample.inputs(), {"properties": resource["inputProperties"]}, schema)
