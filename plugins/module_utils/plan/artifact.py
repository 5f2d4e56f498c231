# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The deployed plan, kept between runs (docs/plan.md, "The plan artifact").

A run that reaches only some GPU hosts (--limit, an unreachable host, a
--tags run that gathers no facts) re-plans those hosts and keeps every other
host's instances as the last run deployed them, so the gateway is always
built from the whole fleet. merge_plans() does that on plain dicts; the
playbook reads and writes the artifact as JSON on the controller.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import by_host, host_warning
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import check as plan_check
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import file_kind, read_at_most

ARTIFACT_VERSION = 1
# A kept plan of 10,000 hosts of 8 instances each is about 30 MB.
PLAN_MAX_BYTES = 64 * 1024 * 1024


def _why(exc):
    code = errno.errorcode.get(exc.errno, "error %s" % exc.errno)
    return "%s (%s)" % (exc.strerror or "cannot be read", code)


def read_plan_file(path, max_bytes=PLAN_MAX_BYTES):
    """The kept plan's text, or None when nothing at all exists at `path`
    (the first run). Anything else that cannot be read raises ValueError
    naming the file and the reason: a dangling symbolic link, no permission,
    a directory or FIFO, an I/O error, an empty or oversized file, text that
    is not UTF-8. Treating those as "no plan" would drop every host the run
    does not reach from the plan and the gateway."""
    what = "plan file %s" % path
    try:
        os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError("%s cannot be read: %s" % (what, _why(exc)))
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError("%s cannot be read: it is %s, not a regular file" % (what, file_kind(mode)))
        # O_NONBLOCK: a FIFO put there after the check must not hang the run.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ValueError("%s cannot be read: it is a symbolic link to %s, which does not exist"
                         % (what, _link_target(path)))
    except OSError as exc:
        raise ValueError("%s cannot be read: %s" % (what, _why(exc)))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("%s cannot be read: it is %s, not a regular file" % (what, file_kind(info.st_mode)))
        data = read_at_most(fd, max_bytes)
    except OSError as exc:
        raise ValueError("%s cannot be read: %s" % (what, _why(exc)))
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValueError("%s cannot be read: it is larger than %d bytes" % (what, max_bytes))
    if not data:
        raise ValueError("%s is empty (a kept plan never is): restore it, or delete it to plan the whole "
                         "fleet from scratch" % what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("%s is not UTF-8 text (byte %d)" % (what, exc.start))


def _link_target(path):
    try:
        return repr(os.readlink(path))
    except OSError:
        return "a path"


def _unique_keys(pairs):
    """An object whose keys are all different: JSON readers disagree on
    which of two equal keys wins, so a record with both is damaged."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        twice = next(key for key, _value in pairs if key in seen or seen.add(key))
        raise ValueError("the key %s appears twice in one object" % checks.show(twice))
    return out


def load_artifact(text, name="<plan>"):
    """The artifact from its JSON text; None when there is none yet (empty).
    Raises ValueError naming the file and the problem."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if isinstance(text, dict):
        data = text
    else:
        if not isinstance(text, str):
            raise ValueError("plan file %s: its content must be JSON text, got %s" % (name, type(text).__name__))
        if len(text) > PLAN_MAX_BYTES:
            raise ValueError("plan file %s is larger than %d bytes" % (name, PLAN_MAX_BYTES))
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except ValueError as exc:
            raise ValueError("plan file %s is not JSON: %s" % (name, exc))
        except RecursionError:
            raise ValueError("plan file %s nests too deeply to be a plan" % name)
    if not isinstance(data, dict):
        raise ValueError("plan file %s must hold a JSON object, got %s" % (name, type(data).__name__))
    version = data.get("artifact_version")
    if isinstance(version, bool) or not isinstance(version, int) or version != ARTIFACT_VERSION:
        raise ValueError("plan file %s has artifact_version %r; this collection reads version %d"
                         % (name, version, ARTIFACT_VERSION))
    _check_plan(data, "plan file %s" % name)
    data = _warning_records(data)
    if not isinstance(data.get("hosts"), dict):
        raise ValueError("plan file %s: hosts must be a mapping host -> {gpus}" % name)
    return plan_check.check_artifact(data, "plan file %s" % name)


def require_artifact(text, name="<plan>"):
    """The artifact a run that plans nothing deploys from; an error when none was kept."""
    plan = load_artifact(text, name)
    if plan is None:
        raise ValueError(
            "no deployed plan at %s: run the playbook without --tags (or with --tags plan) "
            "on the GPU servers first" % name
        )
    return plan


def _check_plan(plan, what):
    if not isinstance(plan, dict):
        raise ValueError("%s must be the mapping fleet_plan returns, got %s" % (what, type(plan).__name__))
    for key in contract.PLAN_FIELDS:
        if key != "totals" and not isinstance(plan.get(key), list):
            raise ValueError("%s: %s must be a list" % (what, key))
    for i, instance in enumerate(plan["instances"] + plan["unused"]):
        if not isinstance(instance, dict) or not isinstance(instance.get("host"), str):
            raise ValueError("%s: instance or unused GPU %d has no host" % (what, i))


def _typed(host, options):
    """Options as fleet_plan read them: `-e tp_size=2` arrives as the string
    "2", `-e allow_span=yes` as "yes" (checks.boolean: a word that is
    no boolean, such as "maybe", is refused naming the option)."""
    out = {}
    for key, value in options.items():
        if key == "allow_span" and isinstance(value, str):
            value = checks.boolean("settings.%s.allow_span" % host, value.strip())
        elif isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        out[key] = value
    return out


def typed_options(host, options):
    """Options typed as the kept plan records them (hosts.HOST.options)."""
    return _typed(host, options)


def _warning_records(data):
    """The plan with its warnings as records. A plan kept before warnings
    were records holds "HOST: text" strings: each reads as the record of
    HOST (before the first ": ") with that text, concerning no GPU or node.
    The only place a warning's text is read back."""
    if not any(isinstance(w, str) for w in data["warnings"]):
        return data
    return dict(data, warnings=[_old_warning(w) if isinstance(w, str) else w for w in data["warnings"]])


def _old_warning(text):
    host, sep, rest = text.partition(": ")
    return host_warning(host, rest) if sep else host_warning("", text)


def merge_plans(fresh, previous, replanned, fleet_hosts):
    """Merge a fresh plan of some hosts into the last deployed plan.

    fresh: fleet_plan's result for the hosts in `replanned`.
    previous: load_artifact's result, or None before the first run.
    fleet_hosts: every GPU host of the inventory; a host of the previous
    plan that is no longer in it is dropped.
    fresh["settings"], when present (fleet_plan_by_host), maps each host to
    the fleet_plan options it was planned with: they are kept per host, so
    the audit can plan a host again as it was deployed.
    fresh["hardware"], when present, maps each host to the record of its
    GPUs, NUMA nodes and CPUs (hardware_record): kept with the
    host, so a later run checks its kept entries against it.

    fresh["unplannable"], when present, maps each host that could not be
    planned to why: it was not re-planned, so it keeps its entry.

    Returns {"plan": the new artifact, "replanned", "kept", "not_planned",
    "dropped"} (sorted host lists) and "unplannable" (host -> reason).
    "not_planned" are hosts of the fleet that neither this run nor an
    earlier one planned.
    """
    _check_plan(fresh, "the fresh plan")
    unplannable = fresh.get("unplannable") or {}
    if not isinstance(unplannable, dict):
        raise ValueError("the fresh plan's unplannable must map host -> reason")
    replanned = sorted(set(str(h) for h in replanned) - set(map(str, unplannable)))
    fleet = set(str(h) for h in fleet_hosts)
    outside = [h for h in replanned if h not in fleet]
    if outside:
        raise ValueError("re-planned hosts not in the fleet: %s" % ", ".join(outside))
    stray = sorted(set(i["host"] for i in fresh["instances"] + fresh["unused"]) - set(replanned))
    if stray:
        raise ValueError("the fresh plan holds hosts that were not re-planned: %s" % ", ".join(stray))

    previous = previous or {"instances": [], "unused": [], "warnings": [], "hosts": {}}
    known = previous["hosts"]
    kept = sorted(h for h in fleet if h in known and h not in replanned)
    dropped = sorted(h for h in known if h not in fleet)
    not_planned = sorted(h for h in fleet if h not in known and h not in replanned)

    def keep(entries):
        return [e for e in entries if e["host"] in kept]

    settings = fresh.get("settings")
    if settings is not None and not isinstance(settings, dict):
        raise ValueError("the fresh plan's settings must map host -> options")
    hardware = fresh.get("hardware")
    if hardware is not None and not isinstance(hardware, dict):
        raise ValueError("the fresh plan's hardware must map host -> record")
    hosts = dict((h, known[h]) for h in kept)
    for host in replanned:
        entry = {"gpus": (sum(len(i["gpus"]) for i in fresh["instances"] if i["host"] == host)
                          + sum(1 for u in fresh["unused"] if u["host"] == host))}
        if settings and host in settings:
            entry["options"] = _typed(host, settings[host])
        if hardware and host in hardware:
            entry["hardware"] = hardware[host]
        hosts[host] = entry
    gpus = dict((h, hosts[h].get("gpus", 0)) for h in hosts)

    reformed = _drop_reformed(keep(previous["instances"]), fresh, replanned, fleet)
    instances = sorted(reformed.kept + list(fresh["instances"]),
                       key=lambda i: (i["host"], i.get("ordinal", 0)))
    unused = sorted(keep(previous["unused"]) + reformed.unused + list(fresh["unused"]),
                    key=lambda u: (u["host"], u.get("index") if u.get("index") is not None else -1))
    warnings = ([w for w in previous["warnings"] if w["host"] in kept] + list(fresh["warnings"])
                + reformed.warnings)
    plan = {
        "artifact_version": ARTIFACT_VERSION,
        "hosts": dict((h, hosts[h]) for h in sorted(hosts)),
        "instances": instances,
        "unused": unused,
        "warnings": by_host(warnings),
        "totals": contract.plan_totals(len(gpus), sum(gpus.values()), instances),
    }
    return {"plan": plan, "replanned": replanned, "kept": kept, "not_planned": not_planned, "dropped": dropped,
            "unplannable": dict((str(h), str(why)) for h, why in sorted(unplannable.items()))}


# What _drop_reformed leaves: the entries kept, the GPUs of those dropped, why.
Reformed = namedtuple("Reformed", ("kept", "unused", "warnings"))


def _drop_reformed(kept, fresh, replanned, fleet):
    """Kept entries of multi-node instances that this run formed anew.

    A host this run did not reach keeps its entries, but its part of a
    multi-node instance is stale once a partner host was re-planned into
    another instance (or none), or left the inventory: that entry leaves
    the plan, its GPUs are unused, and a warning says to run the host
    again. Returns Reformed(entries kept, unused GPUs, warnings)."""
    fresh_hosts = dict((i["host"], (contract.multinode(i) or {}).get("hosts")) for i in fresh["instances"])
    keep, unused, warnings = [], [], []
    for entry in kept:
        multinode = contract.multinode(entry)
        partners = multinode.get("hosts") if multinode is not None else None
        moved = [h for h in partners or () if (h in replanned and fresh_hosts.get(h) != partners)
                 or h not in fleet]
        if not moved:
            keep.append(entry)
            continue
        gone = [h for h in moved if h not in fleet]
        anew = [h for h in moved if h in fleet]
        why = ("its multi-node instance %s (hosts %s) was formed anew without it: %s; run the deploy with this "
               "host to plan it again" % (entry.get("name"), ", ".join(partners), "; ".join(
                   ["%s re-planned while this host was not reached" % ", ".join(anew)] * bool(anew)
                   + ["%s left the inventory" % ", ".join(gone)] * bool(gone))))
        unused.extend({"host": entry["host"], "id": g.get("id"), "index": g.get("index"), "reason": why}
                      for g in entry.get("gpus") or ())
        warnings.append(host_warning(entry["host"], why))
    return Reformed(keep, unused, warnings)


def combine_plans(plans):
    """One fleet plan from fleet_plan results of disjoint host sets (each
    host planned with its own settings)."""
    plans = list(plans)
    instances, unused, warnings = [], [], []
    for plan in plans:
        _check_plan(plan, "a fleet plan")
        instances.extend(plan["instances"])
        unused.extend(plan["unused"])
        warnings.extend(plan["warnings"])
    totals = contract.add_totals(plan.get("totals") for plan in plans)
    return {
        "instances": sorted(instances, key=lambda i: (i["host"], i.get("ordinal", 0))),
        "unused": sorted(unused, key=lambda u: (u["host"], u.get("index") if u.get("index") is not None else -1)),
        "warnings": by_host(warnings),
        "totals": totals,
    }


def dump_artifact(plan):
    """The artifact as stable JSON text: the same plan gives the same bytes,
    so rewriting an unchanged plan changes nothing."""
    return json.dumps(plan, sort_keys=True, indent=1) + "\n"


def hardware_record(facts):
    """The compact record of a host's hardware kept with its plan entry:
    {gpus: [[id, index], ...], numa_nodes: [...], cpus: cpulist}."""
    gpus = sorted(([g["id"], g.get("index")] for g in facts.get("gpus") or ()),
                  key=lambda pair: (pair[1] is None, pair[1] or 0, pair[0]))
    nodes = sorted(n["id"] for n in facts.get("numa_nodes") or ())
    cpus = set()
    for node in facts.get("numa_nodes") or ():
        cpus.update(parse_cpulist(node.get("cpus") or ""))
    return {"gpus": gpus, "numa_nodes": nodes, "cpus": format_cpulist(cpus)}
