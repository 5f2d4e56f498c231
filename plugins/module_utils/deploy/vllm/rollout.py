# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What a run of role vllm changes on a host, decided over plain dicts:
which files it wrote before and no longer plans (stale_candidates,
stale_files), which directories and files it writes (write_needed, called
by the vllm_files action with the content's sha1), whether it gathers the
service manager first (wants_service_manager), what it does once it wrote
(after_write), which instances restart
because their files changed or the engine was installed anew
(restarting_instances), what each host of a batch rolls in which ordinal
(batch_rollout) and what the host runs once the role succeeded
(deployed_record). The role's tasks call these through the vllm_units,
vllm_stale, vllm_rollout, vllm_deployed and vllm_wants_service_mgr filters
and the vllm_files action. Pure functions, standard library only.
"""

from __future__ import annotations


def stale_files(found, planned):
    """Paths of the role's files on the host (find results whose first line
    is the role's marker) that the plan no longer has, sorted."""
    planned_paths = set(entry["path"] for entry in planned)
    return sorted(set(entry["path"] for entry in found if entry["path"] not in planned_paths))


def restarting_instances(units, written, install_changed=False):
    """Names of the instances that restart: every one when the secrets
    changed (all units read secrets.env) or the install task changed the
    engine in their virtualenv (install_changed: a new venv, a reinstall;
    the units run the old code until they restart), else those whose unit
    or option file changed (written: the vllm_files task's results, each
    with its __vllm_file item)."""
    changed = [result["__vllm_file"] for result in written if result.get("changed")]
    if install_changed or any(entry.get("secret") for entry in changed):
        return [unit["name"] for unit in units]
    names = []
    for entry in changed:
        name = (entry.get("unit") or {}).get("name")
        if name is not None and name not in names:
            names.append(name)
    return names


def stale_candidates(existing, planned, folders, prefix):
    """Whether the host may hold stale files of the role: regular files that
    stat_paths saw in the unit or option folder (folders), named PREFIX*.service,
    PREFIX*.socket (the gateways' agent) or PREFIX*.yaml, that the plan does
    not have. Only then does the role read
    their first lines for its marker (tasks/cleanup.yml), so a rerun with
    nothing stale asks the host nothing more."""
    planned_paths = set(entry["path"] for entry in planned)
    found = []
    for path, entry in existing.items():
        folder, name = path.rsplit("/", 1) if "/" in path else ("", path)
        if (entry.get("isreg") and folder in folders and path not in planned_paths and name.startswith(prefix)
                and name.endswith((".service", ".socket", ".yaml"))):
            found.append(path)
    return sorted(found)


def write_needed(entry, content_sha1=None):
    """Whether the role writes one of vllm_units' writes: a directory that is
    not as planned, a file that is not as planned (kind, mode, owner) or
    whose content (its sha1, as rendered or read on the controller) differs
    from the host's (find's checksum)."""
    if not entry["as_planned"]:
        return True
    if entry["kind"] == "directory":
        return False
    return content_sha1 != entry.get("checksum")


def after_write(stale_candidates, download_needed, manage_service):
    """What role vllm does once it wrote (tasks/after_write.yml): {steps,
    include}. steps: the task files it includes first, in order, each only
    when there is something to do: cleanup (the look saw files of the
    role's names that the plan does not have), then download (the model is
    not in HF_HOME yet); include: whether it includes tasks/after_write.yml
    at all (a step, or the service it manages: start and roll the units).
    A rerun with nothing to clean, download or start runs one skipped task
    for all of it."""
    steps = (["cleanup"] if stale_candidates else []) + (["download"] if download_needed else [])
    return {"steps": steps, "include": bool(steps) or bool(manage_service)}


def not_started_note(manage_service, vllm_manage_service, service_mgr, unit_dir):
    """What the deploy report says of a host whose units role vllm wrote but
    does not start (manage_service false: vllm_manage_service false, or
    auto where the service manager is not systemd); None where it starts them."""
    if manage_service:
        return None
    return ("service manager here is %s and vllm_manage_service is %s: units rendered and validated in %s, not started"
            % (service_mgr or "unknown", vllm_manage_service, unit_dir))


def wants_service_manager(manage_service, service_mgr):
    """Whether the role must gather the service manager first: only
    vllm_manage_service auto decides by it (any other value is checked,
    and refused when bad, by the variables' check)."""
    return isinstance(manage_service, str) and manage_service.strip().lower() == "auto" and not service_mgr


def batch_rollout(states, batch, check_mode=False):
    """What service.yml starts and rolls on each host of the batch:
    {host: {agents, ordinals, steps}} for every host of BATCH, worked out in
    one pass over the batch (a per-host call that read every host of the
    batch made a batch's rollout cost grow with its square).

    states: host -> {units (vllm_units' units), written (the write task's
    results), install_changed (the install task changed the venv; optional),
    agents (vllm_units' agent_services; optional)} for the hosts that ran the
    role (those of the batch, and the other hosts of their multi-node
    instances); batch: the play batch, whose hosts roll at once. agents
    (agent_steps) is what the role starts first on the host. ordinals is the
    most units any host of the batch has (every host loops over the same
    ordinals, so Ansible runs each step on all of them together); steps[i]
    is the host's i-th unit with `restart` (its files changed here, or on any
    host of its multi-node instance) or None where the host sits out: it has
    fewer units, or check mode wrote no unit that systemd could pretend to
    start (`installed`: the unit file was on the host before this run). In
    check mode the install changed nothing (pip only says it would), so it
    restarts nothing."""
    restarting = dict((name, set(restarting_instances(
        state["units"], state["written"], bool(state.get("install_changed")) and not check_mode)))
        for name, state in states.items())
    ordinals = max([len(states[name]["units"]) for name in batch if name in states] or [0])
    return dict((host, _host_steps(host, states, restarting, ordinals, check_mode)) for host in batch)


def _host_steps(host, states, restarting, ordinals, check_mode):
    steps = []
    for unit in states[host]["units"] if host in states else []:
        hosts = unit["multinode"]["hosts"] if unit.get("multinode") else [host]
        restart = any(unit["name"] in restarting.get(name, ()) for name in hosts)
        steps.append(None if check_mode and not unit.get("installed") else dict(unit, restart=restart))
    agents = agent_steps(states[host].get("agents", []), states[host]["written"], check_mode) if host in states else []
    return {"agents": agents, "ordinals": ordinals, "steps": steps + [None] * (ordinals - len(steps))}


def agent_steps(agents, written, check_mode=False):
    """The agent's units the role starts before the instances ({name, state}
    each): restarted where a file in its restart_on changed in this run (the
    write task's results), else started. In check mode a unit that was not
    on the host before the run is left out (systemd has nothing to pretend
    to start)."""
    changed = set(result["__vllm_file"].get("path") for result in written
                  if result.get("changed") and result.get("__vllm_file"))
    return [{"name": entry["name"], "state": "restarted" if changed & set(entry["restart_on"]) else "started"}
            for entry in agents if entry["installed"] or not check_mode]


def deployed_record(units, written, engine, variables=None):
    """What the host runs once the role succeeded on it (the vllm_deployed
    fact): {engine, instances: {name: {unit, unit_sha1, engine}}, files}.
    files (with variables, the role's checked variables): where the units
    and option files are, so the host can be taken down from the record.

    units: vllm_units' units; written: the write task's results, whose unit
    items carry content_sha1 (the sha1 of the unit file's content as the
    vllm_files action wrote it or found it already there); engine: vllm_units'
    engine. A unit the write task did not report is an error, never a guess."""
    sha1_by_path = {}
    for result in written:
        entry = result.get("__vllm_file") or {}
        if entry.get("verify") and result.get("content_sha1"):
            sha1_by_path[entry["path"]] = result["content_sha1"]
    instances = {}
    for unit in units:
        if unit["path"] not in sha1_by_path:
            raise ValueError("written: must hold the content_sha1 of every unit (got none for %s)" % unit["unit"])
        instances[unit["name"]] = {"unit": unit["unit"], "unit_sha1": sha1_by_path[unit["path"]], "engine": engine}
    out = {"engine": engine, "instances": instances}
    if variables is not None:
        out["files"] = {"unit_dir": variables["vllm_unit_dir"], "config_dir": variables["vllm_config_dir"],
                        "unit_prefix": variables["vllm_unit_prefix"]}
    return out
