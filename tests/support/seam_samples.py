"""Hand-written Args for one component at a time, shaped like the hydra stack's (program/args.py maps the same
config to them): for the seam tests of HeadscaleServer, SubnetRouters, GatewayServices and StackMonitoring.

Why: a seam test builds its component from these (``build_component(lambda: HeadscaleServer("headscale",
headscale_server_sample()))``) and changes only what it is about (``dataclasses.replace`` or the keywords), so it
reads no stack file and plans no other component.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headscale_ha.components.alerts import AlertRulesInput
from headscale_ha.components.backup_volume import claim_name
from headscale_ha.components.gateway_services import GatewayServicesArgs
from headscale_ha.components.headplane import Headplane, HeadplaneArgs
from headscale_ha.components.headscale import (
    HeadscaleServer,
    HeadscaleServerArgs,
    IdentityFromStack,
    PolicyFile,
    SqliteStorage,
)
from headscale_ha.components.identity import identity_fingerprint
from headscale_ha.components.monitoring import MonitoringArgs
from headscale_ha.components.settings import (
    BackupSettings,
    ClusterSettings,
    ComputeResources,
    DerpSettings,
    HeadscaleSettings,
    MonitoringSettings,
    Nfs,
    Proxy,
    ResourceAmounts,
    RouterMode,
)
from headscale_ha.components.subnet_routers import SubnetRoutersArgs
from tests.support.component_run import build_component
from tools.harness import ProgramRun, secret

NFS = Nfs(server="nfs.internal.example.com", path="/export/headscale-backup")
#: The backup claim of NFS.
BACKUP_CLAIM = claim_name(NFS)
IDENTITY_STACK = "organization/headscale-ha-identity/tailnet"
RUNBOOK = "https://git.example.com/platform/headscale-ha/blob/main/docs/operations.md"


def cluster(**overrides: Any) -> ClusterSettings:
    """hydra's cluster: three nodes, one excluded, the control plane not for workloads."""
    fields: dict[str, Any] = {
        "name": "hydra",
        "nodes": 3,
        "storage_class": "ceph-block",
        "exclude_nodes": ["hydra-gpu-1"],
        "toleration_seconds": 60,
        "api_server": {"host": "10.10.0.10", "port": 6443},
    }
    return ClusterSettings.model_validate({**fields, **overrides})


#: One node that also runs the control plane (cosmos's cluster).
SINGLE_NODE = {"name": "cosmos", "nodes": 1, "exclude_nodes": [], "workloads_on_control_plane": True}


def backup(**overrides: Any) -> BackupSettings:
    """The shared config's backup: NFS, the default Litestream, disposable local storage, signed backups."""
    return BackupSettings.model_validate({"nfs": NFS.model_dump(), **overrides})


def sqlite(*, require_backup: bool = False, **overrides: Any) -> SqliteStorage:
    fields: dict[str, Any] = {"size": "1Gi", "storage_class": "ceph-block", "backup": backup()}
    return SqliteStorage(**{**fields, **overrides}, require_backup=require_backup)


def headscale_settings(**overrides: Any) -> HeadscaleSettings:
    """hydra's `headscale` section: the pinned 0.29 release, its default resources and DERP map."""
    fields: dict[str, Any] = {
        "image": "ghcr.io/juanfont/headscale:0.29.2",
        "version": "0.29.2",
        "resources": ComputeResources(
            requests=ResourceAmounts(cpu="50m", memory="128Mi"), limits=ResourceAmounts(cpu="1", memory="512Mi")
        ),
        "derp": DerpSettings(urls=["https://controlplane.tailscale.com/derpmap/default"]),
    }
    return HeadscaleSettings(**{**fields, **overrides})


def headscale_server_sample(**overrides: Any) -> HeadscaleServerArgs:
    """HeadscaleServer's Args as hydra's config maps to them (SQLite on NFS, keys from the identity stack, the
    policy in file mode)."""
    fields: dict[str, Any] = {
        "namespace": "headscale",
        "settings": headscale_settings(),
        "metrics": True,
        "replicas": 1,
        "cluster": cluster(),
        "identity": IdentityFromStack(stack_name=IDENTITY_STACK),
        "database": sqlite(),
        "server_hostname": "headscale.example.com",
        "stun_address": "198.51.100.10",
        "base_domain": "ts.example.com",
        "nameservers": ("1.1.1.1", "1.0.0.1"),
        "split_dns": {
            "hydra.tn.internal.example.com": ("172.30.250.10",),
            "cosmos.tn.internal.example.com": ("172.31.250.10",),
        },
        "policy_file": PolicyFile(config_map="headscale-policy-rendered", sha256="0" * 64),
    }
    return HeadscaleServerArgs(**{**fields, **overrides})


def subnet_routers_sample(**overrides: Any) -> SubnetRoutersArgs:
    """SubnetRouters' Args as hydra's config maps to them (two userspace routers, no key source yet)."""
    fields: dict[str, Any] = {
        "namespace": "tailnet-gateway",
        "replicas": 2,
        "image": "ghcr.io/tailscale/tailscale:v1.82.5",
        "mode": RouterMode.USERSPACE,
        "routes": ("10.244.0.0/16", "10.96.0.0/16", "172.30.250.0/28"),
        "tag": "tag:subnet-router-hydra",
        "login_server": "https://headscale.example.com",
        "hostname_prefix": "hydra",
        "cluster": cluster(),
    }
    return SubnetRoutersArgs(**{**fields, **overrides})


