"""``make real-tools``: build the real actors the tests run, from their pinned source, through the Go module proxy.

No prebuilt binary can be downloaded where the project is built, but the Pulumi CLI, pulumi-kubernetes, Headscale,
etcd, the Kubernetes control plane and kwok are all Go modules. Their pins live in one file,
``tools/real_tools.json``; the binaries go to a cache outside the checkout, one directory per hash of the pins
(``~/.cache/headscale-ha/real-tools/<hash>/bin``, or ``$HEADSCALE_HA_REAL_TOOLS``), so a warm cache costs seconds
and a bumped pin never mixes with an old binary.

Each actor is first probed (is ``module@version`` served?), then built once; the run prints, per actor, what it
built or found cached, what it could not get and the fallback, and what the binary says its version is.
``python -m tools.real_tools --bin-dir`` prints the directory the tests put first on ``PATH``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PINS_FILE = Path(__file__).with_name("real_tools.json")
REPO = Path(__file__).resolve().parent.parent
CACHE_ENV = "HEADSCALE_HA_REAL_TOOLS"
# Bumped when a recipe below changes what it builds, so a cache built by an older recipe is not reused.
RECIPE_VERSION = "1"
K8S_VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")


@dataclass(frozen=True)
class Actor:
    """One pinned real actor, as ``tools/real_tools.json`` describes it."""

    name: str
    pin: dict[str, Any]

    @property
    def module(self) -> str:
        return self.pin["module"]

    @property
    def version(self) -> str:
        return self.pin["version"]

    @property
    def available(self) -> bool:
        return self.version != "none"

    def build_fields(self) -> dict[str, Any]:
        """What decides the binaries: the pin's build fields and, for a command of ours, its source's digest."""
        fields = {key: self.pin.get(key) for key in BUILD_FIELDS}
        if self.pin.get("source"):
            fields["source"] = source_digest(REPO / self.pin["source"])
        return fields


def load_actors(path: Path = PINS_FILE) -> list[Actor]:
    """The actors in pin-file order."""
    data = json.loads(path.read_text())
    return [Actor(name, pin) for name, pin in data["actors"].items()]


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "headscale-ha" / "real-tools")


#: The pin fields that change what is built; the prose (`why`, `wanted`) does not move the cache.
BUILD_FIELDS = ("module", "version", "package", "packages", "release", "sdk", "source")


def source_digest(directory: Path) -> str:
    """The digest of a source directory's files (names and contents)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def pins_key(path: Path = PINS_FILE) -> str:
    """A short hash of what the pins build and of the recipe version: one cache directory per set of pins."""
    built = {actor.name: actor.build_fields() for actor in load_actors(path)}
    text = json.dumps(built, sort_keys=True) + RECIPE_VERSION
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def bin_dir() -> Path:
    return cache_root() / pins_key() / "bin"


def go_env() -> dict[str, str]:
    """A Go environment that builds static binaries with this machine's Go and no workspace."""
    env = dict(os.environ)
    env.update(CGO_ENABLED="0", GOWORK="off", GOFLAGS="-mod=mod", GOTOOLCHAIN=env.get("GOTOOLCHAIN", "local"))
    # Go ignores a go.mod that sits in the temp directory itself, so builds get a temp directory of their own.
    temp = cache_root() / "tmp"
    temp.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(temp)
    return env


