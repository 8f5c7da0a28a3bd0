"""The stack-level checks of Headplane: the stacks' roles reaching its replicas (hydra serves, cosmos keeps it at
zero), the stack's public hostname and in-cluster Headscale reaching its config, `headplane.enabled: false` leaving
nothing behind, the Args the site maps its config to (a standby's replicas and restore, secrets from the stack, the
admin API key only with OIDC) and the `migrating-oidc` option set's mounts. The component's own behaviour is tested
at its seam, in tests/components/test_headplane.py."""

from __future__ import annotations

import yaml

from headscale_ha.components.settings import Role
from headscale_ha.program.args import headplane_args, tailnet_objects_args
from headscale_ha.program.site_args import site_args
from tests.support.headscale_config_samples import OIDC, stack_config
from tests.support.option_sets import option_set_run
from tools.harness import SECRET, ProgramRun


def _object(run: ProgramRun, kind: str, name: str) -> dict:
    (obj,) = [o for o in run.kubernetes_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def test_headplane_is_a_separate_recreated_singleton(run_stack) -> None:
    hydra, cosmos = run_stack("hydra"), run_stack("cosmos")
    spec = _object(hydra, "Deployment", "headplane")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    assert _object(cosmos, "Deployment", "headplane")["spec"]["replicas"] == 0


def test_config_points_at_the_in_cluster_headscale(run_stack) -> None:
    run = run_stack("hydra")
    config = yaml.safe_load(_object(run, "ConfigMap", "headplane-config")["data"]["config.yaml"])
    assert config["headscale"]["url"] == "http://headscale.headscale.svc.cluster.local:8080"
    assert config["server"]["base_url"] == "https://headscale.example.com"
    assert config["server"]["cookie_secret_path"] == "/etc/headplane/secrets/cookie_secret"


def test_disabled_headplane_leaves_nothing_behind(run_stack, lab_project) -> None:
    project = lab_project("  headscale-ha:headplane: {enabled: false}\n")
    run = run_stack("lab", project_dir=project)
    assert not [o for o in run.kubernetes_objects() if "headplane" in o["metadata"]["name"]]
    route = _object(run, "HTTPRoute", "headscale-public")
    assert [r["matches"][0]["path"]["value"] for r in route["spec"]["rules"]] == ["/"]


# ------------------------------------------------------------------------------------------ the site's mapping


def test_a_standby_keeps_headplane_at_zero_and_must_restore_its_database() -> None:
    active = stack_config()
    standby = active.model_copy(update={"role": Role.STANDBY})
    args = headplane_args(active)
    assert args is not None
    assert (args.replicas, args.require_backup) == (1, False)
    args = headplane_args(standby)
    assert args is not None
    assert (args.replicas, args.require_backup) == (0, True)
    assert args.headscale_url == "http://headscale.headscale.svc.cluster.local:8080"
    assert (
        headplane_args(active.model_copy(update={"headplane": active.headplane.model_copy(update={"enabled": False})}))
        is None
    )


def test_secrets_come_from_the_stack_when_the_provider_minted_no_key() -> None:
    config = stack_config(oidc=OIDC)
    args = headplane_args(config)
    assert args is not None
    assert args.api_key == config.headplane_api_key.get_secret_value()
    assert args.oidc == config.headscale.oidc
    assert args.oidc_client_secret == config.oidc_client_secret.get_secret_value()
    without_oidc = headplane_args(stack_config())
    assert without_oidc is not None
    assert without_oidc.oidc is None
    assert without_oidc.oidc_client_secret is None, "no OIDC login: its client secret is not mounted"


def test_the_admin_api_key_reaches_headplane_only_with_oidc(run_stack, lab_project) -> None:
    """Headplane 0.6 acts with a server-side key only for OIDC logins; without OIDC the key is neither stored in its
    Secret, nor mounted, nor minted (users paste their own key at the login page)."""
    config = stack_config()  # headplaneApiKey is set, OIDC is not
    assert config.headplane_api_key is not None
    assert site_args(config).headplane.api_key is None
    owner = config.model_copy(update={"bootstrap_api_key": config.headplane_api_key})
    assert site_args(owner).headplane.api_key is None
    assert tailnet_objects_args(owner).mint_headplane_api_key is False, "so no minted key can reach Headplane either"
    with_oidc = stack_config(oidc=OIDC)
    assert site_args(with_oidc).headplane.api_key is not None
    owner = with_oidc.model_copy(update={"bootstrap_api_key": with_oidc.headplane_api_key})
    assert tailnet_objects_args(owner).mint_headplane_api_key is True

    project = lab_project("  headscale-ha:headplaneApiKey:\n    secure: v1:AAAA\n")
    assert _object(run_stack("lab", project_dir=project), "Secret", "headplane-secrets")["stringData"] == {
        "cookie-secret": SECRET
    }


def test_with_oidc_the_key_is_mounted_in_the_headplane_container_only(project_copy, stack_outputs) -> None:
    run = option_set_run("migrating-oidc", project_copy, stack_outputs)
    secret = _object(run, "Secret", "headplane-secrets")
    assert set(secret["stringData"]) == {"cookie-secret", "headscale-api-key", "oidc-client-secret"}
    pod = _object(run, "Deployment", "headplane")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "headplane-secrets"]
    readers = [
        c["name"]
        for c in [*pod.get("initContainers", []), *pod["containers"]]
        if any(m["name"] == volume["name"] for m in c.get("volumeMounts", []))
    ]
    assert readers == ["headplane"]
    config = yaml.safe_load(_object(run, "ConfigMap", "headplane-config")["data"]["config.yaml"])
    assert config["oidc"]["disable_api_key_login"] is True
