"""The tailnet's identity as the restore check sees it: the fingerprint of a Noise private key.

One function for every place that compares identities: the identity stack's `fingerprint` output, a site's
`identityFingerprint` output and the restore script's marker (components/scripts/litestream-restore.sh) all hold
the SHA-256 hex of the key file's content with surrounding whitespace trimmed. A fingerprint reveals nothing
about the key; it is a plain output.
"""

from __future__ import annotations

import hashlib

#: What the restore script trims (POSIX [:space:] in the C locale), so both sides hash the same bytes.
_SPACE = " \t\n\r\v\f"


def identity_fingerprint(noise_private_key: str) -> str:
    """SHA-256 hex of the Noise key as the restore script hashes the mounted key file (whitespace trimmed)."""
    return hashlib.sha256(noise_private_key.strip(_SPACE).encode()).hexdigest()
