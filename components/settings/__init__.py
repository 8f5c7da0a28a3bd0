"""Typed, validated settings the components take (resources, placement, backup, DERP, OIDC, ...).

Frozen, keyword-only pydantic models, camelCase in Pulumi config. The stack's config (program/config.py) is
composed of these sections; a component takes only the ones it uses, so another program can build them by hand.

A model that is a section of the stack config is named ``<Section>Settings`` (``HeadplaneSettings`` is the
``headplane`` section; ``Headplane`` is the component), a model that is a value keeps its noun (``Site``,
``Proxy``, ``Nfs``). This package's names are its public API, re-exported here from one module per section:

- ``base``: the model base, the enums of the stack's modes, problems that name their field, shared value parts;
- ``tailnet`` and ``cluster``: the tailnet every stack shares, and the cluster of one stack;
- ``applications``: Headscale and Headplane;  ``backup``: Litestream, local storage, signed backups, VolSync;
- ``database``: the stage, CloudNativePG and the migration;  ``gateway``: routers and gateway services;
- ``failover``: automatic failover's witness Lease and its timing;
- ``endpoint``, ``policy``, ``monitoring`` (and the recovery model's inputs), ``network``: the rest.
"""

from headscale_ha.components.settings.applications import (
    DerpSettings,
    HeadplaneSettings,
    HeadscaleSettings,
    OidcSettings,
)
from headscale_ha.components.settings.backup import (
    BackupAuthSettings,
    BackupSettings,
    LitestreamSettings,
    LocalStorage,
    LocalVolumeSettings,
    Nfs,
    RehearsalSettings,
    VolSyncSettings,
)
from headscale_ha.components.settings.base import (
    PROJECT,
    SUPPORTED_HEADSCALE_MINORS,
    ComputeResources,
    DatabaseStage,
    FailoverMode,
    FieldProblem,
    FieldProblemsError,
    Location,
    ParsableHttpsUrl,
    ResourceAmounts,
    Role,
    RouteKind,
    RouterMode,
    SettingsModel,
    location_text,
)
from headscale_ha.components.settings.cluster import ApiServer, ClusterSettings
from headscale_ha.components.settings.database import (
    DatabaseSettings,
    MigrationSettings,
    ObjectStore,
    PostgresSettings,
    ReplicaSource,
)
from headscale_ha.components.settings.endpoint import EndpointSettings
from headscale_ha.components.settings.failover import FENCED_WRITERS, FailoverSettings
from headscale_ha.components.settings.gateway import (
    ROUTER_KEY_LIFETIME_BOUNDS,
    GatewayServicesSettings,
    GatewaySettings,
    Proxy,
    RoutersSettings,
    key_duration_seconds,
)
from headscale_ha.components.settings.monitoring import MonitoringSettings, RecoverySettings
from headscale_ha.components.settings.network import NetworkPolicySettings
from headscale_ha.components.settings.policy import PolicyMode, TailnetPolicySettings
from headscale_ha.components.settings.tailnet import (
    Prefixes,
    QualifiedStackName,
    Site,
    StackName,
    TailnetSettings,
    TailnetUser,
    base_domain_problem,
)

__all__ = [
    "FENCED_WRITERS",
    "PROJECT",
    "ROUTER_KEY_LIFETIME_BOUNDS",
    "SUPPORTED_HEADSCALE_MINORS",
    "ApiServer",
    "BackupAuthSettings",
    "BackupSettings",
    "ClusterSettings",
    "ComputeResources",
    "DatabaseSettings",
    "DatabaseStage",
    "DerpSettings",
    "EndpointSettings",
    "FailoverMode",
    "FailoverSettings",
    "FieldProblem",
    "FieldProblemsError",
    "GatewayServicesSettings",
    "GatewaySettings",
    "HeadplaneSettings",
    "HeadscaleSettings",
    "LitestreamSettings",
    "LocalStorage",
    "LocalVolumeSettings",
    "Location",
    "MigrationSettings",
    "MonitoringSettings",
    "NetworkPolicySettings",
    "Nfs",
    "ObjectStore",
    "OidcSettings",
    "ParsableHttpsUrl",
    "PolicyMode",
    "PostgresSettings",
    "Prefixes",
    "Proxy",
    "QualifiedStackName",
    "RecoverySettings",
    "RehearsalSettings",
    "ReplicaSource",
    "ResourceAmounts",
    "Role",
    "RouteKind",
    "RouterMode",
    "RoutersSettings",
    "SettingsModel",
    "Site",
    "StackName",
    "TailnetPolicySettings",
    "TailnetSettings",
    "TailnetUser",
    "VolSyncSettings",
    "base_domain_problem",
    "key_duration_seconds",
    "location_text",
]
