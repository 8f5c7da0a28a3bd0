"""mustBackUp: the state/backup/loss table, as data, from the stack's own config."""

from __future__ import annotations

from headscale_ha.program.inventory import must_back_up
from tests.support.config_samples import parse, section


def test_every_stateful_object_is_listed_with_its_backup() -> None:
    rows = {row["name"]: row for row in must_back_up(parse("hydra"))}
    assert set(rows) == {
        "headscale/headscale-identity",
        "pulumi-state",
        "headscale/headscale pod volume `data`",
        "nfs://nfs.internal.example.com/export/headscale-backup/headscale",
        "headscale/headplane pod volume `data`",
        "nfs://nfs.internal.example.com/export/headscale-backup/headplane",
        "headscale/headplane-secrets",
        "tailnet-gateway/subnet-router-[0-1]",
    }
    assert rows["headscale/headscale-identity"]["backupRequired"] is True
    # A site never generates keys: they are the identity stack's, and its state is what to back up.
    assert "identity stack organization/headscale-ha-identity/tailnet" in rows["headscale/headscale-identity"]["how"]
    assert "identity keys are the identity stack's" in rows["pulumi-state"]["lossMeans"]
    assert rows["headscale/headplane-secrets"]["backupRequired"] is False
    disposable = rows["headscale/headscale pod volume `data`"]
    assert disposable["backupRequired"] is False, "the replica is the copy; the pod volume is refilled from it"
    assert disposable["kind"] == "emptyDir, disposable"
    for row in rows.values():
        assert set(row) == {"name", "kind", "owner", "lossMeans", "backupRequired", "how"}


def test_persistent_storage_lists_the_claims_as_state() -> None:
    persistent = {**section("hydra", "backup"), "local": {"storage": "persistent"}}
    rows = {row["name"]: row for row in must_back_up(parse("hydra", backup=persistent))}
    for app in ("headscale", "headplane"):
        assert rows[f"headscale/{app}-data"]["kind"] == "PersistentVolumeClaim"
        assert rows[f"headscale/{app}-data"]["backupRequired"] is True
    assert "RPO about 1s + 1s" in rows["headscale/headscale-data"]["how"]


def test_imported_identity_and_oidc_change_the_advice() -> None:
    headscale = {
        "version": "0.29.2",
        "image": "ghcr.io/juanfont/headscale:0.29.2",
        "oidc": {"issuer": "https://id.example.com", "clientId": "hs", "allowedDomains": ["example.com"]},
    }
    config = parse(
        secret_keys=("noisePrivateKey", "derpPrivateKey", "oidcClientSecret", "headplaneApiKey"),
        noisePrivateKey="privkey:" + "a" * 64,
        derpPrivateKey="privkey:" + "b" * 64,
        oidcClientSecret="x",
        headplaneApiKey="y",
        headscale=headscale,
        headplane={"oidcLogin": True},
    )
    rows = {row["name"]: row for row in must_back_up(config)}
    assert "secret config" in rows["headscale/headscale-identity"]["how"]
    assert rows["oidcClientSecret"]["backupRequired"] is True


def test_the_table_is_a_stack_output(run_stack) -> None:
    outputs = run_stack("cosmos").outputs
    assert outputs["mustBackUp"] == must_back_up(parse("cosmos"))
    assert outputs["endpoints"]["apiUrl"] == "http://headscale.headscale.svc.cluster.local:8080"
