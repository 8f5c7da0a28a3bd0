"""The package's HeadscaleServer: the schema's choices (sqlite or postgres, generated, imported or stack keys)
turned into the Python component's args; its resources the Python component's; bad inputs named at their path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi
import pytest

from headscale_ha.components import headscale
from headscale_ha.components.headscale_config import PostgresConnection
from headscale_ha.components.settings import (
    BackupSettings,
    ClusterSettings,
    ComputeResources,
    DerpSettings,
    HeadscaleSettings,
    OidcSettings,
    ResourceAmounts,
)
from headscale_ha.package.headscale import HeadscaleServer
from tests.support.component_run import build_component, refused
from tests.support.component_tree import subtree
from tools.harness import SECRET, run_program

HEADSCALE = {
    "version": "0.28.0",
    "image": "ghcr.io/juanfont/headscale:0.28.0",
    "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
}
RESOURCES = ComputeResources(
    requests=ResourceAmounts(cpu="10m", memory="64Mi"), limits=ResourceAmounts(cpu="1", memory="256Mi")
)
NFS = {"server": "nas.lan", "path": "/export/tailnet"}
NOISE, DERP = "privkey:" + "ab" * 32, "privkey:" + "cd" * 32


def _base(**extra: Any) -> dict[str, Any]:
    return {
        "namespace": "vpn",
        "headscale": HEADSCALE,
        "cluster": {"nodes": 1, "workloads_on_control_plane": True},
        "server_hostname": "vpn.example.org",
        "base_domain": "nodes.example.org",
        **extra,
    }


def _python(**extra: Any) -> headscale.HeadscaleServerArgs:
    values: dict[str, Any] = {
        "namespace": "vpn",
        "cluster": ClusterSettings(nodes=1, workloads_on_control_plane=True),
        "server_hostname": "vpn.example.org",
        "base_domain": "nodes.example.org",
        **extra,
    }
    settings = {"image": HEADSCALE["image"], "version": "0.28.0", "resources": RESOURCES}
    settings |= {key: values.pop(key) for key in ("derp", "oidc") if key in values}
    return headscale.HeadscaleServerArgs(settings=HeadscaleSettings(**settings), **values)


def _same_tree(
    package_inputs: Callable[[], dict[str, Any]], python_args: Callable[[], headscale.HeadscaleServerArgs]
) -> list[str]:
    """Both built (their args made inside the run: secrets are Outputs); the package's child tree equals the Python
    component's; the names registered, returned."""
    package = build_component(lambda: HeadscaleServer("hs", package_inputs()))
    python = build_component(lambda: headscale.HeadscaleServer("hs", python_args()))
    ours = subtree(package.resources, "headscale-ha:index:HeadscaleServer", "hs")
    child = [entry for entry in ours if "/" not in entry[0]]
    assert [entry[:2] for entry in child] == [("headscale-ha:headscale:HeadscaleServer", "hs")]
    below = [(path.split("/", 1)[1], name, inputs) for path, name, inputs in ours if "/" in path]
    assert below == subtree(python.resources, "headscale-ha:headscale:HeadscaleServer", "hs")
    return [name for _, name, _ in below]


def test_sqlite_with_generated_keys_is_the_python_servers_tree():
    backup = BackupSettings(nfs=NFS)
    names = _same_tree(
        lambda: _base(sqlite={"backup": {"nfs": NFS}, "require_backup": True}),
        lambda: _python(
            database=headscale.SqliteStorage(size="1Gi", backup=backup, require_backup=True),
            backup_key_epoch=backup.auth.key_epoch,
        ),
    )
    assert {"hs-noise-key", "hs-derp-key", "hs-identity", "hs-config", "hs-version-gate", "hs-deployment"} <= set(names)


def test_postgres_imported_keys_oidc_and_the_embedded_relay_is_the_python_servers_tree():
    oidc = {"issuer": "https://login.example.org", "client_id": "vpn", "allowed_domains": ["example.org"]}
    names = _same_tree(
        lambda: _base(
            headscale={**HEADSCALE, "derp": {"embedded": True, "urls": []}, "oidc": oidc},
            postgres={
                "host": "pg.db.svc",
                "database": "vpn",
                "user": "vpn_app",
                "password_secret": "vpn-db",
                "password_key": "pass",
            },
            identity={"noise_private_key": pulumi.Output.secret(NOISE), "derp_private_key": DERP},
            stun_address="203.0.113.7",
            oidc_client_secret=pulumi.Output.secret("not-rendered"),
            split_dns={"lab.example.org": ["10.0.0.53"]},
            backup_key_epoch=3,
        ),
        lambda: _python(
            database=headscale.PostgresStorage(
                connection=PostgresConnection(host="pg.db.svc", name="vpn", user="vpn_app"),
                password_secret="vpn-db",
                password_key="pass",
            ),
            identity=headscale.ImportedIdentity(noise_private_key=pulumi.Output.secret(NOISE), derp_private_key=DERP),
            derp=DerpSettings(embedded=True, urls=[]),
            stun_address="203.0.113.7",
            oidc=OidcSettings(issuer="https://login.example.org", client_id="vpn", allowed_domains=["example.org"]),
            oidc_client_secret=pulumi.Output.secret("not-rendered"),
            split_dns={"lab.example.org": ("10.0.0.53",)},
            backup_key_epoch=3,
        ),
    )
    assert "hs-noise-key" not in names  # imported: nothing generated
    assert {"hs-oidc", "hs-stun"} <= set(names)


