"""Two owners for one object: an External the set renders or makes, a controller's Secret the set also renders."""

from __future__ import annotations

from tests.support.wiring_objects import NS, certificate, check, only, secret
from tools.wiring import External


def test_external_that_the_set_renders_or_makes_is_reported() -> None:
    rendered = External(kind="Secret", namespace=NS, name="s", created_by="the user")
    finding = only(check(secret("s"), externals=[rendered]))
    assert (finding.obj, finding.path, "stale" in finding.message) == ("Secret/app/s", "metadata.name", True)
    made = External(kind="Secret", namespace=NS, name="public-tls", created_by="the user")
    finding = only(check(certificate(), externals=[made]))
    assert (finding.obj, finding.path) == ("Certificate/app/public", "spec.secretName")
    assert "two owners" in finding.message
    elsewhere = External(kind="Secret", namespace="other", name="s", created_by="the user")
    assert check(secret("s"), externals=[elsewhere]) == []


def test_certificate_secret_also_rendered_is_a_conflict() -> None:
    finding = only(check(certificate(), secret("public-tls", "tls.crt", "tls.key")))
    assert (finding.obj, finding.path) == ("Certificate/app/public", "spec.secretName")
    assert "two owners" in finding.message
