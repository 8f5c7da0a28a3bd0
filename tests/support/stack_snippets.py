"""Stack-file config snippets (POSTGRES stage, SQLITE_DB per stack): for the postgres, failover and standby tests."""

from __future__ import annotations

POSTGRES = """\
  headscale-ha:database:
    stage: postgres
    postgres:
      instances: 3
      objectStore: {destinationPath: "s3://headscale-wal/hydra", endpointUrl: "https://s3.internal.example.com"}
  headscale-ha:objectStoreAccessKeyId:
    secure: v1:AAAA
  headscale-ha:objectStoreSecretAccessKey:
    secure: v1:BBBB
"""

SQLITE_DB = {
    "hydra": "  headscale-ha:database:\n    stage: sqlite\n    postgres:\n      instances: 3\n",
    "cosmos": "  headscale-ha:database:\n    stage: sqlite\n    postgres:\n      instances: 1\n",
}
