"""Headplane as the component package exposes it: the web UI at /admin, its volume and its backup, from plain inputs.

The Python component (components/headplane.py) is built unchanged as the child of the same name; this facade only
turns what a schema can carry into its args, checking every input first with the stack config's own rules, so a
consumer in another language gets the resources the Python program deploys and its mistakes named at their path.
"""

# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects.
import re
from typing import NotRequired, TypedDict

import pulumi
from pulumi.errors import InputPropertyError

from headscale_ha.components import headplane
from headscale_ha.components import settings as models
from headscale_ha.components.config_types import DnsLabel, Fqdn
from headscale_ha.package import types
from headscale_ha.package.facade import child_options, expose
from headscale_ha.package.inputs import checked_value, dated_override, optional_settings, required, settings_of

#: Where Headplane reaches Headscale: an http(s) URL (in the cluster Headscale serves plain http on its Service).
_HEADSCALE_URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")


class HeadplaneArgs(TypedDict):
    """One Headplane: its image and sizing, where it runs, the Headscale it manages, its backup and its secrets.

    Pulumi resources cannot cross the schema: make the component wait for what it needs (the namespace, the backup
    claim, Headscale) with `dependsOn` on the component."""

    namespace: str
    """Namespace of the Deployment, its Secret, ConfigMap, claim and Service."""
    image: str
    """Headplane image, a 0.6 release (its config keys are checked against 0.6.3): `ghcr.io/tale/headplane:0.6.3`."""
    replicas: int
    (
        "1 to serve, 0 to keep every object and the data but run no pod (a standby site). Never more than 1: "
        "Headplane's SQLite database has a single writer."
    )
    resources: types.ComputeResources
    """The Headplane container's requests and limits (limits not below requests)."""
    cluster: types.Cluster
    """Placement: schedulable nodes, excluded nodes, how long a pod stays bound to a lost node."""
    storage_size: str
    """Size of Headplane's own SQLite volume, a Kubernetes quantity (e.g. `256Mi`)."""
    storage_class: NotRequired[str]
    """StorageClass of that volume on persistent storage; default: the cluster's default class."""
    public_hostname: str
    """Public name: Headplane answers at `https://<publicHostname>/admin` (its OIDC callback is derived from it)."""
    headscale_url: str
    """In-cluster http(s) URL of Headscale's HTTP port, e.g. `http://headscale.tailnet.svc.cluster.local:8080`."""
    oidc: NotRequired[types.Oidc]
    """OIDC login through Headscale's OIDC client; absent: API-key login only."""
    oidc_client_secret: NotRequired[pulumi.Input[str]]
    (
        "That OIDC client's secret, stored in the Secret (a Pulumi secret: mark it secret); only with `oidc`, "
        "ignored otherwise."
    )
    api_key: NotRequired[pulumi.Input[str]]
    (
        "Headscale API key Headplane's OIDC logins act with (a Pulumi secret: mark it secret); stored and mounted "
        "only with `oidc`, as Headplane 0.6 reads it for nothing else."
    )
    backup: types.Backup
    (
        "Litestream settings, local storage (disposable or persistent) and the NFS target: `backup.nfs` is "
        "required (the backup claim it names, e.g. from a BackupVolume, must exist: `dependsOn` it)."
    )
    metrics: NotRequired[bool]
    """Serve the Litestream sidecar's metrics behind the headless Service `headplane-litestream`. Default: `false`."""
    require_backup: NotRequired[bool]
    """The restore refuses to start empty: a standby must restore, never start empty. Default: `false`."""
    allow_empty_start: NotRequired[str]
    (
        "After a real loss of both Headplane's volume and its backup on a site that has served: today's UTC date "
        "(YYYY-MM-DD) lets the restore start empty on that date only; absent: refused (exit 24)."
    )
    backup_key: NotRequired[pulumi.Input[str]]
    (
        "The tailnet's backup key (a Pulumi secret: mark it secret): Headplane's replica is signed and its restores "
        "authenticated with it; absent: no authentication."
    )


