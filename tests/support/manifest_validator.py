"""validate(): run ../shared/tools/validate_manifests.py on rendered files; used by every manifest-validating test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def validate(shared_dir: Path, files: list[Path]) -> subprocess.CompletedProcess[str]:
    validator = shared_dir / "tools" / "validate_manifests.py"
    return subprocess.run(
        [sys.executable, str(validator), *map(str, files)], capture_output=True, text=True, check=False
    )
