"""The release of headscale-ha this checkout is: one place, reported by every stack (the `release` output) and
named by the first entry of CHANGELOG.md (a test holds the two together)."""

from __future__ import annotations

#: Semantic versioning: a change a stack file must follow (a renamed or retired key, a new required value) is a
#: new minor while the major is 0.
VERSION = "0.1.0"
