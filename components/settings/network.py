"""NetworkPolicies: who may reach the pods (ingress) and where the pods may go (egress)."""

from __future__ import annotations

import ipaddress

from pydantic import Field, model_validator

from headscale_ha.components.config_types import Cidr, DnsLabel, Fqdn
from headscale_ha.components.settings.base import FieldProblem, SettingsModel, raise_problems


class NetworkPolicySettings(SettingsModel):
    """Who may reach the pods; Headplane always reaches Headscale."""

    enabled: bool = Field(
        default=True,
        description="Default-deny ingress in every namespace the program owns, plus the explicit allows; `false` "
        "leaves those namespaces open to every pod.",
    )
    ingress_namespaces: list[DnsLabel] = Field(
        default_factory=list,
        description="Namespaces of the ingress data plane allowed to the HTTP ports; with `ingressCidrs` empty too, "
        "the HTTP ports (the public endpoint) stay open to any source.",
    )
    ingress_cidrs: list[Cidr] = Field(
        default_factory=list, description="Source ranges of proxies without a namespace (e.g. Cilium's envoy)."
    )
    monitoring_namespace: DnsLabel = Field(default="monitoring", description="The only namespace allowed to metrics.")
    cnpg_operator_namespace: DnsLabel = Field(
        default="cnpg-system",
        description="Namespace of the CloudNativePG operator, admitted to PostgreSQL (5432) and the instance "
        "manager (8000).",
    )
    egress: bool = Field(
        default=True,
        description="Default-deny egress in every namespace the program owns too, plus each workload's explicit "
        "allows (docs/security.md); `false` leaves egress open, for a CNI that does not enforce egress.",
    )
    dns_namespace: DnsLabel = Field(
        default="kube-system", description="Namespace of the cluster DNS pods (UDP and TCP 53) name resolvers query."
    )
    dns_pod_labels: dict[str, str] = Field(
        default_factory=lambda: {"k8s-app": "kube-dns"},
        description="Labels of the cluster DNS pods (CoreDNS carries `k8s-app: kube-dns` on kubeadm, Talos, k3s).",
    )
    dns_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="DNS servers that are no pod of `dnsNamespace`, allowed on port 53: NodeLocal DNSCache's "
        "`169.254.20.10/32` (and the kube-dns ClusterIP it binds on each node), or a resolver outside the cluster.",
    )
    api_server_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="The API server's endpoint addresses (`kubectl get endpointslices -n default -l "
        "kubernetes.io/service-name=kubernetes`), not the `kubernetes` ClusterIP: policies see the address after "
        "the Service's DNAT. The subnet routers (their state Secrets), Headscale's position recorder and "
        "CloudNativePG need it: required with `egress`. Cilium matches a node's address by ipBlock only with "
        "`policyCIDRMatchMode: nodes`.",
    )
    api_server_port: int = Field(
        default=6443, ge=1, le=65535, description="Port of those endpoints (6443: kubeadm, Talos; 443: most managed)."
    )
    egress_internet_cidrs: list[Cidr] = Field(
        default_factory=lambda: ["0.0.0.0/0", "::/0"],
        description="The internet, for destinations known only by name (DERP maps and relays, the OIDC issuer, the "
        "object store, the routers' control server and peers); narrow it to your egress ranges. The private, "
        "CGNAT, link-local (cloud metadata) and unique-local ranges and every site's routes and lbPool are always "
        "excepted from it (a listed range inside one of them is taken as meant).",
    )
    egress_hosts: dict[Fqdn, list[Cidr]] = Field(
        default_factory=dict,
        description="Named destinations that are not on the internet (an IdP, an S3 endpoint or a proxy target on "
        "your LAN): host name → its CIDRs, used for that name instead of `egressInternetCidrs`.",
    )
    volsync_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Addresses of the VolSync restic repository, any TCP port; empty: `egressInternetCidrs` on 443.",
    )
    routers_reach_routes: bool = Field(
        default=False,
        description="Let the subnet routers forward tailnet traffic to every address of the site's `routes` (any "
        "pod or Service the tailnet policy admits a client to); off: to the gateway's DNS and proxies only.",
    )

    @model_validator(mode="after")
    def _never_the_metadata_service(self) -> NetworkPolicySettings:
        """The cloud metadata service hands out node credentials: no listed range may be just that address (a wider
        range is fine, it is excepted)."""
        metadata = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
        lists = {("dnsCidrs",): self.dns_cidrs, ("apiServerCidrs",): self.api_server_cidrs}
        lists |= {("egressInternetCidrs",): self.egress_internet_cidrs, ("volsyncCidrs",): self.volsync_cidrs}
        lists |= {("egressHosts", host): cidrs for host, cidrs in self.egress_hosts.items()}
        problems = [
            FieldProblem((*key, i), "is the cloud metadata service, never an egress destination", cidr)
            for key, cidrs in lists.items()
            for i, cidr in enumerate(cidrs)
            if ipaddress.ip_network(cidr).num_addresses == 1 and ipaddress.ip_network(cidr)[0] in metadata
        ]
        raise_problems(problems)
        return self
