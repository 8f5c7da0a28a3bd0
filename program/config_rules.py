"""The rules that span keys of the stack config, one function each.

Each rule reads the sections it needs from ``sections`` (the config's top-level keys, validated on their own, by
config name) and returns its problems; a rule whose sections are not all there (missing, or invalid on their own
and reported already) returns nothing. ``RULES`` runs them in order; ``cross_key_problems`` is the entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import SecretStr

from headscale_ha.components.config_types import quantity_value
from headscale_ha.components.settings import (
    PROJECT,
    BackupSettings,
    DatabaseSettings,
    DatabaseStage,
    FailoverMode,
    ReplicaSource,
    Role,
)
from headscale_ha.components.witness_credentials import lease_credentials
from headscale_ha.program.config_problems import GONE, problem

Sections = Mapping[str, Any]
Rule = Callable[[Sections], list[str]]


def _have(sections: Sections, *keys: str) -> bool:
    return all(sections.get(key) is not None for key in keys)


def site_is_listed(sections: Sections) -> list[str]:
    """The cluster is one of the tailnet's sites."""
    if not _have(sections, "cluster", "tailnet"):
        return []
    names = [site.name for site in sections["tailnet"].sites]
    name = sections["cluster"].name
    if name in names:
        return []
    return [problem("cluster.name", f"is not a site in tailnet.sites ({', '.join(names)})", name)]


def replicas_fit_the_nodes(sections: Sections) -> list[str]:
    """Replicas spread one per node (required anti-affinity): never more than the cluster's nodes."""
    problems = []
    if _have(sections, "cluster", "gateway"):
        nodes = sections["cluster"].nodes
        for part in ("routers", "services"):
            replicas = getattr(sections["gateway"], part).replicas
            if replicas > nodes:
                what = f"exceeds cluster.nodes ({nodes}); replicas are spread one per node"
                problems.append(problem(f"gateway.{part}.replicas", what, replicas))
    if _have(sections, "cluster", "database"):
        instances, nodes = sections["database"].postgres.instances, sections["cluster"].nodes
        if instances > nodes:
            what = f"exceeds cluster.nodes ({nodes}); instances are spread one per node"
            problems.append(problem("database.postgres.instances", what, instances))
    return problems


def one_router_key_per_replica(sections: Sections) -> list[str]:
    if not _have(sections, "routerAuthKeys", "gateway"):
        return []
    given, replicas = len(sections["routerAuthKeys"]), sections["gateway"].routers.replicas
    if given == replicas:
        return []
    return [
        f"{PROJECT}:routerAuthKeys: needs one single-use key per router replica, in ordinal order "
        f"(gateway.routers.replicas = {replicas}), got {given} key(s)"
    ]


def default_proxies_need_the_api_server(sections: Sections) -> list[str]:
    if not _have(sections, "cluster", "gateway"):
        return []
    if sections["gateway"].services.proxies is not None or sections["cluster"].api_server is not None:
        return []
    what = "is required for the default gateway proxies (kube-api, talos); set it or list gateway.services.proxies"
    return [problem("cluster.apiServer", what, GONE)]


def role_matches_the_active_site(sections: Sections) -> list[str]:
    """Exactly one site is active: the one tailnet.activeSite names."""
    if not _have(sections, "role", "cluster", "tailnet"):
        return []
    active_site, name, role = sections["tailnet"].active_site, sections["cluster"].name, sections["role"]
    is_active_site = name == active_site
    if (role is Role.ACTIVE) == is_active_site:
        return []
    expected = Role.ACTIVE if is_active_site else Role.STANDBY
    what = (
        f"disagrees with tailnet.activeSite ({active_site}): site {name} (cluster.name) must be '{expected.value}', "
        "as exactly one site is active; to promote, change activeSite and the role of both stacks together"
    )
    return [problem("role", what, role.value)]


