"""A serving pod of the witness lease, as a kubelet runs it, around a stand-in writer that logs every write with its
fencing counter: what the whole-site scenarios judge "never two writers" by.

The pod's life: the gate (`acquire`, an init container) runs to completion; then the writer and the renewer (`hold`)
run side by side. A writer that exits is restarted in place, without the gate, as the kubelet restarts a container;
it starts only when its config is in the serving directory the gate filled and the fence empties. A pod whose
renewer exited (fenced) is replaced a moment later (``replace_after``): its writer is killed and a new gate starts,
under the new pod's name (the IDENTITY ``SITE/headscale-N``). A follower's pod (``follows``: Headplane's) runs
``follow`` and ``watch`` in the gate's and the renewer's places, as ``SITE/headplane-N``.

The writer has a name of its own, so that the fence's STOP finds it and nothing else on this machine: by default a
copy of a POSIX shell under that name (/proc/PID/comm, as Headscale or Litestream); with ``script_writer``, a script of
that name run by `sh` (as the backup signer: comm `sh`, the name in its first argument).
"""

from __future__ import annotations

import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.litestream_lab import stop_process
from tests.support.witness_lab import LeaseSite

#: The stand-in writer: no config, no start; then a line "SITE FENCING UPTIME" every 20 ms, each appended at once.
WRITER = """\
[ -f "$SERVE_DIR/config" ] || { echo "no config in $SERVE_DIR: not serving" >&2; exit 1; }
fencing=$(cat "$STATE_DIR/fencing")
while :; do
    read -r now _ </proc/uptime
    printf '%s %s %s\\n' "$SITE" "$fencing" "$now" >>"$WRITE_LOG"
    sleep 0.02
done
"""


@dataclass(frozen=True)
class Write:
    site: str
    fencing: int
    at: float


def logged(log: Path) -> list[tuple[Write, str]]:
    """Every write of the log with its uptime exactly as logged, from one read, and only whole lines: the writers
    may be appending while it is read, and a line they have not finished is not yet a write."""
    text = log.read_text() if log.exists() else ""
    found = []
    for line in text.splitlines()[: text.count("\n")]:
        site, fencing, at = line.split()[:3]
        found.append((Write(site, int(fencing), float(at)), at))
    return found


def writes(log: Path) -> list[Write]:
    return [write for write, _ in logged(log)]


