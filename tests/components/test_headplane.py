"""Headplane: own Deployment, own SQLite and Litestream directory, a 32-character cookie secret.

At the component seam: each test builds one Headplane from hand-written args. The stack-level checks (the stacks'
roles reaching its replicas, the stack's hostname and Headscale reaching its config, `headplane.enabled: false`, the
Args the site maps its config to, the `migrating-oidc` option set) are in tests/program/test_site_headplane.py.
"""

from __future__ import annotations

import yaml

from headscale_ha.components.backup_volume import claim_name
from headscale_ha.components.headplane import Headplane, HeadplaneArgs
from headscale_ha.components.settings import (
    BackupSettings,
    ClusterSettings,
    ComputeResources,
    Nfs,
    OidcSettings,
    ResourceAmounts,
)
from tests.support.component_run import build_component
from tools.harness import SECRET, ProgramRun

NFS = Nfs(server="nfs.internal.example.com", path="/export/headscale-backup")
#: The backup claim of the args' NFS source.
BACKUP_CLAIM = claim_name(NFS)
HEADSCALE_URL = "http://headscale.headscale.svc.cluster.local:8080"
HOSTNAME = "vpn.example.org"
OIDC = OidcSettings(issuer="https://id.example.com", client_id="hs", allowed_domains=["example.com"])


def _object(run: ProgramRun, kind: str, name: str) -> dict:
    (obj,) = [o for o in run.kubernetes_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def _lone_headplane(
    *,
    replicas: int = 1,
    oidc: OidcSettings | None = None,
    oidc_client_secret: str | None = None,
    api_key: str | None = None,
) -> ProgramRun:
    """Headplane alone, in the namespace `headscale` (no stack file, no other component): what program/args.py's
    headplane_args yields for the defaults, by hand."""
    args = HeadplaneArgs(
        namespace="headscale",
        image="ghcr.io/tale/headplane:0.6.3",
        replicas=replicas,
        resources=ComputeResources(
            requests=ResourceAmounts(cpu="50m", memory="128Mi"), limits=ResourceAmounts(cpu="500m", memory="384Mi")
        ),
        cluster=ClusterSettings(nodes=3),
        storage_size="256Mi",
        public_hostname=HOSTNAME,
        headscale_url=HEADSCALE_URL,
        oidc=oidc,
        oidc_client_secret=oidc_client_secret,
        api_key=api_key,
        backup=BackupSettings(nfs=NFS),
    )
    return build_component(lambda: Headplane("headplane", args))


def test_headplane_is_a_separate_recreated_singleton() -> None:
    spec = _object(_lone_headplane(), "Deployment", "headplane")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    assert _object(_lone_headplane(replicas=0), "Deployment", "headplane")["spec"]["replicas"] == 0


def test_cookie_secret_is_32_random_alphanumerics_kept_secret() -> None:
    run = _lone_headplane()
    (password,) = run.of_type("random:index/randomPassword:RandomPassword")
    assert password.inputs["length"] == 32
    assert password.inputs["special"] is False
    assert _object(run, "Secret", "headplane-secrets")["stringData"] == {"cookie-secret": SECRET}


def test_config_points_at_the_given_headscale() -> None:
    run = _lone_headplane()
    config = yaml.safe_load(_object(run, "ConfigMap", "headplane-config")["data"]["config.yaml"])
    assert config["headscale"]["url"] == HEADSCALE_URL
    assert config["server"]["base_url"] == f"https://{HOSTNAME}"
    assert config["server"]["cookie_secret_path"] == "/etc/headplane/secrets/cookie_secret"


def test_probes_split_liveness_from_headscale_health() -> None:
    (container,) = _object(_lone_headplane(), "Deployment", "headplane")["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["tcpSocket"] == {"port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/admin/healthz", "port": "http"}


def test_own_database_and_backup_directory_without_identity_contract() -> None:
    pod = _object(_lone_headplane(), "Deployment", "headplane")["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["initContainers"][0]["env"]}
    assert env["DB_PATH"] == "/var/lib/headplane/hp_persist.db"
    assert env["BACKUP_DIR"] == "/backup/headplane"
    assert "IDENTITY_FILE" not in env
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [BACKUP_CLAIM], "disposable storage: the database lives in the pod, the replica on NFS"
    assert {"name": "data", "emptyDir": {"sizeLimit": "256Mi"}} in pod["volumes"]
    (backup,) = [m for m in pod["initContainers"][0]["volumeMounts"] if m["name"] == "backup"]
    assert (backup["mountPath"], backup["subPath"]) == ("/backup/headplane", "headplane"), "its own directory only"


def test_the_admin_api_key_is_stored_only_with_oidc() -> None:
    """Headplane 0.6 acts with a server-side key only for OIDC logins; without OIDC a key given is not stored."""
    assert _object(_lone_headplane(api_key=SECRET), "Secret", "headplane-secrets")["stringData"] == {
        "cookie-secret": SECRET
    }
    run = _lone_headplane(oidc=OIDC, oidc_client_secret="client-secret", api_key="api-key")
    assert set(_object(run, "Secret", "headplane-secrets")["stringData"]) == {
        "cookie-secret",
        "headscale-api-key",
        "oidc-client-secret",
    }


def test_with_oidc_the_key_is_mounted_in_the_headplane_container_only() -> None:
    run = _lone_headplane(oidc=OIDC, oidc_client_secret="client-secret", api_key="api-key")
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
