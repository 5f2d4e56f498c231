# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What a deploy run did, host by host (docs/deploy.md, "The end of a run").

run_report() compares the kept plan at the start of the run (`before`)
with the one at its end (`after`) and says, per GPU host: deployed (and
what changed), kept (and why), failed, removed or still to remove; then
what the gateway routes, and, when the gateways were not in the run while
their routes changed, which instances they do not route yet and the
command that finishes the job. Pure functions over plain dicts.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record

# Fields that say what an instance is (a change of any of them re-forms it).
_PLACEMENT = ("gpus", "gpu_indices", "binding", "numa_nodes", "cpus", "tp_size", "pp_size", "port", "dist_port",
              "multinode")


def _by_name(plan, host):
    return dict((i["name"], i) for i in plan["instances"] if i["host"] == host)


def _where(inst):
    """"GPUs 0,1, :8000"; a CPU instance holds no GPU: "CPU on NUMA node 0, :8000"."""
    if contract.device(inst) == "cpu":
        nodes = [str(n) for n in inst.get("numa_nodes") or ()]
        return "CPU on NUMA node%s %s, :%s" % ("" if len(nodes) == 1 else "s", ",".join(nodes), inst.get("port"))
    return "GPUs %s, :%s" % (",".join(str(g) for g in inst.get("gpu_indices") or ()), inst.get("port"))


def _instance_change(old, new):
    """How one instance changed between two records, as a phrase, or None."""
    if old is None:
        return "%s new (%s)" % (new["name"], _where(new))
    if new is None:
        return "%s removed (%s)" % (old["name"], _where(old))
    if any(old.get(k) != new.get(k) for k in _PLACEMENT):
        return "%s re-formed (%s, was %s)" % (new["name"], _where(new), _where(old))
    ran_old, ran_new = old.get("deployed") or {}, new.get("deployed") or {}
    if ran_old.get("engine") != ran_new.get("engine") and ran_new.get("engine"):
        return "%s upgraded (%s, was %s)" % (new["name"], ran_new["engine"], ran_old.get("engine") or "unrecorded")
    if old.get("served_model_name") != new.get("served_model_name") or old.get("model") != new.get("model"):
        return "%s serves %s now" % (new["name"], new.get("served_model_name"))
    if ran_old.get("unit_sha1") != ran_new.get("unit_sha1") and ran_old.get("unit_sha1"):
        return "%s restarted (its unit changed)" % new["name"]
    return None


def host_changes(before, after, host):
    """Phrases for every instance of `host` that changed, then how many did not."""
    old, new = _by_name(before, host), _by_name(after, host)
    phrases, same = [], 0
    for name in sorted(set(old) | set(new), key=lambda n: (new.get(n) or old.get(n)).get("ordinal", 0)):
        phrase = _instance_change(old.get(name), new.get(name))
        if phrase is None:
            same += 1
        else:
            phrases.append(phrase)
    if same:
        phrases.append("%d instance%s unchanged" % (same, "" if same == 1 else "s"))
    return phrases or ["no instances"]


def _routes(plan):
    """(served name, server name, port) of every instance the gateway routes in `plan`."""
    return set((i.get("served_model_name"), contract.server_name(i["host"], i["name"]), i.get("port"))
               for i in plan["instances"] if contract.is_head(i))


def run_report(before, after, context):
    """The end-of-run lines.

    context: fleet (gpu_servers), in_run (GPU hosts this run targeted),
    failed (those that failed or were unreachable), converged (those
    recorded as deployed), removed (taken down and forgotten this run),
    gateways (the inventory's), gateway_configured (whether the gateway
    play ran on them), finish (the command that finishes a partial run),
    unplannable (optional: host -> why it could not be planned),
    check_mode (optional: a --check run, which deploys, records and removes
    nothing: its lines say what the run would do, never that it did).
    """
    before = before or plan_record.empty_record()
    after = after or plan_record.empty_record()
    fleet = list(context["fleet"])
    failed, converged = set(context["failed"]), set(context["converged"])
    in_run = set(context["in_run"])
    unplannable = context.get("unplannable") or {}
    check = bool(context.get("check_mode"))
    lines = ["check mode: nothing was deployed, recorded or removed; this is what the run would do"] if check else []
    for host in sorted(set(fleet) | set(before["hosts"]) | set(after["hosts"])):
        if host in converged:
            lines.append("%s: %s: %s" % ("would deploy" if check else "deployed", host,
                                         "; ".join(host_changes(before, after, host))))
        elif host in context["removed"] and check:
            lines.append("would remove: %s: no longer in gpu_servers; its instances would be drained, stopped and "
                         "their files removed" % host)
        elif host in context["removed"]:
            lines.append("removed: %s: no longer in gpu_servers; its instances were drained, stopped and "
                         "their files removed" % host)
        elif host not in fleet:
            lines.append("to remove: %s: no longer in gpu_servers and not taken down in this run (%s); the gateway "
                         "no longer routes it, but its units may still run" % (
                             host, "failed or unreachable" if host in failed else "not in the inventory or the run"))
        elif host in unplannable:
            lines.append("unplannable: %s: %s" % (host, unplannable_phrase(after, host, unplannable[host])))
        elif host in failed:
            lines.append("failed: %s: not deployed (its errors are above); %s" % (host, _kept_phrase(after, host)))
        elif host not in in_run:
            lines.append("kept: %s: not in this run (--limit); %s" % (host, _kept_phrase(after, host)))
        else:
            lines.append("kept: %s: not deployed in this run (--tags, or nothing to plan); %s" % (
                host, _kept_phrase(after, host)))
    lines.extend(_gateway_lines(before, after, context))
    return lines


