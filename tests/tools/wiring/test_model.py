"""What the rendered set makes controllers create, so references to it resolve: a Certificate's Secret, a
StatefulSet's claims (CloudNativePG's Secrets and Services: test_cnpg.py).
"""

from __future__ import annotations

from tests.support.wiring_objects import (
    certificate,
    check,
    container,
    ingress,
    pod_spec,
    secret,
    service,
    volsync_source,
    web,
    with_template,
)


def test_certificate_provides_its_secret() -> None:
    assert check(web(), service(), ingress(tls_secret="public-tls"), certificate()) == []
    assert len(check(web(), service(), ingress(tls_secret="public-tls"), certificate("other"))) == 1


def test_statefulset_provides_its_claims() -> None:
    sts = with_template("StatefulSet", pod_spec(container(volumeMounts=[{"name": "data", "mountPath": "/d"}])))
    sts["spec"].update({"replicas": 2, "volumeClaimTemplates": [{"metadata": {"name": "data"}}]})
    assert (
        check(sts, volsync_source("data-w-1", "restic"), secret("restic", "RESTIC_REPOSITORY", "RESTIC_PASSWORD")) == []
    )
    assert (
        len(check(sts, volsync_source("data-w-2", "restic"), secret("restic", "RESTIC_REPOSITORY", "RESTIC_PASSWORD")))
        == 1
    )
