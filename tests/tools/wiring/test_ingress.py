"""Ingress: backends name a Service and one of its ports; TLS entries a Secret with a key pair."""

from __future__ import annotations

from tests.support.wiring_objects import check, ingress, only, secret, service, web


def test_ingress_backend_service_and_port() -> None:
    path = "spec.rules[0].http.paths[0].backend.service"
    assert only(check(web(), ingress("api"))).path == path
    assert only(check(web(), service(), ingress(port={"number": 8080}))).path == f"{path}.port"
    assert only(check(web(), service(), ingress(port={"name": "https"}))).path == f"{path}.port"
    assert check(web(), service(), ingress()) == []
    assert check(web(), service(), ingress(port={"name": "http"})) == []


def test_ingress_tls_secret() -> None:
    assert "default (untrusted) certificate" in only(check(web(), service(), ingress(tls_secret="tls"))).message
    assert check(web(), service(), ingress(tls_secret="tls"), secret("tls", "tls.crt", "tls.key")) == []
    assert len(check(web(), service(), ingress(tls_secret="tls"), secret("tls", "tls.crt"))) == 1
