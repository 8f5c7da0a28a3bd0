"""The words of the availability report: the values of phrases.py's placeholders that several sections use.

A section module fills its templates with these and its own ``_words`` (the placeholders only it uses); each word is
picked from phrases.py's fragments by the facts, so no sentence is assembled here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from headscale_ha.program.availability.facts import Facts
from headscale_ha.program.availability.phrases import APP_NAMES, Common

#: Placeholder → its value.
Words = Mapping[str, str]


def fill(template: str, words: Words) -> str:
    """``template`` with its placeholders replaced by ``words`` (a missing word is an error, never left blank)."""
    return template.format_map(words)


def cap(text: str) -> str:
    """``text`` as the start of a sentence."""
    return text[:1].upper() + text[1:]


def app_names(apps: Iterable[str], sep: str = " and ") -> str:
    return sep.join(APP_NAMES[app] for app in apps)


def sites(names: Iterable[str]) -> str:
    return ", ".join(Common.SITE.format(name=name) for name in names)


def count(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless it is one."""
    return Common.COUNT.pick(number == 1).format(number=number, noun=noun)


def spread(number: int, noun: str) -> str:
    """How many pods of a workload there are, and how they are spread when there is more than one."""
    return count(number, noun) + (Common.SPREAD if number > 1 else "")


def _nfs(f: Facts) -> str | None:
    """The NFS export (or claim) the backups go to, without an article."""
    if f.nfs is None:
        return None
    if f.nfs.storage_class is not None:
        return Common.NFS_CLAIM.format(storage_class=f.nfs.storage_class)
    return Common.NFS_EXPORT.format(server=f.nfs.server, path=f.nfs.path)


def _placement(f: Facts) -> str:
    """Where the control plane's pods may run."""
    where = Common.PLACEMENT.pick(f.workloads_on_control_plane)
    return where + (Common.NEVER_ON.format(nodes=sites(f.exclude_nodes)) if f.exclude_nodes else "")


def _local_volume(f: Facts) -> str:
    """The volume a SQLite database lives on while its application runs."""
    if not f.disposable:
        claim_class = Common.CLAIM_CLASS.pick(bool(f.storage_class)).format(storage_class=f.storage_class)
        return Common.RETAINED_CLAIM.format(storage_class=claim_class)
    ephemeral = f.ephemeral_storage_class
    return Common.EPHEMERAL_VOLUME.pick(bool(ephemeral)).format(storage_class=ephemeral)


def _control_stops(f: Facts) -> str:
    """What stops while Headscale is down; established tunnels are not in it."""
    return Common.CONTROL_STOPS + (Common.EMBEDDED_DERP_STOPS.pick(f.derp_maps) if f.derp_embedded else "")


def shared_words(f: Facts) -> dict[str, str]:
    """The words more than one section uses."""
    nfs = _nfs(f)
    nfs_text = Common.THE_NFS.format(nfs=nfs) if nfs is not None else Common.NO_NFS
    detach = f.recovery.force_detach
    return {
        "site": f.site,
        "active_site": f.active_site,
        "nodes": str(f.nodes),
        "routers": str(f.routers),
        "instances": str(f.instances),
        "sync_interval": f.sync_interval,
        "nfs": nfs or "",
        "nfs_text": nfs_text,
        "nfs_cap": cap(nfs_text),
        "placement": _placement(f),
        "local_volume": _local_volume(f),
        "tunnels": Common.TUNNELS,
        "tunnels_cap": cap(Common.TUNNELS),
        "control_stops": _control_stops(f),
        "detach_wait": Common.WAIT.format(seconds=detach) if detach is not None else "",
        "litestream_names": app_names(f.litestream_apps),
        "and_headplane": Common.AND_HEADPLANE if f.headplane else "",
    }
