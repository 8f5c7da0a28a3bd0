"""ServingLease: what a serving pod needs in its own cluster to run behind the witness lease (docs/witness-lease.md),
and the gating of its pod spec.

It deploys the lease script, the witness's credentials and (with the failsafe) each other site's, the renewer's
ServiceAccount, Role and the admission policy that narrows its pod deletes to its own pod, and, per other site, the
account that site vouches through: ``get`` and ``patch`` on this site's failsafe Lease, nothing else. The Lease on
the witness and the accounts there are the witness owner's (docs/witness-lease.md "Its credentials").

A pod that only follows its site's holder (``ServedPod.follows``: Headplane) gets the same, but no failsafe: no
other site's credentials and no failsafe Lease in its Role.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import PodSpecArgsDict, ResourceRequirementsArgsDict

from headscale_ha.components.pod import labels
from headscale_ha.components.settings import FENCED_WRITERS, FailoverSettings
from headscale_ha.components.shell_scripts import packaged_script
from headscale_ha.components.witness_credentials import (
    ApiCredentials,
    lease_credentials,
    peers_secret_data,
    witness_secret_data,
)
from headscale_ha.components.witness_lease import (
    SCRIPT_FILE,
    SERVE_FROM_MOUNT,
    LeaseWiring,
    gated_pod_spec,
    lease_role,
    own_pod_policy,
    renewer_role,
    renewer_role_binding,
    serve_from_mounts,
)

#: The stack's secret config keys the kubeconfigs come from (every problem with one names its key, never its value).
WITNESS_KUBECONFIG_KEY = "witnessKubeconfig"
PEER_KUBECONFIGS_KEY = "peerKubeconfigs"

#: The fields of the builders' bodies, as the SDK's resource arguments name them.
_SDK_FIELDS = {"rules": "rules", "roleRef": "role_ref", "subjects": "subjects", "spec": "spec"}


@dataclass(frozen=True, kw_only=True)
class PeerSite:
    """Another site of the tailnet, as this site's renewer reaches it for the failsafe."""

    #: A kubeconfig of that site's cluster (a Pulumi secret): https server, CA data and the token of the account
    #: that site made for this one (``<app>-failsafe-<this site>``), allowed that site's failsafe Lease only.
    kubeconfig: pulumi.Input[str]
    #: The namespace of that site's serving pod, where its failsafe Lease is; None: the kubeconfig's current
    #: context's namespace, else this site's.
    namespace: str | None = None


@dataclass(frozen=True, kw_only=True)
class ServingLeaseArgs:
    """One site's place behind the witness Lease."""

    site: str  # this site's name (a DNS label): its identity's first part, its directory to the other sites
    failover: FailoverSettings  # the Lease, its timing and the failsafe: the same at every site
    #: A kubeconfig of the witness API server (a Pulumi secret): https server, CA data and a token allowed the
    #: Lease of ``failover`` only (components/witness_lease.py ``lease_role``).
    witness_kubeconfig: pulumi.Input[str]
    #: With the failsafe, every other site, by name (its kubeconfig); without it, none is read.
    peers: Mapping[str, PeerSite] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ServedPod:
    """The pod the lease gates, as its owner builds it."""

    app: str  # names every object: `<app>-lease-*`
    namespace: str
    image: str  # a shell-and-curl image for the gate and the renewer
    resources: ResourceRequirementsArgsDict  # each lease container's requests and limits
    #: The pod's ServiceAccount, when it has one already (the renewer's Role is bound to it); None: one is made.
    service_account: str | None
    #: Volume name -> directory in ``serving``: the config the gate copies, that every container then reads from
    #: ``serving`` only.
    served: Mapping[str, str]
    #: What a fence stops, in order, by process or script name (no more names than FENCED_WRITERS: the timing's
    #: margin is checked for that many).
    writers: tuple[str, ...] = FENCED_WRITERS
    #: Serves where its site holds the Lease without holding it (``follow``/``watch``): Headplane beside Headscale.
    follows: bool = False

    def __post_init__(self) -> None:
        if len(self.writers) > len(FENCED_WRITERS):
            raise ValueError(f"writers {self.writers}: at most {len(FENCED_WRITERS)}, the stops the timing allows")


