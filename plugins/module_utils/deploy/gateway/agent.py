# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The agent that tells every gateway how much of an instance's share to
send it (HAProxy's agent-check), and so drains an instance before any stop.

Each GPU host runs one agent (role vllm: a socket unit on AGENT_PORT, one
short-lived process per connection). A gateway connects to it every
AGENT_INTERVAL for each of the host's servers, sends the instance's name
and a newline (agent-send), and reads one line: the instance's weight as a
percentage of its configured weight, READY once the instance serves,
DRAINING from the moment its unit is asked to stop (ExecStop=, whoever
stops it: the role, `systemctl stop`, a reboot), and DRAINING while it is
not ready (no state yet). A weight of 0% takes the server out of the
balancing without marking it down and without touching what an operator
set over the runtime API (drain, maintenance); only the health check marks
it down. An agent that cannot be reached changes nothing (HAProxy's rule),
so an instance without one (a unit not managed by systemd) is balanced as
before.

The unit's stop waits agent_wait() seconds after writing DRAINING, so
that every gateway has read it (two checks), then for the engine's
requests to end.

While an instance serves, the agent answers its engine's own load instead
of READY (engine_weight(): waiting requests and KV cache use from vLLM's
/metrics): the host's load reader (role vllm: one long-running service,
WEIGHTS) reads every serving instance's /metrics each AGENT_INTERVAL, at
the URL the unit wrote beside its state (METRICS_FILE), and writes the
weight into its own runtime directory, one file per instance. The agent
answers that weight only while the state is READY, so a drain is never
overwritten by a weight read a moment before; a reader that stopped takes
its directory with it, and the agent answers READY again. One read per
instance per interval, however many gateways ask.

The agent's port is one per host and fixed, so that it stays the same
across runs and needs no record: port_clash() refuses a plan that puts an
instance's API, engine (VLLM_PORT range) or rendezvous port on it. Pure,
standard library only.
"""

from __future__ import annotations

import math

AGENT_PORT = 8999
# Seconds between two checks of one server by one gateway (agent-inter).
AGENT_INTERVAL = 1
READY = "100%"
DRAINING = "0%"
# Every server's configured weight: HAProxy sets a server to the agent's
# percentage of it, rounded down (of a weight of 1, anything under 100% is
# 0, a drain), so 100 gives each percent a step of its own.
SERVER_WEIGHT = 100
# The agent's state file of an instance, in the unit's runtime directory,
# and beside it the URL of the instance's /metrics (written when it serves).
STATE_FILE = "agent"
METRICS_FILE = "agent.metrics"
# The load reader's unit stem and runtime directory, after the unit prefix.
WEIGHTS = "agent-weights"


def agent_wait():
    """Seconds the stop waits after writing DRAINING: two checks of every
    gateway, and a second for the last request a gateway sent before it."""
    return 2 * AGENT_INTERVAL + 1


def agent_send(instance):
    """The line a gateway sends the agent: the instance's name and a
    newline (HAProxy reads \\n in a double-quoted word as a newline).
    Instance names are letters, digits, '_', '.' and '-' (the plan's rule)."""
    return '"%s\\n"' % instance


def server_options(instance, interval=AGENT_INTERVAL, port=AGENT_PORT):
    """The agent options of one HAProxy server line."""
    return "agent-check agent-port %d agent-inter %ds agent-send %s" % (port, interval, agent_send(instance))


def state_line(state):
    """What the agent answers for a state word ('ready' or 'drain'), as the
    unit writes it into its state file."""
    return {"ready": READY, "drain": DRAINING}[state]


# The engine's own load (issue 34): the weight of a serving instance from
# its /metrics. Requests waiting for a slot (vllm:num_requests_waiting, all
# engines of the instance summed) and the KV cache in use
# (vllm:kv_cache_usage_perc, 0-1, the fullest engine; vllm:gpu_cache_usage_perc
# before vLLM 0.10) each scale the weight down linearly:
#   waiting: 100% with none waiting, ENGINE_MIN_WEIGHT at WAITING_FULL or more;
#   KV cache: 100% up to KV_CACHE_LOW, ENGINE_MIN_WEIGHT at KV_CACHE_FULL or more;
# the lower of the two is the weight, never under ENGINE_MIN_WEIGHT: 0% is
# kept for a drain (a loaded instance still takes its small share, and when
# every instance is loaded alike their shares stay equal).
WAITING_METRIC = "vllm:num_requests_waiting"
KV_CACHE_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
WAITING_FULL = 16
KV_CACHE_LOW = 0.80
KV_CACHE_FULL = 0.98
ENGINE_MIN_WEIGHT = 10


def metric_values(text, names):
    """{name: [value of each sample]} of NAMES in a Prometheus text exposition
    (comments, other metrics and unreadable samples skipped)."""
    found = dict((name, []) for name in names)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in found:
            continue
        # The value follows the labels ('}' ends them; a label value may hold spaces).
        rest = line[line.rindex("}") + 1:] if "{" in line else line[len(name):]
        fields = rest.split()
        try:
            value = float(fields[0])
        except (IndexError, ValueError):
            continue
        if math.isfinite(value):  # no NaN, no infinity
            found[name].append(value)
    return found


def _scale(value, low, full):
    """1 at or under LOW, 0 at or over FULL, linear between."""
    if value <= low:
        return 1.0
    if value >= full:
        return 0.0
    return (full - value) / float(full - low)


def engine_weight(text):
    """The agent's answer for a serving instance whose /metrics answered
    TEXT: a weight percentage ('10%'-'100%') from its waiting requests and
    KV cache use (see WAITING_FULL, KV_CACHE_LOW, KV_CACHE_FULL). An
    instance whose metrics hold neither is answered READY."""
    values = metric_values(text, (WAITING_METRIC,) + KV_CACHE_METRICS)
    factors = []
    if values[WAITING_METRIC]:
        factors.append(_scale(sum(values[WAITING_METRIC]), 0, WAITING_FULL))
    cache = values[KV_CACHE_METRICS[0]] or values[KV_CACHE_METRICS[1]]
    if cache:
        factors.append(_scale(max(cache), KV_CACHE_LOW, KV_CACHE_FULL))
    if not factors:
        return READY
    weight = ENGINE_MIN_WEIGHT + (100 - ENGINE_MIN_WEIGHT) * min(factors)
    return "%d%%" % int(round(weight))


def name_clash(names):
    """The message of the first instance name whose unit would be the load
    reader's (PREFIX + WEIGHTS + .service), or None."""
    for name in names:
        if name == WEIGHTS:
            return ("instance %s: its unit would be the name of the gateways' agent's load reader on each GPU "
                    "host; name the instance otherwise" % name)
    return None


def port_clash(instances, port=AGENT_PORT):
    """The message of the first instance (checked plan instances: name,
    port, dist_port, multinode) whose ports take the agent's port, or None."""
    for inst in instances:
        taken = [("API port", inst["port"], inst["port"]),
                 ("VLLM_PORT range", inst["dist_port"], inst.get("dist_port_last", inst["dist_port"]))]
        if inst.get("multinode"):
            master = inst["multinode"]["master_port"]
            taken.append(("master port", master, master))
        for what, first, last in taken:
            if first <= port <= last:
                return ("instance %s: its %s %s takes port %d, where each GPU host runs the gateways' agent "
                        "(it drains an instance before a stop): plan the instances' ports elsewhere "
                        "(gpufleet_base_port, gpufleet_dist_port_base)" % (
                            inst["name"], what, first if first == last else "%d-%d" % (first, last), port))
    return None
