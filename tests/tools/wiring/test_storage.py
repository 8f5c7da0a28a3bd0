"""Pre-bound claims: the PersistentVolume exists, is reserved for the claim and agrees on the storage class."""

from __future__ import annotations

from typing import Any

from tests.support.wiring_objects import NS, check, claim, meta, only
from tools.wiring import External


def _pv(name: str = "pv1", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta(name, None), "spec": spec}


def test_claim_volume_name_must_be_a_persistent_volume() -> None:
    assert "stay Pending" in only(check(claim("data", volumeName="pv1"))).message
    assert check(claim("data", volumeName="pv1"), _pv()) == []
    external = External(kind="PersistentVolume", namespace=None, name="pv1", created_by="the NFS admin")
    assert check(claim("data", volumeName="pv1"), externals=[external]) == []


def test_persistent_volume_claim_ref_must_be_this_claim() -> None:
    reserved = _pv(claimRef={"namespace": NS, "name": "other"})
    assert "reserved (claimRef)" in only(check(claim("data", volumeName="pv1"), reserved)).message
    assert check(claim("data", volumeName="pv1"), _pv(claimRef={"namespace": NS, "name": "data"})) == []


def test_storage_class_must_agree_when_both_set() -> None:
    pvc = claim("data", volumeName="pv1", storageClassName="fast")
    assert only(check(pvc, _pv(storageClassName=""))).path == "spec.storageClassName"
    assert check(pvc, _pv(storageClassName="fast")) == []
    assert check(pvc, _pv()) == []
