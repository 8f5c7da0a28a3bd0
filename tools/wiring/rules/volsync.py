"""VolSync: a ReplicationSource / ReplicationDestination names a claim that exists and a restic repository Secret
with the keys the mover requires. (The mover pods policies select are in the model.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.checker import Checker
from tools.wiring.manifest import api_group, as_dict, nested
from tools.wiring.model import Holder
from tools.wiring.vocabulary import RESTIC_REQUIRED_KEYS, VOLSYNC_GROUP


def check_volsync(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    if api_group(obj) != VOLSYNC_GROUP:
        return
    spec = as_dict(obj.get("spec"))
    field_name = "sourcePVC" if obj.get("kind") == "ReplicationSource" else "destinationPVC"
    checker.ref(
        holder,
        f"spec.{field_name}",
        "PersistentVolumeClaim",
        spec.get(field_name),
        consequence="VolSync would never start a mover: no snapshots of this volume",
    )
    repository = nested(spec, "restic", "repository")
    fail = "the restic mover would fail on every run: no snapshots"
    checker.ref(
        holder,
        "spec.restic.repository",
        "Secret",
        repository,
        consequence=fail,
        keys=[(key, "spec.restic.repository") for key in RESTIC_REQUIRED_KEYS],
        key_consequence=fail,
    )


RULES = {"ReplicationSource": check_volsync, "ReplicationDestination": check_volsync}
