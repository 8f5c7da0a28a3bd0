"""Helpers to run the real Prometheus tools: promtool's checks and unit tests, and a throwaway Prometheus server (plus
the busybox httpd that serves the state exporter's file), for tests/components/test_alerts_e2e.py.

Every process started here listens on loopback only, on a free port, is bounded by timeouts, and is killed when its
context manager exits, whatever happened inside.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.free_ports import free_port
from tests.support.litestream_lab import stop_process

PROMTOOL = "promtool"
PROMETHEUS = "prometheus"
#: The mark of a test that runs promtool or Prometheus: skipped, naming the package, on a machine without them.
needs_prometheus = pytest.mark.real_tool(PROMETHEUS)


def tools_present() -> bool:
    """promtool and prometheus (Debian package prometheus) are on PATH."""
    return shutil.which(PROMTOOL) is not None and shutil.which(PROMETHEUS) is not None


# --- promtool --------------------------------------------------------------------------------------------------


def promtool(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run promtool; never raises on a non-zero exit (the caller asserts, showing the output)."""
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


def check_rules(path: Path) -> subprocess.CompletedProcess[str]:
    return promtool("check", "rules", str(path))


def run_rule_tests(path: Path) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` (named so that pytest does not collect it where it is imported)."""
    return promtool("test", "rules", str(path))


def check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    """``promtool check metrics`` (syntax and the lint) on exposition text."""
    return promtool("check", "metrics", stdin=text)


# --- exposition text ---------------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Samples of Prometheus text exposition: (metric name, labels) -> value. Comments are skipped; enough for the
    state exporter's output, not a general parser."""
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"not a sample line: {line!r}")
        labels = frozenset(_LABEL.findall(match["labels"] or ""))
        samples[(match["name"], labels)] = float(match["value"])
    return samples


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """One sample's value (KeyError naming it when absent)."""
    key = (name, frozenset(labels.items()))
    if key not in samples:
        raise KeyError(f"no sample {name}{labels}; have {sorted(n for n, _ in samples)}")
    return samples[key]


# --- Go template functions Prometheus offers in alert annotations (what the rules use), for expected texts --------


def humanize_duration(value: float) -> str:
    """Prometheus' ``humanizeDuration`` (template.go): ``1d 2h 3m 4s``; under a second or a minute differently."""
    if math.isnan(value) or math.isinf(value):
        return f"{value:.4g}"
    if value == 0:
        return "0s"
    if abs(value) >= 1:
        sign = "-" if value < 0 else ""
        duration = int(abs(value))
        seconds, minutes = duration % 60, (duration // 60) % 60
        hours, days = (duration // 3600) % 24, duration // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{_go_g4(abs(value))}s"
    raise ValueError(f"humanize_duration: sub-second values are not needed here ({value})")


def _go_g4(value: float) -> str:
    """Go's ``%.4g`` for the values used here (no exponent)."""
    text = f"{value:.4g}"
    if "e" in text:
        raise ValueError(f"%.4g of {value} needs Go's exponent format, not reproduced here")
    return text


def humanize_timestamp(value: float) -> str:
    """Prometheus' ``humanizeTimestamp``: Go's ``time.Time.String()`` in UTC (whole seconds only)."""
    if value != int(value):
        raise ValueError("humanize_timestamp: fractional seconds are not needed here")
    stamp = time.gmtime(int(value))
    return time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC", stamp)


_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def expand(template: str, labels: dict[str, str], value: float | None) -> str:
    """Expand the Go-template subset the rules' annotations use: ``$labels.<name>``, ``$value | humanizeDuration``,
    ``$value | humanizeTimestamp`` and ``printf "%.0f" $value``. Anything else is an error (add it here)."""

    def one(match: re.Match[str]) -> str:
        action = match[1]
        if action.startswith("$labels."):
            return labels.get(action.removeprefix("$labels."), "")
        if value is None:
            raise ValueError(f"template {action!r} needs the alert's value")
        if action == "$value | humanizeDuration":
            return humanize_duration(value)
        if action == "$value | humanizeTimestamp":
            return humanize_timestamp(value)
        if action == 'printf "%.0f" $value':
            return f"{value:.0f}"
        raise ValueError(f"template action {action!r} is not reproduced by tests/support/prometheus_lab.expand")

    return _TEMPLATE.sub(one, template)


# --- processes ---------------------------------------------------------------------------------------------------


def _get(url: str, timeout: float = 2) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}: {log.read_text(errors='replace')}")
        try:
            _get(url, timeout=1)
            return
        except (urllib.error.URLError, OSError):
            if time.monotonic() >= deadline:
                output = log.read_text(errors="replace")
                raise RuntimeError(f"{url} did not answer within {timeout} s: {output}") from None
            time.sleep(0.1)


@contextmanager
def busybox_httpd(home: Path, conf: Path, *, log: Path, port: int | None = None) -> Iterator[str]:
    """``busybox httpd -f`` serving ``home`` on loopback (``port``, or a free one) with config ``conf``; yields its
    base URL."""
    port = port if port is not None else free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            ["busybox", "httpd", "-f", "-vv", "-p", f"127.0.0.1:{port}", "-h", str(home), "-c", str(conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:  # any HTTP answer (a 404 included) means it listens
            try:
                _get(base + "/", timeout=1)
                break
            except urllib.error.HTTPError:
                break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.monotonic() >= deadline:
                    raise RuntimeError(f"busybox httpd did not start: {log.read_text(errors='replace')}") from None
                time.sleep(0.05)
        yield base
    finally:
        stop_process(proc, timeout=10)


def content_type(url: str) -> str | None:
    """The Content-Type header an URL answers with (None when there is none)."""
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.headers.get("Content-Type")


@dataclass(frozen=True)
class Prometheus:
    """A running Prometheus: its base URL, with the API calls the tests use."""

    url: str

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        body = json.loads(_get(f"{self.url}/api/v1/{path}{query}", timeout=5))
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus API {path}: {body}")
        return body["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (state ``pending`` or ``firing``), from /api/v1/alerts."""
        return list(self.api("alerts")["alerts"])

    def alert_states(self) -> dict[tuple[str, str], str]:
        """(alertname, app label) -> state of every active alert."""
        return {
            (alert["labels"]["alertname"], alert["labels"].get("app", "")): alert["state"] for alert in self.alerts()
        }

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def targets_up(self) -> dict[str, str]:
        """job -> health of every active target (one target per job here)."""
        return {target["labels"]["job"]: target["health"] for target in self.api("targets")["activeTargets"]}


@contextmanager
def prometheus_server(
    workdir: Path,
    *,
    scrape_configs: list[dict[str, Any]],
    rule_files: list[Path],
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    start_timeout: float = 30,
) -> Iterator[Prometheus]:
    """A real Prometheus on a free loopback port, its TSDB and config under ``workdir``; killed on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
                "rule_files": [str(path) for path in rule_files],
                "scrape_configs": scrape_configs,
            },
            sort_keys=False,
        )
    )
    check = promtool("check", "config", str(config))
    if check.returncode != 0:
        raise RuntimeError(f"promtool check config failed: {check.stdout}{check.stderr}")
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(f"{url}/-/ready", proc, log, start_timeout)
        yield Prometheus(url)
    finally:
        stop_process(proc, timeout=10)