def go(args: list[str], cwd: Path, log: Path) -> None:
    """Run a go command; its output goes to the actor's log, and a failure names that log."""
    with log.open("a") as out:
        out.write(f"$ go {' '.join(args)}  (in {cwd})\n")
        out.flush()
        done = subprocess.run(["go", *args], cwd=cwd, env=go_env(), stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise BuildError(f"go {args[0]} failed in {cwd}: see {log}")


class BuildError(RuntimeError):
    """A build step failed; the message names the log."""


def _go_module_json(command: str, module: str, version: str) -> subprocess.CompletedProcess[str]:
    """``go <command> -json module@version`` outside any module, its output captured."""
    argv = ["go", *command.split(), "-json", f"{module}@{version}"]
    return subprocess.run(argv, env=go_env(), capture_output=True, text=True, cwd=tempfile.gettempdir())


def served(module: str, version: str) -> bool:
    """Whether the module proxy serves ``module@version`` (the probe before a build)."""
    return _go_module_json("list -m", module, version).returncode == 0


def module_dir(module: str, version: str, log: Path) -> Path:
    """The read-only module cache directory of ``module@version``, downloading it when needed."""
    done = _go_module_json("mod download", module, version)
    with log.open("a") as sink:
        sink.write(done.stdout + done.stderr)
    info = json.loads(done.stdout or "{}")
    if done.returncode != 0 or "Dir" not in info:
        raise BuildError(f"cannot download {module}@{version}: {info.get('Error', done.stderr.strip())}")
    return Path(info["Dir"])


def writable_copy(source: Path, target: Path) -> Path:
    """A writable copy of a module directory (the module cache is read-only)."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return target


def build_pulumi(actor: Actor, work: Path, out: Path, log: Path) -> list[str]:
    """The CLI: ``pkg`` and ``sdk`` side by side, as its ``replace ../sdk`` expects; plus the Python shims.

    ``go install pkg@version`` is refused (the module has local replaces), so the two modules are copied next to
    each other and built in place. The dynamic providers' plugin and the exec shim are files of the sdk module.
    """
    source = work / f"pulumi-{actor.version}"
    pkg = writable_copy(module_dir(actor.module, actor.version, log), source / "pkg")
    sdk = writable_copy(module_dir("github.com/pulumi/pulumi/sdk/v3", actor.version, log), source / "sdk")
    flag = f"-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version={actor.version}"
    go(["build", "-trimpath", "-ldflags", flag, "-o", str(out / "pulumi"), "./cmd/pulumi"], pkg, log)
    shims = ["python/dist/pulumi-resource-pulumi-python", "python/cmd/pulumi-language-python-exec"]
    for shim in shims:
        shutil.copy2(sdk / shim, out / Path(shim).name)
        (out / Path(shim).name).chmod(0o755)
    return ["pulumi", *(Path(shim).name for shim in shims)]


def build_kubernetes_provider(actor: Actor, work: Path, out: Path, log: Path) -> list[str]:
    """pulumi-kubernetes: its schema is embedded by ``go generate``, and ``../sdk`` is the sdk module beside it."""
    source = work / "pulumi-kubernetes"
    provider = writable_copy(module_dir(actor.module, actor.version, log), source / "provider")
    sdk_module = "github.com/pulumi/pulumi-kubernetes/sdk/v4"
    writable_copy(module_dir(sdk_module, actor.pin["sdk"], log), source / "sdk")
    command = provider / "cmd" / "pulumi-resource-kubernetes"
    release = actor.pin["release"]
    with log.open("a") as sink:
        generated = subprocess.run(
            ["go", "run", "./generate.go"],
            cwd=command,
            env={**go_env(), "VERSION": release},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    if generated.returncode != 0:
        raise BuildError(f"go generate of the kubernetes schema failed: see {log}")
    flag = f"-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version={release}"
    binary = out / "pulumi-resource-kubernetes"
    go(["build", "-trimpath", "-ldflags", flag, "-o", str(binary), "./cmd/pulumi-resource-kubernetes"], provider, log)
    return [binary.name]


def wrapper_module(work: Path, name: str, requires: dict[str, str], replaces: dict[str, str], log: Path) -> Path:
    """A throwaway main module that requires the pinned module, so ``go build <package>`` builds its command.

    Only the main module's ``replace`` lines count, so a dependency's local replaces (Kubernetes' staging
    modules) are restated here against their published versions.
    """
    module = work / f"wrap-{name}"
    if module.exists():
        shutil.rmtree(module)
    module.mkdir(parents=True)
    go(["mod", "init", f"headscale-ha.local/real-tools/{name}"], module, log)
    for path, version in replaces.items():
        go(["mod", "edit", f"-replace={path}={path}@{version}"], module, log)
    go(["get", *(f"{path}@{version}" for path, version in requires.items())], module, log)
    return module


def build_command(actor: Actor, work: Path, out: Path, log: Path, binary: str | None = None) -> list[str]:
    """A command of a module without local replaces (Headscale, etcd, kwok), built from a wrapper module."""
    package = actor.pin["package"]
    module = wrapper_module(work, actor.name, {actor.module: actor.version}, {}, log)
    target = out / (binary or Path(package).name)
    go(["build", "-trimpath", "-o", str(target), package], module, log)
    return [target.name]


def staging_replaces(kubernetes: Path, staging_version: str) -> dict[str, str]:
    """Every ``k8s.io/x => ./staging/...`` replace of k8s.io/kubernetes, mapped to the published ``v0.X.Y``."""
    replaces = {}
    for line in (kubernetes / "go.mod").read_text().splitlines():
        parts = line.split()
        if "=>" in parts and "./staging/" in line:
            replaces[parts[parts.index("=>") - 1]] = staging_version
    return replaces


def build_kubernetes(actor: Actor, work: Path, out: Path, log: Path) -> list[str]:
    """kube-apiserver, kube-controller-manager and kube-scheduler, with their version set as a release sets it.

    Without the version fields the server reports v0.0.0, which clients that gate on the server version (as
    pulumi-kubernetes does) misread.
    """
    version = actor.version
    major, minor, patch = version.lstrip("v").split(".")
    replaces = staging_replaces(module_dir(actor.module, version, log), f"v0.{minor}.{patch}")
    module = wrapper_module(work, actor.name, {actor.module: version}, replaces, log)
    fields = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    flags = " ".join(f"-X {package}.{key}={value}" for package in K8S_VERSION_PACKAGES for key, value in fields.items())
    built = []
    for package in actor.pin["packages"]:
        go(["build", "-trimpath", "-ldflags", flags, "-o", str(out / Path(package).name), package], module, log)
        built.append(Path(package).name)
    return built


def build_source(actor: Actor, work: Path, out: Path, log: Path) -> list[str]:
    """A command of ours (``source``, a Go ``main`` package) against the pinned module, in a wrapper module."""
    module = wrapper_module(work, actor.name, {actor.module: actor.version}, {}, log)
    for path in (REPO / actor.pin["source"]).glob("*.go"):
        shutil.copy2(path, module / path.name)
    go(["mod", "tidy"], module, log)
    go(["build", "-trimpath", "-o", str(out / actor.name), "."], module, log)
    return [actor.name]


RECIPES = {
    "pulumi": build_pulumi,
    "pulumi-resource-kubernetes": build_kubernetes_provider,
    "headscale": lambda actor, work, out, log: build_command(actor, work, out, log, "headscale"),
    "headscale-previous": lambda actor, work, out, log: build_command(actor, work, out, log, "headscale-previous"),
    "etcd": lambda actor, work, out, log: build_command(actor, work, out, log, "etcd"),
    "kubernetes": build_kubernetes,
    "kwok": build_command,
    "tailscale-node": build_source,
}
VERSION_ARGS = {
    "pulumi": ["version"],
    "headscale": ["version"],
    "headscale-previous": ["version"],
    "etcd": ["--version"],
    "kube-apiserver": ["--version"],
    "kube-controller-manager": ["--version"],
    "kube-scheduler": ["--version"],
    "kubectl": ["version", "--client"],
    "kwok": ["--version"],
}


def stamp_path(out: Path, actor: Actor) -> Path:
    return out / f".{actor.name}.built.json"


def binary_version(path: Path, record: dict[str, Any]) -> str:
    """What the binary says its version is (first line), and what its Go build info says of the pinned module.

    Headscale built from the module proxy says "dev" (it reads a VCS stamp a module zip lacks), and a plugin has no
    version flag: the build info still names the module version that went in.
    """
    if path.suffix or not _is_elf(path):
        return "(a script)"
    args = VERSION_ARGS.get(path.name)
    said = "(no version flag)" if args is None else _first_line([str(path), *args])
    module_version = _built_module_version(path, record["module"])
    if module_version not in ("", "(devel)") and module_version not in said:
        said += f"; build info: {record['module']} {module_version}"
    if record.get("release") and record["release"] not in said:
        said += f"; version {record['release']} set at build"
    return said


def _is_elf(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(4) == b"\x7fELF"


def _first_line(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"(cannot run: {error})"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else "(prints nothing)"


def _built_module_version(path: Path, module: str) -> str:
    """The version of ``module`` in the binary's build info (``go version -m``): a ``mod`` or ``dep`` line."""
    done = subprocess.run(["go", "version", "-m", str(path)], capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        fields = line.split("\t")
        if len(fields) >= 4 and fields[1] in ("mod", "dep") and fields[2] == module:
            return fields[3]
    return ""


def build_actor(actor: Actor, out: Path, work: Path) -> dict[str, Any]:
    """Probe, then build (or find cached) one actor; the record says what happened."""
    record: dict[str, Any] = {"actor": actor.name, "module": actor.module, "version": actor.version}
    if actor.pin.get("release"):
        record["release"] = actor.pin["release"]
    if actor.pin.get("why"):
        record["fallback"] = actor.pin["why"]
    stamp = stamp_path(out, actor)
    if not stamp.exists():
        reuse_built(actor, out)
    if stamp.exists():
        built = json.loads(stamp.read_text())
        return {**record, "binaries": built.get("binaries", []), "status": f"cached (built in {built['seconds']} s)"}
    if not actor.available:
        return {**record, "status": "not available"}
    if not served(actor.module, actor.version):
        return {**record, "status": f"not served: {actor.module}@{actor.version}"}
    log = work / f"{actor.name}.log"
    started = time.monotonic()
    try:
        binaries = RECIPES[actor.name](actor, work, out, log)
    except BuildError as error:
        return {**record, "status": f"failed: {error}"}
    record.update(status="built", binaries=binaries, seconds=round(time.monotonic() - started, 1))
    record.update(build=actor.build_fields(), recipe=RECIPE_VERSION)
    stamp.write_text(json.dumps(record, indent=2) + "\n")
    return record


def reuse_built(actor: Actor, out: Path) -> bool:
    """Copy the actor's binaries from the cache of another set of pins that built it the same way (same build
    fields, same recipe), so that a bump of one pin rebuilds that actor only."""
    wanted = actor.build_fields()
    for stamp in sorted(cache_root().glob(f"*/bin/{stamp_path(out, actor).name}")):
        built = json.loads(stamp.read_text())
        binaries = [stamp.parent / name for name in built.get("binaries", [])]
        if stamp.parent == out or built.get("build") != wanted or built.get("recipe") != RECIPE_VERSION:
            continue
        if not all(binary.is_file() for binary in binaries):
            continue
        for binary in binaries:
            shutil.copy2(binary, out / binary.name)
        stamp_path(out, actor).write_text(json.dumps(built, indent=2) + "\n")
        return True
    return False


def report(record: dict[str, Any], out: Path) -> str:
    lines = [f"{record['actor']}: {record['status']} ({record['module']}@{record['version']})"]
    if "seconds" in record:
        lines[0] += f" in {record['seconds']} s"
    if record.get("fallback"):
        lines.append(f"  note: {record['fallback']}")
    for binary in record.get("binaries", []):
        lines.append(f"  {binary}: {binary_version(out / binary, record)}")
    return "\n".join(lines)


def build_all(only: list[str] | None = None) -> int:
    """Build every actor (or the named ones); non-zero when a built actor failed."""
    out = bin_dir()
    out.mkdir(parents=True, exist_ok=True)
    work = cache_root() / "work"
    work.mkdir(parents=True, exist_ok=True)
    print(f"real-tools: {out}")
    failed = 0
    # Two builds in one cache (a checkout's and CI's clone) would copy sources into the same work directory at once:
    # the second waits for the first, then finds its binaries built.
    with (cache_root() / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for actor in load_actors():
            if only and actor.name not in only:
                continue
            record = build_actor(actor, out, work)
            failed += record["status"].startswith(("failed", "not served"))
            print(report(record, out), flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__ and __doc__.splitlines()[0])
    parser.add_argument("--bin-dir", action="store_true", help="print the binaries' directory and exit")
    parser.add_argument("actors", nargs="*", help="build only these actors (names in tools/real_tools.json)")
    args = parser.parse_args(argv)
    if args.bin_dir:
        print(bin_dir())
        return 0
    return build_all(args.actors or None)


if __name__ == "__main__":
    sys.exit(main())