def _kept_phrase(record, host):
    """What a host that was not deployed keeps: "it keeps its recorded
    instances vllm-0 :8000, ..." only when the record holds some of it."""
    names = sorted(_by_name(record, host).values(), key=lambda i: i.get("ordinal", 0))
    if not names:
        return "it has no recorded instances: nothing was deployed on it"
    return "it keeps its recorded instances %s" % ", ".join("%s :%s" % (i["name"], i.get("port")) for i in names)


def unplannable_phrase(record, host, why):
    """Why HOST could not be planned (or the host preflight refused it),
    without the "host HOST: " the planner's messages start with, and what it
    keeps (RECORD: the kept plan at the end of the run)."""
    why = str(why)
    why = why[len("host %s: " % host):] if why.startswith("host %s: " % host) else why
    return "%s; %s" % (why, _kept_phrase(record, host))


def _route_lines(plan, fleet, verb):
    by_model = {}
    for model, server, port in sorted(_routes(plan_record.routed(plan, fleet)), key=lambda r: (str(r[0]), r[1])):
        by_model.setdefault(model, []).append("%s :%s" % (server, port))
    lines = ["%s %s: %s" % (verb, model, ", ".join(servers)) for model, servers in sorted(by_model.items())]
    return lines or ["%s no instance" % verb]


def _unrouted_lines(before, after, fleet):
    """A model the gateway routed before this run and no longer routes (its
    last instance removed, its hosts gone or unplannable): said once, so it
    does not vanish from the gateway without a word (clients now get 404)."""
    # Before: every recorded host (one that left gpu_servers in this run was routed until now).
    had = set(route[0] for route in _routes(plan_record.routed(before, list(before["hosts"]))))
    now = set(route[0] for route in _routes(plan_record.routed(after, fleet)))
    return ["%s: no longer routed (no recorded instance serves it; the gateway answers 404 for it)" % model
            for model in sorted(had - now, key=str)]


def _gateway_lines(before, after, context):
    if not context["gateways"]:
        return ["gateway: none in the inventory"]
    if context["gateway_configured"] and context.get("check_mode"):
        return _route_lines(after, context["fleet"], "gateway would route") + [
            line.replace(": no longer routed (", ": would no longer be routed (")
            for line in _unrouted_lines(before, after, context["fleet"])]
    if context["gateway_configured"]:
        return _route_lines(after, context["fleet"], "gateway routes") + _unrouted_lines(before, after, context["fleet"])
    # The gateways kept the routes of the record they were last built from.
    lines = _route_lines(before, context["fleet"], "gateway (not in this run) still routes")
    had = _routes(plan_record.routed(before, context["fleet"]))
    now = _routes(plan_record.routed(after, context["fleet"]))
    if had == now:
        return lines
    missing = sorted(r[1] for r in now - had)
    stale = sorted(r[1] for r in had - now)
    text = "partial run: the gateways (%s) were not in this run" % ", ".join(context["gateways"])
    if missing:
        text += ", so HAProxy does not route %s yet" % ", ".join(missing)
    if stale:
        text += "%s still sends requests to %s" % (", and it" if missing else ", and HAProxy", ", ".join(stale))
    return lines + ["%s: finish with %s" % (text, context["finish"])]


def decommission_lines(down, inventory, fleet):
    """What decommission.yml says it takes down: DOWN, the chosen hosts,
    those INVENTORY (every host Ansible knows) can reach, the others staying
    recorded; and any still in FLEET (gpu_servers), which the next deploy
    plans again as new hosts (new instance names and ports): said here, where
    it matters, not found out on the next run."""
    reached = [h for h in down if h in inventory]
    lines = ["taking down: %s" % (", ".join(reached) or "none"),
             "not in the inventory (they stay recorded until they can be reached): %s"
             % (", ".join(h for h in down if h not in inventory) or "none")]
    back = [h for h in down if h in fleet]
    if back:
        lines.append("still in gpu_servers: %s: the next deploy_inference run deploys %s again as new (new instance "
                     "names and ports); take %s out of gpu_servers to keep %s down"
                     % ((", ".join(back),) + ("it" if len(back) == 1 else "them",) * 3))
    return lines
