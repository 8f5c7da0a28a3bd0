"""The Kubernetes cluster a stack deploys to: its size, storage, placement rules and API server."""

from __future__ import annotations

from pydantic import Field

from headscale_ha.components.config_types import DnsLabel, HostAddress
from headscale_ha.components.settings.base import SettingsModel


class ApiServer(SettingsModel):
    """The cluster's Kubernetes API server, as the gateway's proxies reach it."""

    host: HostAddress = Field(
        description="Address of the cluster's API server (VIP or DNS name) the gateway proxies to."
    )
    port: int = Field(default=6443, ge=1, le=65535, description="API server port.")


class ClusterSettings(SettingsModel):
    """The Kubernetes cluster this stack deploys to."""

    name: DnsLabel | None = Field(default=None, description="Site name in `tailnet.sites`; default: the stack name.")
    nodes: int = Field(
        ge=1, le=1000, description="Schedulable worker nodes; caps every replica count that needs anti-affinity."
    )
    storage_class: str | None = Field(
        default=None, description="StorageClass for volumes; default: the cluster's default class."
    )
    workloads_on_control_plane: bool = Field(
        default=False,
        description="Allow control-plane nodes (a single-node cluster has no other); default: workers only.",
    )
    exclude_nodes: list[str] = Field(
        default_factory=list, description="Node names the control plane must never run on (e.g. a GPU worker)."
    )
    toleration_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        description="How long pods stay bound to a NotReady/unreachable node before eviction.",
    )
    api_server: ApiServer | None = Field(
        default=None, description="API server the tailnet kubeconfig reaches through the gateway."
    )
