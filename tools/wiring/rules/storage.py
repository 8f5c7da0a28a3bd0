"""Storage: a pre-bound claim's PersistentVolume exists, is reserved for that claim, and agrees on the storage
class. (Claims a volume or VolSync names are resolved by those rules; a StatefulSet's claims are in the model.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.checker import Checker
from tools.wiring.manifest import as_dict
from tools.wiring.model import Holder


def check_claim(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    """A pre-bound claim: its PersistentVolume exists, is reserved for it, and agrees on the storage class."""
    spec = as_dict(obj.get("spec"))
    volume = checker.ref(
        holder,
        "spec.volumeName",
        "PersistentVolume",
        spec.get("volumeName"),
        consequence="the claim would stay Pending, waiting for that volume",
    )
    if volume is None or volume.obj is None:
        return
    pv_spec = as_dict(volume.obj.get("spec"))
    claim_ref = pv_spec.get("claimRef")
    if isinstance(claim_ref, dict):
        reserved = (claim_ref.get("namespace"), claim_ref.get("name"))
        if reserved != (holder.namespace, holder.name):
            checker.report(
                holder,
                "spec.volumeName",
                f"PersistentVolume '{spec['volumeName']}' is reserved (claimRef) for "
                f"'{reserved[0]}/{reserved[1]}': this claim would stay Pending",
            )
    if (
        "storageClassName" in spec
        and "storageClassName" in pv_spec
        and spec["storageClassName"] != pv_spec["storageClassName"]
    ):
        checker.report(
            holder,
            "spec.storageClassName",
            f"storageClassName {spec['storageClassName']!r} differs from PersistentVolume "
            f"'{spec['volumeName']}' ({pv_spec['storageClassName']!r}): the claim would never bind",
        )


RULES = {"PersistentVolumeClaim": check_claim}
