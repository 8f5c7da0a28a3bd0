"""VolSync: the claim a ReplicationSource names, and the restic repository Secret with its required keys."""

from __future__ import annotations

from tests.support.wiring_objects import NS, check, claim, only, secret, volsync_source
from tools.wiring import External


def test_volsync_source_pvc_and_repository() -> None:
    assert [f.path for f in check(volsync_source())] == ["spec.sourcePVC", "spec.restic.repository"]
    repo = secret("restic", "RESTIC_REPOSITORY", "RESTIC_PASSWORD")
    assert check(volsync_source(), claim("data"), repo) == []
    external = External(kind="Secret", namespace=NS, name="restic", created_by="the user (README)")
    assert check(volsync_source(), claim("data"), externals=[external]) == []


def test_volsync_repository_needs_restic_keys() -> None:
    finding = only(check(volsync_source(), claim("data"), secret("restic", "RESTIC_REPOSITORY")))
    assert "key 'RESTIC_PASSWORD'" in finding.message