@dataclass(frozen=True)
class _Objects:
    """Makes a component's Kubernetes objects: named ``<prefix>-<role>``, its metadata, children of ``parent``."""

    prefix: str
    meta: dict[str, Any]
    parent: pulumi.Resource

    def make(
        self, kind: Any, role: str, metadata: dict[str, Any], *, cluster_scoped: bool = False, **fields: Any
    ) -> pulumi.Resource:
        meta = {**self.meta, **metadata}
        if cluster_scoped:
            del meta["namespace"]
        made: pulumi.Resource = kind(
            f"{self.prefix}-{role}", metadata=meta, **fields, opts=pulumi.ResourceOptions(parent=self.parent)
        )
        return made

    def from_body(self, kind: Any, role: str, body: dict[str, Any], *, cluster_scoped: bool = False) -> pulumi.Resource:
        """An object of a pure builder's body (components/witness_lease.py), its fields passed as the SDK names
        them."""
        fields = {_SDK_FIELDS[key]: value for key, value in body.items() if key in _SDK_FIELDS}
        return self.make(kind, role, body["metadata"], cluster_scoped=cluster_scoped, **fields)

    def account(self, role: str, name: str) -> pulumi.Resource:
        """A ServiceAccount whose token is never automounted (the pods project the one they need)."""
        return self.make(k8s.core.v1.ServiceAccount, role, {"name": name}, automount_service_account_token=False)