def first_write(log: Path, site: str, timeout: float) -> float:
    """When ``site`` first wrote (uptime), waiting up to ``timeout`` seconds for it to."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [write.at for write in writes(log) if write.site == site]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"{site} did not write within {timeout} s: {sorted({w.site for w in writes(log)})}")


def uptime() -> float:
    """The clock the writers and the lease script log (seconds since boot)."""
    return float(Path("/proc/uptime").read_text().split()[0])


def two_writers(log: Path) -> list[str]:
    """What breaks "one writer at a time" in the write log: a fencing counter two sites wrote under, or a counter
    whose writes did not all come after every write of the counters below it. Empty when none."""
    by_counter: dict[int, list[Write]] = defaultdict(list)
    for write in writes(log):
        by_counter[write.fencing].append(write)
    problems = []
    last_end, last_counter = float("-inf"), None
    for counter in sorted(by_counter):
        group = by_counter[counter]
        sites = {write.site for write in group}
        if len(sites) > 1:
            problems.append(f"counter {counter} written by {sorted(sites)}")
        start, end = min(write.at for write in group), max(write.at for write in group)
        if start <= last_end:
            problems.append(f"counter {counter} wrote at {start} before counter {last_counter}'s last write {last_end}")
        last_end, last_counter = max(last_end, end), counter
    return problems


@dataclass
class LeasePod:
    """One site's pods, one after another, until :meth:`stop` or :meth:`lose`."""

    site: LeaseSite
    write_log: Path
    replace_after: float = 0.5
    restart_delay: float = 0.1
    script_writer: bool = False
    follows: bool = False
    writer_name: str = field(init=False)
    writer_exits: list[int] = field(default_factory=list)
    renewer_exits: list[int] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pod_gone: threading.Event = field(default_factory=threading.Event)
    _writer: subprocess.Popen[str] | None = None
    _sidecars: list[subprocess.Popen[str]] = field(default_factory=list)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.writer_name = f"w-{self.site.name[:6]}-{secrets.token_hex(3)}"
        bin_dir = self.site.root / "writer-bin"
        bin_dir.mkdir(exist_ok=True)
        if self.script_writer:
            self.writer_name += ".sh"
            (bin_dir / self.writer_name).write_text(WRITER)
        else:
            shutil.copy(shutil.which("dash") or "/bin/sh", bin_dir / self.writer_name)
            (bin_dir / "writer.sh").write_text(WRITER)
        serve_from = self.site.root / "serve-from"
        serve_from.mkdir(exist_ok=True)
        (serve_from / "config").write_text("the writer's config\n")
        self.site.env.update({"SERVE_FROM": str(serve_from), "SERVE_DIR": str(self.site.root / "serving"),
                              "STOP": self.writer_name, "STOP_GRACE_SECONDS": "0.5"})  # fmt: skip

    def start(self) -> LeasePod:
        self._thread = threading.Thread(target=self._pods, name=f"pod-{self.site.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """The pod deleted: the renewer gets SIGTERM (it stops the writer and releases the Lease)."""
        self._stopping.set()
        if self.site.process is not None:
            stop_process(self.site.process)
        self._end_pod()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def lose(self) -> None:
        """The site gone at once: every process of its pod killed, nothing replaced."""
        self._stopping.set()
        if self.site.process is not None and self.site.process.poll() is None:
            self.site.process.send_signal(signal.SIGKILL)
        self._end_pod()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _pods(self) -> None:
        generation = 0
        while not self._stopping.is_set():
            # A new pod, a new name: its gate does not take the Lease its fenced predecessor held as its own.
            app, (gate_command, sidecar_command) = ("headplane", ("follow", "watch")) if self.follows else (
                "headscale", ("acquire", "hold"))  # fmt: skip
            self.site.env["IDENTITY"] = f"{self.site.name}/{app}-{generation}"
            generation += 1
            gate = self.site.start(gate_command)
            if self._wait(gate) != 0:
                return
            self._pod_gone = threading.Event()
            renewer = self.site.start(sidecar_command)  # a native sidecar: it renews before anything else serves
            serving = threading.Thread(target=self._serve, args=(self._pod_gone,), daemon=True)
            serving.start()
            self.renewer_exits.append(self._wait(renewer))
            self._stopping.wait(self.replace_after)  # the writer is restarted in place meanwhile
            self._end_pod()
            serving.join(timeout=15)

    def _serve(self, pod_gone: threading.Event) -> None:
        """What runs once the gate is done and the renewer started: here the writer alone."""
        self._writer_restarts(pod_gone)

    def _writer_restarts(self, pod_gone: threading.Event) -> None:
        """The writer, restarted in place (without the gate) until its pod is gone."""
        bin_dir = self.site.root / "writer-bin"
        env = {**self.site.env, "SITE": self.site.name, "WRITE_LOG": str(self.write_log)}
        while True:
            with self._lock:
                if pod_gone.is_set():
                    return
                self._writer = subprocess.Popen(self._writer_argv(bin_dir), env=env, stderr=subprocess.DEVNULL,
                                                text=True)  # fmt: skip
            self.writer_exits.append(self._writer.wait())
            pod_gone.wait(self.restart_delay)

    def _writer_argv(self, bin_dir: Path) -> list[str]:
        if self.script_writer:
            return ["sh", str(bin_dir / self.writer_name)]
        return [str(bin_dir / self.writer_name), str(bin_dir / "writer.sh")]

    def _end_pod(self) -> None:
        """The pod gone: every process it still runs is killed (the writer, and any sidecar of a subclass)."""
        with self._lock:
            self._pod_gone.set()
            for process in [self._writer, *self._sidecars]:
                if process is not None and process.poll() is None:
                    process.send_signal(signal.SIGKILL)
                    process.wait(timeout=5)

    def _wait(self, process: subprocess.Popen[str]) -> int:
        while process.poll() is None:
            if self._stopping.wait(0.05):
                stop_process(process)
        return process.wait()
