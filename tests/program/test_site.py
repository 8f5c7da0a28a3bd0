"""TailnetSite: the namespace, the provider, and the stack outputs of one cluster."""

from __future__ import annotations

import pytest

from headscale_ha.components.settings import HeadplaneSettings, Role
from headscale_ha.program.config import ConfigError
from headscale_ha.program.site_args import site_args
from tests.support.headscale_config_samples import stack_config
from tools.harness import SECRET, run_program
from tools.plan import PLACEHOLDERS
from tools.render import outputs_json, resource_tree
from tools.stack_files import read_stack_settings

SITE_TYPE = "headscale-ha:site:TailnetSite"
NAMESPACE_TYPE = "kubernetes:core/v1:Namespace"


def test_every_resource_hangs_under_the_site_component(run_stack) -> None:
    run = run_stack("hydra")
    (site,) = run.of_type(SITE_TYPE)
    assert site.name == "hydra"
    assert site.parent_urn is not None
    assert site.parent_urn.endswith("::pulumi:pulumi:Stack::headscale-ha-hydra")
    parents = {r.urn: r.parent_urn for r in run.resources}

    def under_site(urn: str | None) -> bool:
        while urn is not None and urn != site.urn:
            urn = parents.get(urn)
        return urn == site.urn

    others = [r for r in run.resources if r is not site]
    assert len(others) > 10
    assert all(under_site(r.parent_urn) for r in others)
    assert all(r.name.startswith("hydra-") for r in others), "children are named <parent>-<role>"


def test_namespace_enforces_restricted_pod_security(run_stack) -> None:
    (namespace,) = [r for r in run_stack("cosmos").of_type(NAMESPACE_TYPE) if r.name == "cosmos-namespace"]
    metadata = namespace.inputs["metadata"]
    assert metadata["name"] == "headscale"
    for mode in ("enforce", "audit", "warn"):
        assert metadata["labels"][f"pod-security.kubernetes.io/{mode}"] == "restricted"


def test_outputs_describe_the_site(run_stack) -> None:
    hydra, cosmos = run_stack("hydra").outputs, run_stack("cosmos").outputs
    assert hydra["endpoints"] == {
        "serverUrl": "https://headscale.example.com",
        "adminUrl": "https://headscale.example.com/admin",
        "apiUrl": "http://headscale.headscale.svc.cluster.local:8080",
        "site": "hydra",
        "role": "active",
        "dnsZone": "hydra.tn.internal.example.com",
        "gatewayIp": "172.30.250.10",
        "activeSite": "hydra",
        "failover": "none",
    }
    assert cosmos["endpoints"]["role"] == "standby"
    assert cosmos["endpoints"]["dnsZone"] == "cosmos.tn.internal.example.com"
    assert hydra["namespace"] == "headscale"
    assert hydra["headscaleVersion"] == "0.29.2"


def test_no_admin_url_without_headplane(run_stack, lab_project) -> None:
    project = lab_project("  headscale-ha:headplane: {enabled: false}\n")
    assert "adminUrl" not in run_stack("lab", project_dir=project).outputs["endpoints"]


def test_kubeconfig_secret_gets_an_explicit_provider_and_stays_secret(run_stack, lab_project) -> None:
    project = lab_project("  headscale-ha:kubeconfig:\n    secure: v1:c2VjcmV0LWNpcGhlcnRleHQ=\n")
    run = run_stack("lab", project_dir=project)
    (provider,) = run.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] is SECRET
    assert "context" not in provider.inputs, "the kubeconfig's own current context"
    namespaces = run.of_type(NAMESPACE_TYPE)
    assert len(namespaces) == 2
    namespace = namespaces[0]
    assert namespace.provider is not None
    assert namespace.provider.startswith(provider.urn)
    assert "offline-placeholder" not in outputs_json(run) + resource_tree(run)


@pytest.mark.parametrize("stack", ["hydra", "cosmos"])
def test_one_explicit_provider_from_the_first_up_with_the_ambient_kubeconfig(run_stack, stack: str) -> None:
    """No kubeconfig set: the stack's own provider (ambient kubeconfig), so setting one later updates it instead
    of moving every object to another provider; data changes are updates; the cluster is the site. Its context is
    the site's (issue 38): never the ambient file's current context, which one shell shares between both stacks, so
    cosmos's objects can never land in hydra's cluster."""
    run = run_stack(stack)
    (provider,) = run.of_type("pulumi:providers:kubernetes")
    assert provider.name == f"{stack}-kubernetes"
    assert "kubeconfig" not in provider.inputs
    assert provider.inputs["context"] == stack
    assert provider.inputs["enableConfigMapMutable"] == "true"
    assert provider.inputs["enableSecretMutable"] == "true"
    assert provider.inputs["clusterIdentifier"] == stack
    kubernetes = [r for r in run.resources if r.custom and r.type.startswith("kubernetes:")]
    assert kubernetes
    assert all(r.provider and r.provider.startswith(provider.urn) for r in kubernetes), [
        r.name for r in kubernetes if not (r.provider or "").startswith(provider.urn)
    ]


def test_a_site_s_kube_context_is_its_provider_s_context(run_stack, project_copy) -> None:
    """`tailnet.sites[].kubeContext` names the context when the contexts are not named after the sites."""
    project = project_copy()
    text = (project / "Pulumi.yaml").read_text()
    assert "        - name: cosmos\n" in text
    (project / "Pulumi.yaml").write_text(
        text.replace(
            "        - name: cosmos\n", "        - name: cosmos\n          kubeContext: admin@cosmos-cluster\n"
        )
    )
    (provider,) = run_stack("cosmos", project_dir=project).of_type("pulumi:providers:kubernetes")
    assert provider.inputs["context"] == "admin@cosmos-cluster"
    (hydra,) = run_stack("hydra", project_dir=project).of_type("pulumi:providers:kubernetes")
    assert hydra.inputs["context"] == "hydra"


# ------------------------------------------------------------------------------------------ the one pass


def test_the_whole_mapping_is_one_value_a_test_can_compare() -> None:
    """site_args is a pure function of the config: the same config gives an equal value, another role another
    value, and every component the stack has is in it (None for one it does not have)."""
    hydra = stack_config()
    assert site_args(hydra) == site_args(stack_config())
    standby = site_args(hydra.model_copy(update={"role": Role.STANDBY}))
    assert standby != site_args(hydra)
    assert standby.headscale.replicas == 0
    assert standby.standby_gate is not None
    assert standby.standby_gate.active_stack == "organization/headscale-ha/hydra"
    without = site_args(hydra.model_copy(update={"headplane": HeadplaneSettings(enabled=False)}))
    assert without.headplane is None
    assert without.endpoint.headplane is None


def test_a_config_error_is_raised_before_any_resource_is_registered(project_copy, stack_outputs) -> None:
    """The mapping runs first: a policy the config refuses fails the run with nothing registered (before, the
    provider, the namespace and the database were registered when the policy was refused)."""
    project = project_copy()
    stack_file = project / "Pulumi.cosmos.yaml"
    stack_file.write_text(stack_file.read_text() + "  headscale-ha:policy: {mode: apply}\n")
    settings = read_stack_settings(project, "cosmos", placeholders=PLACEHOLDERS)
    registered: list = []
    with pytest.raises(ConfigError, match=r"policy\.mode: apply needs API access"):
        run_program(
            project=settings.project,
            stack="cosmos",
            config=settings.config,
            secret_keys=settings.secret_keys,
            stack_outputs=stack_outputs,
            registered=registered,
        )
    assert registered == []