class ServingLease(pulumi.ComponentResource):
    """The objects of the module docstring; ``gate`` turns the pod spec into its gated form.

    Outputs (registered): ``serviceAccount`` (the serving pod's), ``witnessSecret``, ``peersSecret`` (or None
    without the failsafe).
    """

    wiring: LeaseWiring
    service_account: str
    dependencies: list[pulumi.Resource]  # what the gated pod reads: it is created after them

    def __init__(
        self, name: str, args: ServingLeaseArgs, pod: ServedPod, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("headscale-ha:lease:ServingLease", name, None, opts)
        self._pod = pod
        self._objects = _Objects(name, {"namespace": pod.namespace, "labels": labels(pod.app, "lease")}, self)
        failsafe = args.failover.failsafe and not pod.follows
        # Secret from the start: a plain string from the config is made a Pulumi secret before anything reads it.
        witness = pulumi.Output.secret(args.witness_kubeconfig).apply(
            lambda text: lease_credentials(text, key=WITNESS_KUBECONFIG_KEY)
        )
        witness_secret = self._secret("witness", witness.apply(witness_secret_data))
        self.dependencies = [witness_secret, self._script()]
        peers_secret = None
        if failsafe:
            peers_secret = self._secret("peers", self._peer_credentials(args.peers).apply(peers_secret_data))
            self.dependencies.append(peers_secret)
        self.service_account = pod.service_account or f"{pod.app}-serving"
        if pod.service_account is None:
            self.dependencies.append(self._objects.account("serving", self.service_account))
        self.dependencies += self._renewer_rights(args)
        self.wiring = LeaseWiring(
            site=args.site,
            failover=args.failover,
            # Not a secret: where the witness is (its CA and token are in the Secret).
            witness_api_url=pulumi.Output.unsecret(witness.apply(lambda credentials: credentials.api_url)),
            witness_secret=f"{pod.app}-lease-witness",
            peers_secret=f"{pod.app}-lease-peers",
            peers=tuple(sorted(args.peers)),
            image=pod.image,
            script_config_map=f"{pod.app}-lease-script",
            serve_from=SERVE_FROM_MOUNT,
            serve_from_mounts=serve_from_mounts(pod.served),
            resources=pod.resources,
            writers=pod.writers,
            follows=pod.follows,
        )
        self.register_outputs(
            {
                "serviceAccount": self.service_account,
                "witnessSecret": self.wiring.witness_secret,
                "peersSecret": self.wiring.peers_secret if peers_secret is not None else None,
            }
        )

    def gate(self, pod_spec: PodSpecArgsDict) -> PodSpecArgsDict:
        """The pod spec behind the gate and the renewer (components/witness_lease.py ``gated_pod_spec``)."""
        return gated_pod_spec(pod_spec, self.wiring, self._pod.served, self.service_account)

    def _secret(self, role: str, data: pulumi.Output[dict[str, str]]) -> pulumi.Resource:
        return self._objects.make(
            k8s.core.v1.Secret,
            f"{role}-secret",
            {"name": f"{self._pod.app}-lease-{role}"},
            type="Opaque",
            string_data=pulumi.Output.secret(data),
        )

    def _script(self) -> pulumi.Resource:
        return self._objects.make(
            k8s.core.v1.ConfigMap,
            "script",
            {"name": f"{self._pod.app}-lease-script"},
            data={SCRIPT_FILE: packaged_script(SCRIPT_FILE)},
        )

    def _peer_credentials(self, peers: Mapping[str, PeerSite]) -> pulumi.Output[dict[str, Any]]:
        """Each other site's credentials and failsafe namespace, by site (a secret: the tokens are in it)."""

        def with_namespace(text: str, site: str, peer: PeerSite) -> tuple[ApiCredentials, str]:
            credentials = lease_credentials(text, key=f"{PEER_KUBECONFIGS_KEY}.{site}")
            return credentials, peer.namespace or credentials.namespace or self._pod.namespace

        return pulumi.Output.all(
            **{
                site: pulumi.Output.secret(peer.kubeconfig).apply(
                    lambda text, site=site, peer=peer: with_namespace(text, site, peer)
                )
                for site, peer in peers.items()
            }
        )

    def _renewer_rights(self, args: ServingLeaseArgs) -> list[pulumi.Resource]:
        """The renewer's Role (its failsafe Lease, its own pod's delete) and the policy that narrows the delete."""
        app, namespace = self._pod.app, self._pod.namespace
        failsafe_lease = None if self._pod.follows else f"{args.failover.lease}-failsafe"
        role = renewer_role(f"{app}-lease-renewer", namespace, failsafe_lease)
        binding = renewer_role_binding(f"{app}-lease-renewer", namespace, self.service_account)
        policy, policy_binding = own_pod_policy(
            f"headscale-ha-{namespace}-{app}-own-pod", namespace, self.service_account
        )
        admission = k8s.admissionregistration.v1
        return [
            self._objects.from_body(k8s.rbac.v1.Role, "renewer-role", role),
            self._objects.from_body(k8s.rbac.v1.RoleBinding, "renewer-binding", binding),
            self._objects.from_body(admission.ValidatingAdmissionPolicy, "own-pod", policy, cluster_scoped=True),
            self._objects.from_body(
                admission.ValidatingAdmissionPolicyBinding, "own-pod-binding", policy_binding, cluster_scoped=True
            ),
        ]


@dataclass(frozen=True, kw_only=True)
class FailsafeAccountsArgs:
    """The accounts the other sites vouch through in this site's cluster."""

    app: str  # names the accounts: `<app>-failsafe-<site>`
    namespace: str  # this site's serving namespace, where its failsafe Lease is
    failsafe_lease: str  # the Lease the accounts may read and write, nothing else
    peers: tuple[str, ...]  # the other sites


class FailsafeAccounts(pulumi.ComponentResource):
    """Per other site, a ServiceAccount with ``get`` and ``patch`` on this site's failsafe Lease and ``create`` on
    Leases: a token of it, in a kubeconfig of this cluster, is that site's ``peerKubeconfigs`` entry for this one.
    Made apart from the lease (with the witness's kubeconfig set, before automatic failover is on), so that every
    site can hand its tokens to the others before any site needs theirs.

    Outputs (registered): ``accounts``, the account name by site.
    """

    def __init__(self, name: str, args: FailsafeAccountsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:lease:FailsafeAccounts", name, None, opts)
        objects = _Objects(name, {"namespace": args.namespace, "labels": labels(args.app, "lease")}, self)
        accounts = {}
        for peer in sorted(args.peers):
            account = accounts[peer] = f"{args.app}-failsafe-{peer}"
            objects.account(f"{peer}-account", account)
            objects.from_body(
                k8s.rbac.v1.Role, f"{peer}-role", lease_role(account, args.namespace, args.failsafe_lease)
            )
            binding = renewer_role_binding(account, args.namespace, account)
            objects.from_body(k8s.rbac.v1.RoleBinding, f"{peer}-binding", binding)
        self.accounts = accounts
        self.register_outputs({"accounts": accounts})
