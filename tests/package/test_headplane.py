"""The package's Headplane: plain inputs in, the Python component's resources out, secrets kept, bad inputs named."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pulumi
import pytest

from headscale_ha.components import headplane
from headscale_ha.components.settings import (
    BackupSettings,
    ClusterSettings,
    ComputeResources,
    LocalStorage,
    LocalVolumeSettings,
    Nfs,
    OidcSettings,
    ResourceAmounts,
    VolSyncSettings,
)
from headscale_ha.package.headplane import Headplane
from tests.support.component_run import build_component, refused
from tests.support.component_tree import inputs_of, subtree
from tools.harness import SECRET

NFS = {"server": "nfs.internal.example.com", "path": "/export/headscale-backup"}
HEADSCALE_URL = "http://headscale.headscale.svc.cluster.local:8080"
HOSTNAME = "vpn.example.org"
RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "384Mi"}}
OIDC = {"issuer": "https://id.example.com", "client_id": "hs", "allowed_domains": ["example.com"]}
CLIENT_SECRET, API_KEY, BACKUP_KEY = "oidc-client-s3cret", "hskey-api-s3cret", "ab" * 32

#: What program/args.py's headplane_args yields for the defaults, as a consumer writes it (snake_case: the host's).
BASE: dict[str, Any] = {
    "namespace": "headscale",
    "image": "ghcr.io/tale/headplane:0.6.3",
    "replicas": 1,
    "resources": RESOURCES,
    "cluster": {"nodes": 3},
    "storage_size": "256Mi",
    "public_hostname": HOSTNAME,
    "headscale_url": HEADSCALE_URL,
    "backup": {"nfs": NFS},
}


def _python_args(**changes: Any) -> headplane.HeadplaneArgs:
    """The same defaults as BASE, as the Python program passes them."""
    fields: dict[str, Any] = {
        "namespace": "headscale",
        "image": "ghcr.io/tale/headplane:0.6.3",
        "replicas": 1,
        "resources": ComputeResources(
            requests=ResourceAmounts(cpu="50m", memory="128Mi"), limits=ResourceAmounts(cpu="500m", memory="384Mi")
        ),
        "cluster": ClusterSettings(nodes=3),
        "storage_size": "256Mi",
        "public_hostname": HOSTNAME,
        "headscale_url": HEADSCALE_URL,
        "backup": BackupSettings(nfs=Nfs(**NFS)),
    }
    return headplane.HeadplaneArgs(**(fields | changes))


#: (case, the package's inputs, the Python program's args for the same Headplane): secrets are given to the package
#: as the host gives them (secret Outputs, made inside the program), to the Python component as it takes them.
CASES: list[tuple[str, Callable[[], dict[str, Any]], Callable[[], headplane.HeadplaneArgs]]] = [
    ("api-key login, disposable storage, no metrics", lambda: BASE, _python_args),
    (
        "OIDC with its secrets, persistent storage with VolSync, metrics, signed backups",
        lambda: (
            BASE
            | {
                "oidc": OIDC,
                "oidc_client_secret": pulumi.Output.secret(CLIENT_SECRET),
                "api_key": pulumi.Output.secret(API_KEY),
                "storage_class": "longhorn",
                "backup": {
                    "nfs": NFS,
                    "local": {"storage": LocalStorage.PERSISTENT},  # the host hands enums over as the Enum
                    "volsync": {"repository": "restic-headplane"},
                },
                "metrics": True,
                "backup_key": pulumi.Output.secret(BACKUP_KEY),
            }
        ),
        lambda: _python_args(
            oidc=OidcSettings(issuer="https://id.example.com", client_id="hs", allowed_domains=["example.com"]),
            oidc_client_secret=CLIENT_SECRET,
            api_key=API_KEY,
            storage_class="longhorn",
            backup=BackupSettings(
                nfs=Nfs(**NFS),
                local=LocalVolumeSettings(storage=LocalStorage.PERSISTENT),
                volsync=VolSyncSettings(repository="restic-headplane"),
            ),
            metrics=True,
            backup_key=BACKUP_KEY,
        ),
    ),
    (
        "a standby: no pod, the restore must find a backup, no rehearsal",
        lambda: (
            BASE
            | {
                "replicas": 0,
                "require_backup": True,
                "allow_empty_start": "2025-06-01",
                "backup": {"nfs": NFS, "rehearsal": {"enabled": False}},
            }
        ),
        lambda: _python_args(
            replicas=0,
            require_backup=True,
            allow_empty_start="2025-06-01",
            backup=BackupSettings.model_validate({"nfs": NFS, "rehearsal": {"enabled": False}}),
        ),
    ),
]


def _outputs(ui: Headplane) -> None:
    pulumi.export(
        "outputs",
        {
            "url": ui.url,
            "serviceName": ui.service_name,
            "servicePort": ui.service_port,
            "secretName": ui.secret_name,
            "configMapName": ui.config_map_name,
            "dataClaimName": ui.data_claim_name,
        },
    )


@pytest.mark.parametrize(("case", "package_args", "python_args"), CASES, ids=[c[0] for c in CASES])
def test_registers_what_the_python_component_registers_one_level_down(case, package_args, python_args):
    package = build_component(lambda: Headplane("headplane", package_args()))
    python = build_component(lambda: headplane.Headplane("headplane", python_args()))
    ours = subtree(package.resources, "headscale-ha:index:Headplane", "headplane")
    assert ours[0][:2] == ("headscale-ha:headplane:Headplane", "headplane")
    below = [(chain.split("/", 1)[1], name, inputs) for chain, name, inputs in ours[1:]]
    assert below == subtree(python.resources, "headscale-ha:headplane:Headplane", "headplane")
    assert "headplane-deployment" in [name for _, name, _ in below]


def test_outputs_name_what_a_route_and_a_network_policy_point_at():
    run = build_component(lambda: _outputs(Headplane("headplane", BASE)))
    assert run.outputs["outputs"] == {
        "url": f"https://{HOSTNAME}/admin",
        "serviceName": "headplane",
        "servicePort": 3000,
        "secretName": "headplane-secrets",
        "configMapName": "headplane-config",
        "dataClaimName": None,  # disposable storage: no claim
    }
    persistent = BASE | {"backup": {"nfs": NFS, "local": {"storage": "persistent"}}}
    run = build_component(lambda: _outputs(Headplane("headplane", persistent)))
    assert run.outputs["outputs"]["dataClaimName"] == "headplane-data"
    (component,) = run.of_type("headscale-ha:index:Headplane")
    assert component.inputs == {}  # the component's state is its outputs, registered with register_outputs


def test_the_secrets_given_stay_secrets_in_what_is_registered():
    _, package_args, _ = CASES[1]
    run = build_component(lambda: Headplane("headplane", package_args()))
    secret = inputs_of(run.resources, "kubernetes:core/v1:Secret", "headplane-secrets")
    assert secret["stringData"] == {"cookie-secret": SECRET, "headscale-api-key": SECRET, "oidc-client-secret": SECRET}
    key = inputs_of(run.resources, "kubernetes:core/v1:Secret", "headplane-backup-backup-key")
    assert key["stringData"] == {"backup.key": SECRET}
    registered = json.dumps([r.inputs for r in run.resources], default=repr)
    for plain in (CLIENT_SECRET, API_KEY, BACKUP_KEY):
        assert plain not in registered


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        ({"resources": {"requests": RESOURCES["requests"]}}, "resources.limits", "resources.limits: is required"),
        (
            {"resources": RESOURCES | {"limits": {"cpu": "500m", "memory": "64Mi"}}},
            "resources.limits.memory",
            "is below requests.memory (128Mi): raise it to 128Mi or more, got '64Mi'",
        ),
        (
            {"oidc": {"issuer": "https://id.example.com", "client_id": "hs"}},
            "oidc",
            "allowedDomains, allowedUsers and allowedGroups are all empty",
        ),
        ({"oidc": {"issuer": "https://id.example.com", "allowed_users": ["a@b.c"]}}, "oidc.clientId", "is required"),
        ({"cluster": {"nodes": 3, "colour": "red"}}, "cluster.colour", "is not an input of this type"),
        ({"backup": {}}, "backup.nfs", "backup.nfs is required"),
        (
            {"backup": {"nfs": NFS, "volsync": {"repository": "r"}}},
            "backup",
            "volsync snapshots a PersistentVolumeClaim",
        ),
        ({"backup": {"nfs": NFS | {"size": "lots"}}}, "backup.nfs.size", "'lots'"),
        ({"image": "ghcr.io/tale/headplane:0.5.10"}, "image", "only Headplane 0.6.x"),
        ({"storage_size": "big"}, "storageSize", "must be a Kubernetes quantity"),
        ({"replicas": 2}, "replicas", "must be 1 (serve) or 0 (a standby: no pod), got 2"),
        (
            {"public_hostname": "vpn"},
            "publicHostname",
            "fully qualified domain name such as 'hs.example.com', got 'vpn'",
        ),
        ({"headscale_url": "headscale:8080"}, "headscaleUrl", "http:// or https:// URL of Headscale's HTTP port"),
        ({"allow_empty_start": "tomorrow"}, "allowEmptyStart", "'tomorrow' is not a date YYYY-MM-DD"),
        ({"namespace": "Head_Scale"}, "namespace", "must be a DNS label"),
    ],
)
def test_a_bad_input_is_refused_at_its_schema_path_before_anything_is_registered(changes, path, message):
    error = refused(lambda: Headplane("headplane", BASE | changes))
    assert error.property_path == path
    assert message in error.reason
