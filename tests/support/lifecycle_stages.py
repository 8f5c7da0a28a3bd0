"""The migrating/postgres stage config for lab runs (migrating()): used by the lifecycle and runbook lifecycle tests."""

from __future__ import annotations

MIGRATION_IMAGE = "registry.example.com/headscale-ha/migrate:1.0.0"
STORE = {"destinationPath": "s3://headscale-wal/hydra", "endpointUrl": "https://s3.internal.example.com"}


def migrating(stage: str = "migrating") -> dict[str, object]:
    return {
        "headscale-ha:database": {
            "stage": stage,
            "postgres": {"instances": 3, "objectStore": STORE},
            "migration": {"image": MIGRATION_IMAGE},
        },
        "headscale-ha:objectStoreAccessKeyId": "AKIA-offline",
        "headscale-ha:objectStoreSecretAccessKey": "offline-secret",
    }