def identity_is_imported_or_referenced(sections: Sections) -> list[str]:
    """Both keys imported, or neither and the identity stack named; imported keys differ."""
    noise, derp = sections.get("noisePrivateKey"), sections.get("derpPrivateKey")
    problems = []
    if (noise is not None) != (derp is not None):
        given, missing = (
            ("noisePrivateKey", "derpPrivateKey") if noise is not None else ("derpPrivateKey", "noisePrivateKey")
        )
        what = f"is required with {given}: import both keys, or neither and take them from tailnet.identityStack"
        problems.append(problem(missing, what, GONE))
    if _have(sections, "tailnet") and sections["tailnet"].identity_stack is None and noise is None and derp is None:
        what = (
            "is required (the identity stack of identity/, e.g. organization/headscale-ha-identity/tailnet), or "
            "import noisePrivateKey and derpPrivateKey on this stack: a site stack never generates the tailnet's keys"
        )
        problems.append(problem("tailnet.identityStack", what, GONE))
    if noise is not None and noise == derp:
        problems.append(
            problem("derpPrivateKey", "must differ from noisePrivateKey (Headscale refuses equal keys)", derp)
        )
    return problems


def external_dns_needs_every_public_address(sections: Sections) -> list[str]:
    if not _have(sections, "endpoint", "tailnet") or sections["endpoint"].failover is not FailoverMode.EXTERNAL_DNS:
        return []
    return [
        problem(
            f"tailnet.sites[{index}].publicAddress",
            "is required with endpoint.failover externalDns: the public record points at the active site's "
            f"publicAddress, and site {site.name} may become the active one",
            GONE,
        )
        for index, site in enumerate(sections["tailnet"].sites)
        if site.public_address is None
    ]


def streaming_needs_its_host(sections: Sections) -> list[str]:
    if not _have(sections, "database"):
        return []
    postgres = sections["database"].postgres
    if postgres.replica_source is not ReplicaSource.STREAMING or postgres.streaming_host is not None:
        return []
    what = (
        "is required when database.postgres.replicaSource is streaming: the address of the active cluster's "
        "PostgreSQL as this standby reaches it (or replicaSource: archive)"
    )
    return [problem("database.postgres.streamingHost", what, GONE)]


def a_standby_never_migrates(sections: Sections) -> list[str]:
    if not _have(sections, "role", "database") or sections["role"] is not Role.STANDBY:
        return []
    if sections["database"].stage is not DatabaseStage.MIGRATING:
        return []
    what = (
        "a standby never migrates (role is standby): use sqlite or postgres; migrate the active stack, then move "
        "the standby to postgres"
    )
    return [problem("database.stage", what, "migrating")]


def monitoring_links_its_runbooks(sections: Sections) -> list[str]:
    monitoring = sections.get("monitoring")
    if monitoring is None or not monitoring.enabled or monitoring.runbook_url is not None:
        return []
    what = (
        "is required with monitoring.enabled: the URL of this project's docs/operations.md on your Git host, which "
        "every alert links to (<url>#runbook-<alert>)"
    )
    return [problem("monitoring.runbookUrl", what, GONE)]


#: The config keys of the WAL archive's S3 credentials (secrets).
CREDENTIAL_KEYS = ("objectStoreAccessKeyId", "objectStoreSecretAccessKey")


def database_stage_problems(
    database: DatabaseSettings, backup: BackupSettings, credentials: Mapping[str, object]
) -> list[str]:
    """What ``database.stage`` needs and the config lacks, one problem per key: SQLite needs the NFS target of its
    backup, the migrating stage that and the WAL archive with its credentials and the migration image, PostgreSQL
    the WAL archive. The config check reports them; program/database_stage.py refuses to map a stage without them."""
    stage, problems = database.stage, []
    sqlite_backed, on_postgres = stage is not DatabaseStage.POSTGRES, stage is not DatabaseStage.SQLITE
    if sqlite_backed and backup.nfs is None:
        what = f"is required in the {stage} stage: Litestream is the only backup of the SQLite database"
        problems.append(problem("backup.nfs", what, GONE))
    for key in CREDENTIAL_KEYS if on_postgres else ():
        if not credentials.get(key):
            what = (
                f"is required in the {stage} stage (database.stage): S3 credentials of the WAL archive "
                f"(database.postgres.objectStore); pulumi config set --secret {key} ..."
            )
            problems.append(problem(key, what, GONE))
    if stage is DatabaseStage.MIGRATING and database.migration.image is None:
        what = "is required in the migrating stage: build images/migrate/Dockerfile, push it, pin it here"
        problems.append(problem("database.migration.image", what, GONE))
    if on_postgres and database.postgres.object_store is None:
        what = f"is required in the {stage} stage: WAL archiving is the backup of the PostgreSQL cluster"
        problems.append(problem("database.postgres.objectStore", what, GONE))
    return problems


