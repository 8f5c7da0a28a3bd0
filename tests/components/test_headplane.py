"""Headplane: own Deployment, own SQLite and Litestream directory, a 32-character cookie secret."""

from __future__ import annotations

import yaml

from headscale_ha.components.backup_volume import claim_name
from headscale_ha.components.settings import Nfs, Role
from headscale_ha.program.args import headplane_args, tailnet_objects_args
from tests.support.headscale_config_samples import OIDC, stack_config
from tests.support.option_sets import option_set_run
from tools.harness import SECRET, ProgramRun

#: The backup claim of the shared config's NFS source (Pulumi.yaml).
BACKUP_CLAIM = claim_name(Nfs(server="nfs.internal.example.com", path="/export/headscale-backup"))
HEADSCALE_URL = "http://headscale.headscale.svc.cluster.local:8080"


def _object(run: ProgramRun, kind: str, name: str) -> dict:
    (obj,) = [o for o in run.kubernetes_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def test_headplane_is_a_separate_recreated_singleton(run_stack) -> None:
    hydra, cosmos = run_stack("hydra"), run_stack("cosmos")
    spec = _object(hydra, "Deployment", "headplane")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    assert _object(cosmos, "Deployment", "headplane")["spec"]["replicas"] == 0


def test_cookie_secret_is_32_random_alphanumerics_kept_secret(run_stack) -> None:
    run = run_stack("hydra")
    (password,) = run.of_type("random:index/randomPassword:RandomPassword")
    assert password.inputs["length"] == 32
    assert password.inputs["special"] is False
    assert _object(run, "Secret", "headplane-secrets")["stringData"] == {"cookie-secret": SECRET}


def test_config_points_at_the_in_cluster_headscale(run_stack) -> None:
    run = run_stack("hydra")
    config = yaml.safe_load(_object(run, "ConfigMap", "headplane-config")["data"]["config.yaml"])
    assert config["headscale"]["url"] == "http://headscale.headscale.svc.cluster.local:8080"
    assert config["server"]["base_url"] == "https://headscale.example.com"
    assert config["server"]["cookie_secret_path"] == "/etc/headplane/secrets/cookie_secret"


def test_probes_split_liveness_from_headscale_health(run_stack) -> None:
    (container,) = _object(run_stack("hydra"), "Deployment", "headplane")["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["tcpSocket"] == {"port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/admin/healthz", "port": "http"}


def test_own_database_and_backup_directory_without_identity_contract(run_stack) -> None:
    pod = _object(run_stack("hydra"), "Deployment", "headplane")["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["initContainers"][0]["env"]}
    assert env["DB_PATH"] == "/var/lib/headplane/hp_persist.db"
    assert env["BACKUP_DIR"] == "/backup/headplane"
    assert "IDENTITY_FILE" not in env
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [BACKUP_CLAIM], "disposable storage: the database lives in the pod, the replica on NFS"
    assert {"name": "data", "emptyDir": {"sizeLimit": "256Mi"}} in pod["volumes"]
    (backup,) = [m for m in pod["initContainers"][0]["volumeMounts"] if m["name"] == "backup"]
    assert (backup["mountPath"], backup["subPath"]) == ("/backup/headplane", "headplane"), "its own directory only"


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
    args = headplane_args(active, headscale_url=HEADSCALE_URL)
    assert (args.replicas, args.require_backup) == (1, False)
    args = headplane_args(standby, headscale_url=HEADSCALE_URL)
    assert (args.replicas, args.require_backup) == (0, True)


def test_secrets_come_from_the_stack_when_the_provider_minted_no_key() -> None:
    config = stack_config(oidc=OIDC)
    args = headplane_args(config, headscale_url=HEADSCALE_URL)
    assert args.api_key == config.headplane_api_key.get_secret_value()
    assert args.oidc == config.headscale.oidc
    assert args.oidc_client_secret == config.oidc_client_secret.get_secret_value()
    without_oidc = headplane_args(stack_config(), headscale_url=HEADSCALE_URL)
    assert without_oidc.oidc is None
    assert without_oidc.oidc_client_secret is None, "no OIDC login: its client secret is not mounted"


def test_the_admin_api_key_reaches_headplane_only_with_oidc(run_stack, lab_project) -> None:
    """Headplane 0.6 acts with a server-side key only for OIDC logins; without OIDC the key is neither stored in its
    Secret, nor mounted, nor minted (users paste their own key at the login page)."""
    config = stack_config()  # headplaneApiKey is set, OIDC is not
    assert config.headplane_api_key is not None
    assert headplane_args(config, headscale_url=HEADSCALE_URL).api_key is None
    assert headplane_args(config, headscale_url=HEADSCALE_URL, api_key=SECRET).api_key is None
    owner = config.model_copy(update={"bootstrap_api_key": config.headplane_api_key})
    assert tailnet_objects_args(owner).mint_headplane_api_key is False
    with_oidc = stack_config(oidc=OIDC)
    assert headplane_args(with_oidc, headscale_url=HEADSCALE_URL).api_key is not None
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
