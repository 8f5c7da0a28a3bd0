"""TailnetSite: one cluster's part of the tailnet control plane, built from SiteArgs (program/site_args.py).

The site builds the components its args name and sets the edges between them: what a component takes from
another (a ConfigMap a pod waits for, a key one makes and another reads, a Secret the routers start after) and the
order `up` creates them in (and `destroy` deletes them in reverse). It reads no stack config.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from headscale_ha.components.backup_volume import BackupVolume
from headscale_ha.components.endpoint import PublicEndpoint
from headscale_ha.components.gateway_services import GatewayServices
from headscale_ha.components.headplane import Headplane
from headscale_ha.components.headscale import HeadscaleServer, HeadscaleServerArgs
from headscale_ha.components.monitoring import StackMonitoring
from headscale_ha.components.network_policy import NetworkPolicies
from headscale_ha.components.pod import kept, object_name
from headscale_ha.components.postgres import PostgresDatabase
from headscale_ha.components.sqlite_to_postgres import SqliteToPostgres
from headscale_ha.components.subnet_routers import SubnetRouters, router_key_secrets
from headscale_ha.components.tailnet_objects import TailnetObjects
from headscale_ha.components.tailnet_policy import TailnetPolicy, live_policy
from headscale_ha.program.database_stage import Migrating, OnSqlite
from headscale_ha.program.lease_gates import lease_gate
from headscale_ha.program.outputs import stack_outputs
from headscale_ha.program.site_args import KubernetesArgs, NamespaceArgs, SiteArgs
from headscale_ha.program.standby import StandbyGate, standby_gate


def kubernetes_provider(name: str, args: KubernetesArgs, opts: pulumi.ResourceOptions) -> k8s.Provider:
    """The one Kubernetes provider of the stack, from its first `pulumi up` (the ambient kubeconfig file at the site's
    context when none is set).

    - ``enableConfigMapMutable`` / ``enableSecretMutable``: a data change of a ConfigMap or Secret is an update in
      place. Without them pulumi-kubernetes replaces the object, and an object with a fixed name is deleted
      before it is created again (a retained one, such as ``headscale-identity``, cannot be replaced at all).
      The pods that read them roll by their checksum annotations.
    - ``clusterIdentifier``: the cluster is the site. pulumi-kubernetes replaces a provider (and with it every
      object of the stack) when the active cluster of its kubeconfig changes, which a rotated CA or a new API
      address also does; with an identifier it never does while the identifier stays the same.
    - ``context``: without ``kubeconfig``, the ambient kubeconfig file's context named for the site, never its
      current context: one shell runs both stacks (``make promote``), and the current context would send the
      standby's objects into the active's cluster. A missing context fails the run, naming it.
    - A resource's provider never changes between runs: setting ``kubeconfig`` later updates this provider.
    """
    kubeconfig = pulumi.Output.secret(args.kubeconfig) if args.kubeconfig is not None else None
    return k8s.Provider(
        f"{name}-kubernetes",
        kubeconfig=kubeconfig,
        context=args.context,
        enable_config_map_mutable=True,
        enable_secret_mutable=True,
        cluster_identifier=args.cluster_identifier,
        opts=opts,
    )


def _after(opts: pulumi.ResourceOptions, *resources: pulumi.Input[pulumi.Resource]) -> pulumi.ResourceOptions:
    """``opts``, also waiting for ``resources`` (up creates them first, destroy deletes them last)."""
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(resources)))


class TailnetSite(pulumi.ComponentResource):
    """Wires the components of one cluster; everything it creates is a child of it."""

    namespace: k8s.core.v1.Namespace
    headscale: HeadscaleServer
    headplane: Headplane | None
    policy: TailnetPolicy
    database: PostgresDatabase | None
    objects: TailnetObjects | None
    outputs: dict[str, Any]

    def __init__(self, name: str, args: SiteArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:site:TailnetSite", name, None, opts)
        self._name = name
        if args.example_warning is not None:
            pulumi.log.warn(args.example_warning, resource=self)
        # A standby must be able to take over: same release, a stage that follows, the same identity. The check is
        # a gate: the provider, so every resource of the stack, waits for it, and a mismatch fails the run before
        # any step, naming every difference (program/standby.py).
        parent = pulumi.ResourceOptions(parent=self)
        gate = standby_gate(name, args.standby_gate, parent) if args.standby_gate is not None else None
        # Entering or leaving automatic failover, the other sites go first (program/lease_gates.py).
        lease = lease_gate(name, args.lease_order, parent) if args.lease_order is not None else None
        opens = [opened for opened in (gate.opens if gate else None, lease) if opened is not None]
        provider = kubernetes_provider(name, args.kubernetes, _after(parent, *opens))
        child = pulumi.ResourceOptions(parent=self, provider=provider)

        in_namespace = self._control_plane_namespace(args, child)
        serving = self._control_plane(args, in_namespace)
        in_gateway, in_routers = self._gateway_namespaces(args, child)
        key_secrets = self._tailnet_objects(args, in_namespace, in_routers, serving)
        # The routers read their key when they start: they start after it exists (see SubnetRouters for how a
        # key that arrives later reaches routers that started without one).
        SubnetRouters(f"{name}-routers", replace(args.routers, key_secrets=tuple(key_secrets)), opts=in_routers)
        GatewayServices(f"{name}-gateway", args.gateway, opts=in_gateway)
        self.headplane = self._headplane(args, in_namespace)
        if args.monitoring is not None:
            expiries = tuple(self.objects.key_expiries) if self.objects is not None else ()
            monitoring = replace(args.monitoring, key_expiries=expiries)
            StackMonitoring(
                f"{name}-monitoring", monitoring, opts=pulumi.ResourceOptions.merge(in_namespace, in_gateway)
            )
        if args.network_policies is not None:
            # Default-deny and the allows of every namespace the stack owns (the kernel routers' one included).
            everywhere = pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions.merge(in_namespace, in_gateway), in_routers
            )
            NetworkPolicies(f"{name}-network", args.network_policies, opts=everywhere)
        self.outputs = self._outputs(args, gate)
        self.register_outputs(self.outputs)

    def _namespace(self, suffix: str, args: NamespaceArgs, child: pulumi.ResourceOptions) -> k8s.core.v1.Namespace:
        """A namespace that holds state is retained: deleting one would delete the claims, the identity Secret and
        the routers' node state inside it, whatever their own options say."""
        keep = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=True))
        metadata = kept({"name": args.name, "labels": dict(args.labels)})
        return k8s.core.v1.Namespace(f"{self._name}-{suffix}", metadata=metadata, opts=keep)

    def _control_plane_namespace(self, args: SiteArgs, child: pulumi.ResourceOptions) -> pulumi.ResourceOptions:
        """The control plane's namespace and the backup claim every restore reads: what its objects wait for."""
        self.namespace = self._namespace("namespace", args.namespace, child)
        in_namespace = _after(child, self.namespace)
        if args.backup_volume is None:
            return in_namespace
        return _after(in_namespace, BackupVolume(f"{self._name}-backup", args.backup_volume, opts=in_namespace))

    def _control_plane(self, args: SiteArgs, in_namespace: pulumi.ResourceOptions) -> list[pulumi.Resource]:
        """The database, the policy, Headscale and its public endpoint, the migration; returns what serves the API."""
        name = self._name
        self.database = None
        if not isinstance(args.database, OnSqlite):
            self.database = PostgresDatabase(f"{name}-database", args.database.cluster, opts=in_namespace)
        # Before the server: in file mode its pod mounts the policy ConfigMap and waits for it.
        self.policy = TailnetPolicy(f"{name}-policy", args.policy, opts=in_namespace)
        headscale = _policy_published_by(args.headscale, self.policy.config_map)
        self.headscale = HeadscaleServer(f"{name}-headscale", headscale, opts=in_namespace)
        # Headscale's API answers at the public URL once the server rolled out and the route exists: everything the
        # provider does over the API depends on both, so `up` creates it after them and `destroy` deletes it first.
        endpoint = PublicEndpoint(f"{name}-endpoint", args.endpoint, opts=in_namespace)
        serving: list[pulumi.Resource] = [self.headscale.deployment, endpoint]
        # After the server: the provider compares with (or in `apply` writes) the policy of the server rolled out.
        live_policy(self.policy, args.policy, after=serving, parent=self)
        if isinstance(args.database, Migrating) and self.database is not None:
            # Awaited by Pulumi: the stage is done when the Job succeeded; Headscale stays at 0 until then.
            after = _after(in_namespace, self.database.cluster, self.headscale.deployment)
            SqliteToPostgres(f"{name}-migration", args.database.migration, opts=after)
        return serving

    def _gateway_namespaces(
        self, args: SiteArgs, child: pulumi.ResourceOptions
    ) -> tuple[pulumi.ResourceOptions, pulumi.ResourceOptions]:
        """The gateway's namespace, and the kernel-mode routers' own: the options of what runs in each."""
        in_gateway = _after(child, self._namespace("gateway-namespace", args.gateway_namespace, child))
        if args.routers_namespace is None:
            return in_gateway, in_gateway
        return in_gateway, _after(child, self._namespace("routers-namespace", args.routers_namespace, child))

    def _tailnet_objects(
        self,
        args: SiteArgs,
        in_namespace: pulumi.ResourceOptions,
        in_routers: pulumi.ResourceOptions,
        serving: list[pulumi.Resource],
    ) -> list[k8s.core.v1.Secret]:
        """What the stack manages in Headscale through the API, once it serves (with API access), or else the user's
        router keys; returns the Secrets the routers' keys are written to."""
        self.objects = None
        if args.tailnet_objects is not None:
            opts = _after(pulumi.ResourceOptions.merge(in_namespace, in_routers), *serving)
            self.objects = TailnetObjects(f"{self._name}-tailnet", args.tailnet_objects, opts=opts)
            return self.objects.router_key_secrets
        if args.router_keys is None:
            return []
        keys = args.router_keys
        return router_key_secrets(f"{self._name}-router-key", keys.namespace, list(keys.keys), in_routers)

    def _headplane(self, args: SiteArgs, in_namespace: pulumi.ResourceOptions) -> Headplane | None:
        """Headplane, with the API key the provider minted (else the configured one) and the tailnet's backup key."""
        if args.headplane is None:
            return None
        minted = self.objects.headplane_api_key if self.objects is not None else None
        headplane = replace(
            args.headplane,
            api_key=minted if minted is not None else args.headplane.api_key,
            backup_key=self.headscale.backup_key,  # the tailnet's, as Headscale's (HeadscaleServer.backup_key)
        )
        return Headplane(f"{self._name}-headplane", headplane, opts=in_namespace)

    def _outputs(self, args: SiteArgs, gate: StandbyGate | None) -> dict[str, Any]:
        return stack_outputs(
            self._name,
            args.outputs,
            namespace=self.namespace.metadata.apply(object_name),
            headscale=self.headscale,
            headplane=self.headplane,
            policy=self.policy,
            gate=gate,
        )


def _policy_published_by(args: HeadscaleServerArgs, config_map: pulumi.Resource) -> HeadscaleServerArgs:
    """Headscale's args with its policy file (file mode) published by ``config_map``: the pod waits for it."""
    if args.policy_file is None:
        return args
    return replace(args, policy_file=replace(args.policy_file, published_by=config_map))