def the_stage_has_what_it_needs(sections: Sections) -> list[str]:
    """The database stage's own needs, and Headplane's backup on PostgreSQL."""
    if not _have(sections, "database", "backup"):
        return []
    credentials = {key: sections.get(key) for key in CREDENTIAL_KEYS}
    problems = database_stage_problems(sections["database"], sections["backup"], credentials)
    headplane = sections.get("headplane")
    on_postgres = sections["database"].stage is DatabaseStage.POSTGRES
    if on_postgres and sections["backup"].nfs is None and headplane is not None and headplane.enabled:
        what = (
            "is required while headplane.enabled: Litestream is the only backup of Headplane's own SQLite database "
            "(set it, or headplane.enabled: false)"
        )
        problems.append(problem("backup.nfs", what, GONE))
    return problems


def oidc_has_its_secrets(sections: Sections) -> list[str]:
    if not _have(sections, "headscale") or sections["headscale"].oidc is None:
        return []
    problems = []
    if sections.get("oidcClientSecret") is None:
        what = "is required when headscale.oidc is set (pulumi config set --secret oidcClientSecret ...)"
        problems.append(problem("oidcClientSecret", what, GONE))
    headplane = sections.get("headplane")
    no_key = sections.get("headplaneApiKey") is None and sections.get("bootstrapApiKey") is None
    if headplane is not None and headplane.enabled and headplane.oidc_login is None:
        what = (
            "must be chosen when headscale.oidc is set and Headplane is enabled: true lets whoever the identity "
            "provider admits log in to Headplane (Headplane 0.6 enforces none of headscale.oidc's allowed lists, and "
            "the first login to an empty database becomes its owner, so restrict the client to your admins at the "
            "provider); false keeps Headplane's login to Headscale API keys"
        )
        problems.append(problem("headplane.oidcLogin", what, GONE))
    if headplane is not None and headplane.enabled and headplane.oidc_login and no_key:
        what = (
            "is required when headscale.oidc is set and Headplane is enabled (Headplane's OIDC login acts with a "
            "Headscale API key), unless bootstrapApiKey lets the stack mint one"
        )
        problems.append(problem("headplaneApiKey", what, GONE))
    return problems


#: A restore holds, on the application's data volume at once, the verified copy of the newest snapshot (about the
#: database's size), Litestream's output and its temp file: three times the database leaves room for the WAL and the
#: files after the snapshot (bench/backup_auth.py prints the measured peak).
RESTORE_PEAK_FACTOR = 3


def the_volume_holds_a_restore(sections: Sections) -> list[str]:
    """Each SQLite application's data volume holds a restore of the database size recovery states."""
    if not _have(sections, "recovery", "database"):
        return []
    problems = []
    for app in ("headscale", "headplane"):
        settings = sections.get(app)
        if settings is None or not getattr(settings, "enabled", True):
            continue
        if app == "headscale" and sections["database"].stage is DatabaseStage.POSTGRES:
            continue
        database = getattr(sections["recovery"], f"{app}_database_size")
        needed = RESTORE_PEAK_FACTOR * quantity_value(database)
        if quantity_value(settings.storage_size) < needed:
            what = (
                f"cannot hold a restore of a database of recovery.{app}DatabaseSize ({database}): the restore keeps "
                f"the database, the verified copy of the newest snapshot and Litestream's output on the data volume "
                f"at once, about {RESTORE_PEAK_FACTOR} times the database; make it at least {needed / 2**20:.0f}Mi"
            )
            problems.append(problem(f"{app}.storageSize", what, settings.storage_size))
    return problems


