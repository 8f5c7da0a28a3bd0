"""CrossGuard entry point: `pulumi preview --policy-pack policy/pack` runs this file."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: `policy` is importable

from pulumi_policy import EnforcementLevel, PolicyPack

from policy.pack.pack import PACK_NAME, build_policies

PolicyPack(name=PACK_NAME, enforcement_level=EnforcementLevel.MANDATORY, policies=build_policies())