def test_the_identity_stack_is_read_by_its_name():
    run = run_program(
        project="p",
        stack="s",
        config={},
        program=lambda: HeadscaleServer(
            "hs", _base(identity={"stack_name": "acme/headscale-ha/identity"}, sqlite={"backup": {"nfs": NFS}})
        ),
        stack_outputs={
            "acme/headscale-ha/identity": {
                "identity": {"noisePrivateKey": NOISE, "derpPrivateKey": DERP},
                "fingerprint": "f" * 64,
            }
        },
    )
    reference = run.named("hs-identity-stack")
    assert reference.type == "pulumi:pulumi:StackReference"
    assert reference.inputs == {"name": "acme/headscale-ha/identity"}


def test_the_outputs_name_the_servers_objects_and_keep_the_backup_key_secret():
    def program() -> None:
        server = HeadscaleServer("hs", _base(sqlite={"backup": {"nfs": NFS, "local": {"storage": "persistent"}}}))
        pulumi.export(
            "server",
            {
                "apiUrl": server.api_url,
                "serviceName": server.service_name,
                "stunServiceName": server.stun_service_name,
                "identitySecretName": server.identity_secret_name,
                "oidcSecretName": server.oidc_secret_name,
                "configMapName": server.config_map_name,
                "dataClaimName": server.data_claim_name,
                "replicas": server.replicas,
                "backupKey": server.backup_key,
            },
        )

    outputs = run_program(project="p", stack="s", config={}, program=program).outputs
    assert outputs["server"] == {
        "apiUrl": "http://headscale.vpn.svc.cluster.local:8080",
        "serviceName": "headscale",
        "stunServiceName": None,
        "identitySecretName": "headscale-identity",
        "oidcSecretName": None,
        "configMapName": "headscale-config",
        "dataClaimName": "headscale-data",
        "replicas": 1,
        "backupKey": SECRET,
    }


BAD = [
    ({}, "sqlite", "set exactly one of sqlite or postgres, got none"),
    (
        {"sqlite": {"backup": {"nfs": NFS}}, "postgres": {"host": "h", "database": "d", "user": "u"}},
        "postgres",
        "got sqlite, postgres",
    ),
    ({"sqlite": {"backup": {}}}, "sqlite.backup.nfs", "is required"),
    ({"sqlite": {}}, "sqlite.backup", "is required"),
    (
        {"headscale": {**HEADSCALE, "version": "0.27.1"}, "sqlite": {"backup": {"nfs": NFS}}},
        "headscale.version",
        "0.27.1",
    ),
    ({"headscale": {**HEADSCALE, "replicas": 2}, "sqlite": {"backup": {"nfs": NFS}}}, "headscale.replicas", "writers"),
    ({"base_domain": "example.org", "sqlite": {"backup": {"nfs": NFS}}}, "baseDomain", "serverHostname"),
    ({"server_hostname": "not a host", "sqlite": {"backup": {"nfs": NFS}}}, "serverHostname", "'not a host'"),
    (
        {"sqlite": {"backup": {"nfs": NFS}}, "backup_key_epoch": 2},
        "backupKeyEpoch",
        "differs from sqlite.backup.auth.keyEpoch 1",
    ),
    (
        {"postgres": {"host": "h", "database": "d", "user": "u", "password_secret": "p", "ssl": "maybe"}},
        "postgres.ssl",
        "'maybe'",
    ),
    ({"postgres": {"host": "h", "database": "d", "password_secret": "p"}}, "postgres.user", "is required"),
    (
        {"sqlite": {"backup": {"nfs": NFS}}, "identity": {"stack_name": "a/b/c", "noise_private_key": NOISE}},
        "identity.stackName",
        "leave out the keys",
    ),
    ({"sqlite": {"backup": {"nfs": NFS}}, "nameservers": ["1.1.1.1", "dns.google"]}, "nameservers[1]", "dns.google"),
    (
        {"sqlite": {"backup": {"nfs": NFS}}, "policy_file": {"config_map": "p", "sha256": "xyz"}},
        "policyFile.sha256",
        "hex",
    ),
]


@pytest.mark.parametrize(("extra", "path", "message"), BAD)
def test_a_bad_input_is_refused_at_its_schema_path_before_anything_is_registered(extra, path, message):
    error = refused(lambda: HeadscaleServer("hs", _base(**extra)))
    assert error.property_path == path
    assert message in error.reason