def automatic_failover_has_what_it_needs(sections: Sections) -> list[str]:
    """With tailnet.failover.automatic: two sites at least, the witness's kubeconfig, with the failsafe a kubeconfig
    of every other site (and none of a site that is not one), SQLite, and a public endpoint that follows the Lease."""
    if not _have(sections, "tailnet") or not sections["tailnet"].failover.automatic:
        return []
    tailnet, why = sections["tailnet"], "with tailnet.failover.automatic"
    problems = []
    if len(tailnet.sites) < 2:
        what = "needs two sites in tailnet.sites at least: a site takes over from another"
        problems.append(problem("tailnet.failover.automatic", what, True))
    if sections.get("witnessKubeconfig") is None:
        what = f"is required {why}: a kubeconfig of the witness API server (docs/witness-lease.md)"
        problems.append(problem("witnessKubeconfig", what, GONE))

    if _have(sections, "cluster") and tailnet.failover.failsafe:
        name = sections["cluster"].name
        problems += _peer_problems(sections, name, [site.name for site in tailnet.sites if site.name != name])
    if _have(sections, "database") and sections["database"].stage is not DatabaseStage.SQLITE:
        what = f"must be sqlite {why}: a PostgreSQL replica cluster is promoted by hand (docs/failover.md)"
        problems.append(problem("database.stage", what, sections["database"].stage.value))
    if _have(sections, "endpoint") and sections["endpoint"].failover is FailoverMode.EXTERNAL_DNS:
        what = (
            f"externalDns does not follow the Lease {why}: the record points at tailnet.activeSite; use k8gb (it "
            "follows the serving pod's readiness) or none (the public name is yours to move)"
        )
        problems.append(problem("endpoint.failover", what, "externalDns"))
    return problems


def _peer_problems(sections: Sections, name: str, others: list[str]) -> list[str]:
    """With the failsafe, a kubeconfig per other site."""
    given = sections.get("peerKubeconfigs") or {}
    problems = [
        problem(
            f"peerKubeconfigs.{site}",
            f"is required with tailnet.failover.failsafe: a kubeconfig of {site}'s cluster with the token of its "
            f"account headscale-failsafe-{name}",
            GONE,
        )
        for site in others
        if site not in given
    ]
    return problems


def lease_kubeconfigs_are_usable(sections: Sections) -> list[str]:
    """Every kubeconfig set for the witness lease (with automatic failover on or not yet) is one the lease script
    can use, and names the witness or another site."""
    problems = []
    if sections.get("witnessKubeconfig") is not None:
        problems += _kubeconfig_problems("witnessKubeconfig", sections["witnessKubeconfig"])
    given = sections.get("peerKubeconfigs") or {}
    if given and _have(sections, "cluster", "tailnet"):
        name = sections["cluster"].name
        others = [site.name for site in sections["tailnet"].sites if site.name != name]
        problems += [
            problem(f"peerKubeconfigs.{extra}", f"is not another site of tailnet.sites ({', '.join(others)})", GONE)
            for extra in sorted(given)
            if extra not in others
        ]
    for site in sorted(given):
        problems += _kubeconfig_problems(f"peerKubeconfigs.{site}", given[site])
    return problems


def _kubeconfig_problems(key: str, kubeconfig: SecretStr) -> list[str]:
    """What the lease script cannot use in a kubeconfig (components/witness_credentials.py), named, never shown."""
    try:
        lease_credentials(kubeconfig.get_secret_value(), key=key)
    except ValueError as refused:
        return [problem(key, str(refused).removeprefix(f"{key}: "), kubeconfig, secret=True)]
    return []


#: Every rule across keys, in the order they run (ConfigError sorts the problems it reports).
RULES: tuple[Rule, ...] = (
    site_is_listed,
    replicas_fit_the_nodes,
    one_router_key_per_replica,
    default_proxies_need_the_api_server,
    role_matches_the_active_site,
    identity_is_imported_or_referenced,
    external_dns_needs_every_public_address,
    streaming_needs_its_host,
    a_standby_never_migrates,
    monitoring_links_its_runbooks,
    the_stage_has_what_it_needs,
    oidc_has_its_secrets,
    the_volume_holds_a_restore,
    automatic_failover_has_what_it_needs,
    lease_kubeconfigs_are_usable,
)


def cross_key_problems(sections: Sections) -> list[str]:
    """Every rule's problems; each rule runs when the keys it reads validated on their own."""
    return [found for rule in RULES for found in rule(sections)]