#: hydra's default proxies: the API server, Talos and the clustermesh API.
PROXIES = (
    Proxy(name="kube-api", port=6443, target_host="10.10.0.10", target_port=6443),
    Proxy(name="talos", port=50000, target_host="10.10.0.10", target_port=50000),
    Proxy(
        name="clustermesh",
        port=2379,
        target_host="clustermesh-apiserver.kube-system.svc.cluster.local",
        target_port=2379,
    ),
)


def gateway_services_sample(**overrides: Any) -> GatewayServicesArgs:
    """GatewayServices' Args as hydra's config maps to them."""
    fields: dict[str, Any] = {
        "namespace": "tailnet-gateway",
        "replicas": 2,
        "coredns_image": "registry.k8s.io/coredns/coredns:v1.12.0",
        "metrics": True,
        "socat_image": "docker.io/alpine/socat:1.8.0.1",
        "proxies": PROXIES,
        "dns_zone": "hydra.tn.internal.example.com",
        "dns_hosts": {},
        "gateway_ip": "172.30.250.10",
        "lb_pool": "172.30.250.0/28",
        "pool_name": "tailnet-hydra",
        "pool_label": "tailnet",
        "cluster": cluster(),
    }
    return GatewayServicesArgs(**{**fields, **overrides})


def monitoring_sample(*, settings: dict[str, Any] | None = None, **overrides: Any) -> MonitoringArgs:
    """StackMonitoring's Args as hydra's config maps to them (SQLite, Headscale and Headplane replicated)."""
    apps = ("headscale", "headplane")
    fields: dict[str, Any] = {
        "namespace": "headscale",
        "settings": MonitoringSettings.model_validate({"runbookUrl": RUNBOOK, **(settings or {})}),
        "scope": AlertRulesInput(
            namespace="headscale",
            apps=apps,
            serving=True,
            routers_namespace="tailnet-gateway",
            routers_statefulsets=("subnet-router-0", "subnet-router-1"),
            cnpg_cluster=None,
            certificate="headscale-public",
            rehearsal=True,
            runbook_url=RUNBOOK,
        ),
        "litestream_apps": apps,
        "litestream_image": "docker.io/litestream/litestream:0.5.17",
        "backup_claim": BACKUP_CLAIM,
        "cnpg_cluster": None,
        "gateway_namespace": "tailnet-gateway",
        "cluster": cluster(),
    }
    return MonitoringArgs(**{**fields, **overrides})


NOISE_KEY, DERP_KEY = "privkey:" + "ab" * 32, "privkey:" + "cd" * 32
#: The identity stack as a referencing component reads it: its secret keys and their plain fingerprint.
IDENTITY_OUTPUTS = {
    IDENTITY_STACK: {
        "identity": secret({"noisePrivateKey": NOISE_KEY, "derpPrivateKey": DERP_KEY}),
        "fingerprint": identity_fingerprint(NOISE_KEY),
    }
}


def build_referencing(build: Callable[[], object]) -> ProgramRun:
    """``build_component`` for a component that reads the identity stack (IdentityFromStack): the same lone run,
    with IDENTITY_OUTPUTS as the only other stack."""
    return build_component(build, stack_outputs=IDENTITY_OUTPUTS)


HEADSCALE_URL = "http://headscale.headscale.svc.cluster.local:8080"


def headplane_sample(**overrides: Any) -> HeadplaneArgs:
    """Headplane's Args as hydra's config maps to them (no OIDC, so no API key)."""
    fields: dict[str, Any] = {
        "namespace": "headscale",
        "image": "ghcr.io/tale/headplane:0.6.3",
        "replicas": 1,
        "resources": ComputeResources(
            requests=ResourceAmounts(cpu="50m", memory="128Mi"), limits=ResourceAmounts(cpu="500m", memory="384Mi")
        ),
        "cluster": cluster(),
        "storage_size": "256Mi",
        "storage_class": "ceph-block",
        "public_hostname": "headscale.example.com",
        "headscale_url": HEADSCALE_URL,
        "backup": backup(),
        "metrics": True,
    }
    return HeadplaneArgs(**{**fields, **overrides})


def build_pair(*, server: dict[str, Any] | None = None, headplane: dict[str, Any] | None = None) -> ProgramRun:
    """HeadscaleServer and Headplane alone, the two applications a LitestreamBackup serves, Headplane's backup
    signed with the server's backup key (as a program that runs both passes it); ``server`` and ``headplane``
    override their Args."""

    def build() -> tuple[HeadscaleServer, Headplane]:
        headscale = HeadscaleServer("headscale", headscale_server_sample(**(server or {})))
        args = headplane_sample(backup_key=headscale.backup_key, **(headplane or {}))
        return headscale, Headplane("headplane", args)

    return build_referencing(build)