def headplane_args(args: HeadplaneArgs) -> headplane.HeadplaneArgs:
    """The Python component's args from the package's inputs, every input checked (nothing is registered yet)."""
    # Image, resources and storage size are checked as the stack's `headplane` settings (a 0.6.x image only).
    sized = settings_of(
        models.HeadplaneSettings,
        {"image": args["image"], "resources": args["resources"], "storage_size": args["storage_size"]},
    )
    replicas = args["replicas"]
    if replicas not in (0, 1):
        raise InputPropertyError(
            "replicas", f"replicas: must be 1 (serve) or 0 (a standby: no pod), got {replicas!r}: SQLite has one writer"
        )
    cluster = settings_of(models.ClusterSettings, args["cluster"], "cluster")
    public_hostname = checked_value(Fqdn, args["public_hostname"], "public_hostname")
    headscale_url = args["headscale_url"]
    if not _HEADSCALE_URL.match(headscale_url):
        raise InputPropertyError(
            "headscaleUrl",
            f"headscaleUrl: must be an http:// or https:// URL of Headscale's HTTP port, got {headscale_url!r}",
        )
    oidc = optional_settings(models.OidcSettings, args, "oidc")
    required(args["backup"], "nfs", "backup")  # the replica's home: replicated_sqlite refuses a backup without it
    backup = settings_of(models.BackupSettings, args["backup"], "backup")
    allow_empty_start = args.get("allow_empty_start")
    if allow_empty_start is not None:
        dated_override(allow_empty_start, "allow_empty_start")
    return headplane.HeadplaneArgs(
        namespace=checked_value(DnsLabel, args["namespace"], "namespace"),
        image=sized.image,
        replicas=replicas,
        resources=sized.resources,
        cluster=cluster,
        storage_size=sized.storage_size,
        storage_class=args.get("storage_class"),
        public_hostname=public_hostname,
        headscale_url=headscale_url,
        oidc=oidc,
        oidc_client_secret=args.get("oidc_client_secret"),
        api_key=args.get("api_key"),
        backup=backup,
        metrics=bool(args.get("metrics", False)),
        require_backup=bool(args.get("require_backup", False)),
        allow_empty_start=allow_empty_start,
        backup_key=args.get("backup_key"),
    )


class Headplane(pulumi.ComponentResource):
    """Headplane, the web UI at `https://<publicHostname>/admin`: a single-replica Deployment with its Secret, its
    ConfigMap, its own SQLite volume (disposable or persistent), restored from its Litestream backup before it
    serves and replicated while it runs, its restore rehearsal, and its Service.

    It manages Headscale through Headscale's API only (Headplane's "limited mode"): route to `serviceName` /
    `servicePort` at the `/admin` prefix of the public hostname. Pulumi resources cannot be inputs of a component
    package: make it wait for the namespace, the backup claim and Headscale with `dependsOn`."""

    url: pulumi.Output[str]
    """Where users reach the UI: `https://<publicHostname>/admin`."""
    service_name: pulumi.Output[str]
    """The in-cluster Service (HTTP) a route or a NetworkPolicy points at."""
    service_port: pulumi.Output[int]
    """That Service's HTTP port."""
    secret_name: pulumi.Output[str]
    """The Secret with the cookie secret and, with OIDC, the API key and the OIDC client secret."""
    config_map_name: pulumi.Output[str]
    """The ConfigMap with the rendered config.yaml."""
    data_claim_name: pulumi.Output[str] | None
    (
        "The claim of Headplane's own SQLite volume on persistent storage (what VolSync or a manual copy reaches); "
        "absent on disposable storage, whose volume the restore fills from the backup in every new pod."
    )

    @staticmethod
    def component_args(args: HeadplaneArgs, opts: pulumi.ResourceOptions | None = None) -> headplane.HeadplaneArgs:
        """The Python component's args from these inputs, every one checked first (the provider calls it before
        constructing, so a bad input is reported as the invalid property it is)."""
        return headplane_args(args)

    def __init__(self, name: str, args: HeadplaneArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component_args = self.component_args(args, opts)
        super().__init__("headscale-ha:index:Headplane", name, None, opts)
        ui = headplane.Headplane(name, component_args, child_options(self, opts))
        expose(
            self,
            {
                "url": ui.url,
                "service_name": ui.service_name,
                "service_port": ui.service_port,
                "secret_name": ui.secret_name,
                "config_map_name": ui.config_map_name,
                "data_claim_name": ui.data_claim_name,
            },
        )
