"""The tailnet's identity as the restore check sees it: the fingerprint of a Noise private key.

One function for every place that compares identities: the identity stack's `fingerprint` output, a site's
`identityFingerprint` output and the restore script's marker (components/scripts/litestream-restore.sh) all hold
the SHA-256 hex of the key file's content with surrounding whitespace trimmed. A fingerprint reveals nothing
about the key; it is a plain output.
"""

from __future__ import annotations

import hashlib
import hmac

#: What the restore script trims (POSIX [:space:] in the C locale), so both sides hash the same bytes.
_SPACE = " \t\n\r\v\f"


def identity_fingerprint(noise_private_key: str) -> str:
    """SHA-256 hex of the Noise key as the restore script hashes the mounted key file (whitespace trimmed)."""
    return hashlib.sha256(noise_private_key.strip(_SPACE).encode()).hexdigest()


#: What the backup key is bound to: one purpose, one scheme version; the epoch (backup.auth.keyEpoch) rotates it.
_BACKUP_KEY_LABEL = "headscale-ha backup manifest key v1 epoch {epoch}"


def derived_backup_key(noise_private_key: str, epoch: int = 1) -> str:
    """The tailnet's backup key: 64 hex, HMAC-SHA256 of a fixed label and ``epoch`` under the Noise key.

    Every site serves with the tailnet's one Noise key (from the identity stack or imported), so every site derives
    the same key whatever the source, and a standby verifies what the active signed; nothing about the Noise key
    follows from it. Bumping ``epoch`` on every site rotates it without touching the identity."""
    label = _BACKUP_KEY_LABEL.format(epoch=epoch).encode()
    return hmac.new(noise_private_key.strip(_SPACE).encode(), label, hashlib.sha256).hexdigest()


#: What an application's own backup key is bound to: the tailnet's backup key, one application, one scheme version.
_APPLICATION_KEY_LABEL = "headscale-ha backup key of application {app} v1"


def application_backup_key(tailnet_backup_key: str, app: str) -> str:
    """An application's own backup key: 64 hex, HMAC-SHA256 of a label naming ``app`` under the tailnet's backup key.

    One key per application, so that whatever holds one application's key (Headplane's restore, signer and daily
    rehearsal) can sign nothing another application's restore accepts: the derivation is one-way, and Headscale's
    replica stays signed with the tailnet's key itself (the node registry, whose holders may derive every other)."""
    label = _APPLICATION_KEY_LABEL.format(app=app).encode()
    return hmac.new(tailnet_backup_key.strip(_SPACE).encode(), label, hashlib.sha256).hexdigest()
