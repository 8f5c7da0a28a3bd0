"""SubnetRouters as the component package exposes it: the split gateway's HA subnet routers, from plain inputs.

A facade over the Python component of components/subnet_routers.py: it validates every input first (the same value
types and replica rule as the stack config, plus the few checks that stand between a typo and a pod that fails
without saying why), then builds that component as its only child, under the same name.
"""

# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects.
from typing import NotRequired, TypedDict

import pulumi
from pydantic import Field

from headscale_ha.components import subnet_routers
from headscale_ha.components.config_types import Cidr, DnsLabel, HttpsUrl, Image
from headscale_ha.components.settings import ClusterSettings, RouterMode, SettingsModel
from headscale_ha.package import types
from headscale_ha.package.facade import child_options, dependencies, expose
from headscale_ha.package.inputs import required, settings_of, within_nodes


class SubnetRoutersArgs(TypedDict):
    """The subnet routers of one site: what they advertise, how they join the tailnet, where they run."""

    namespace: str
    """Namespace of the StatefulSets, their state Secrets and RBAC; kernel mode needs it `privileged` (PSA)."""
    replicas: int
    (
        "Router replicas, 1 to 10 and at most `cluster.nodes`; more than one spreads them one per node and adds a "
        "PodDisruptionBudget."
    )
    image: str
    """The tailscale image (containerboot), pinned to an exact version."""
    mode: RouterMode
    """`kernel` (root with NET_ADMIN and tun) or `userspace` (restricted, no tun)."""
    routes: list[str]
    """CIDRs the routers advertise (TS_ROUTES), in this order: the cluster CIDRs and the tailnet LB pool."""
    tag: str
    """The ACL tag the routers join with (`tag:<name>`); the policy's autoApprovers approve their routes by it."""
    login_server: str
    """The control server URL (`https://<public hostname>`)."""
    hostname_prefix: str
    """Tailnet node names are `<prefix>-subnet-router-<ordinal>`: the site's name, a DNS label."""
    cluster: types.Cluster
    """The cluster's placement rules: worker nodes, excluded nodes, toleration of node loss."""
    key_source: NotRequired[str]
    (
        "Where the enrolment keys come from (e.g. `minted`); a pod annotation carries it, so the pods roll when a "
        "source appears. Absent: no key yet, and Pulumi does not wait for the routers to become ready."
    )


class _RouterInputs(SettingsModel):
    """The plain inputs of SubnetRouters, checked with the stack config's value types."""

    namespace: DnsLabel
    replicas: int = Field(ge=1, le=10)
    image: Image
    mode: RouterMode
    # TS_ROUTES is comma-joined: a malformed CIDR (or one holding a comma) crash-loops tailscaled at start.
    routes: list[Cidr]
    # TS_EXTRA_ARGS is split on spaces and --advertise-tags on commas: anything else would add arguments or tags.
    tag: str = Field(pattern=r"^tag:[A-Za-z][A-Za-z0-9-]*$")
    login_server: HttpsUrl
    hostname_prefix: DnsLabel
    key_source: str | None = None


class SubnetRouters(pulumi.ComponentResource):
    """Tailscale subnet routers of one site: one StatefulSet of one pod per replica, each with its own state Secret,
    ServiceAccount and Role, spread one per node. Each replica reads its enrolment key from the Secret
    `subnet-router-authkey-<N>` (data key `authkey`), which this component does not create: the Python component
    takes the resources that write the keys so that its StatefulSets start after them, and resources cannot cross
    the schema, so put them in this component's `dependsOn` resource option instead. Every resource listed there is
    handed down as such a key writer: each StatefulSet depends on it exactly as in the Python program (anything else
    listed, the namespace say, becomes a dependency of the StatefulSets too, which only orders them after it). In a
    Python program, a `dependsOn` given as an output is not known at construction: the component still waits for
    it, and its children are registered after it, but the StatefulSets' recorded dependencies omit it."""

    namespace: pulumi.Output[str]
    """Namespace of the routers."""
    stateful_sets: pulumi.Output[list[str]]
    """The StatefulSets, one per replica in ordinal order (`subnet-router-<N>`, pod `subnet-router-<N>-0`)."""
    state_secrets: pulumi.Output[list[str]]
    """The Secrets holding each replica's node state, retained on delete so a replica keeps its node identity."""
    auth_key_secrets: pulumi.Output[list[str]]
    """The Secret each replica reads its pre-auth key from (data key `authkey`), in ordinal order: write them."""
    replicas: pulumi.Output[int]
    """How many router replicas run."""
    routes: pulumi.Output[list[str]]
    """What the routers advertise: to approve in the policy (autoApprovers) for the router tag."""

    @staticmethod
    def component_args(
        args: SubnetRoutersArgs, opts: pulumi.ResourceOptions | None = None
    ) -> subnet_routers.SubnetRoutersArgs:
        """The Python component's args from these inputs, every one checked first (the provider calls it before
        constructing, so a bad input is reported as the invalid property it is)."""
        plain = settings_of(_RouterInputs, {k: v for k, v in args.items() if k != "cluster"})
        cluster = settings_of(ClusterSettings, required(args, "cluster"), "cluster")
        within_nodes(plain.replicas, cluster, "replicas")
        return subnet_routers.SubnetRoutersArgs(
            namespace=plain.namespace,
            replicas=plain.replicas,
            image=plain.image,
            mode=plain.mode,
            routes=tuple(plain.routes),
            tag=plain.tag,
            login_server=plain.login_server,
            hostname_prefix=plain.hostname_prefix,
            cluster=cluster,
            key_source=plain.key_source,
            key_secrets=dependencies(opts),
        )

    def __init__(self, name: str, args: SubnetRoutersArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component_args = self.component_args(args, opts)
        super().__init__("headscale-ha:index:SubnetRouters", name, None, opts)
        routers = subnet_routers.SubnetRouters(name, component_args, child_options(self, opts))
        expose(
            self,
            {
                "namespace": routers.namespace,
                "stateful_sets": routers.statefulset_names,
                "state_secrets": routers.state_secret_names,
                "auth_key_secrets": routers.auth_key_secrets,
                "replicas": component_args.replicas,
                "routes": routers.routes,
            },
        )
