"""Container image references, and what makes one pinned.

Shared by the stack config (refuses moving tags before anything is planned) and the CrossGuard pack (refuses
them in any resource, whoever wrote it). A tag pins an image when it names one release: a channel name
(``latest``, ``stable``, ``main``...) or a partial version (``0.29``, ``1``) moves under the same config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Tags that name a channel rather than a release: the image behind them changes without a config change.
MOVING_TAGS = frozenset(
    {"latest", "stable", "main", "master", "development", "develop", "dev", "edge", "nightly", "next",
     "unstable", "canary", "beta", "alpha", "rc", "head", "release"}
)  # fmt: skip
EXACT_VERSION_TAG = re.compile(r"^v?\d+\.\d+\.\d+(\.\d+)?([-+][0-9A-Za-z][0-9A-Za-z.\-]*)?$")
#: PostgreSQL releases are major.minor (15.18); a bare major (15) moves.
EXACT_POSTGRES_TAG = re.compile(r"^\d+\.\d+([-+][0-9A-Za-z][0-9A-Za-z.\-]*)?$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True, kw_only=True)
class ImageRef:
    """A parsed container image reference."""

    repository: str
    tag: str
    digest: str | None

    @classmethod
    def parse(cls, reference: str) -> ImageRef:
        name, _, digest = reference.partition("@")
        last_slash = name.rfind("/")
        colon = name.rfind(":")
        if colon > last_slash:
            repository, tag = name[:colon], name[colon + 1 :]
        else:
            repository, tag = name, ""
        return cls(repository=repository, tag=tag, digest=digest or None)

    def __str__(self) -> str:
        return f"{self.repository}:{self.tag}" + (f"@{self.digest}" if self.digest else "")


def image_problem(
    reference: str, *, exact_tag: re.Pattern[str] = EXACT_VERSION_TAG, example: str = "1.2.3"
) -> str | None:
    """Why ``reference`` is not a pinned image, or None when it is."""
    ref = ImageRef.parse(reference)
    if not ref.repository or any(c.isspace() or c.isupper() for c in ref.repository):
        return "must be an image reference such as ghcr.io/owner/name:1.2.3"
    if not ref.tag:
        return f"has no tag; pin an exact version such as :{example} (optionally @sha256:...)"
    if ref.tag.lower() in MOVING_TAGS or ref.tag.lower().split("-")[0] in MOVING_TAGS:
        return f"uses the moving tag '{ref.tag}'; pin an exact version such as :{example}"
    if not exact_tag.match(ref.tag):
        return (
            f"tag '{ref.tag}' is not an exact version; pin a full release such as :{example} "
            "(a shorter tag moves with every patch release)"
        )
    if ref.digest is not None and not DIGEST.match(ref.digest):
        return "has a digest that is not sha256: followed by 64 lowercase hex characters"
    return None


def is_postgres_image(reference: str) -> bool:
    """PostgreSQL operand images, whose releases are major.minor."""
    return ImageRef.parse(reference).repository.rsplit("/", 1)[-1] in {"postgresql", "postgres", "postgis"}
