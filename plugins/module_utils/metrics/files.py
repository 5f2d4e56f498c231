# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the deploy writes for Prometheus beside the inventory, as data.

metrics_files() takes the record (the kept plan) and the inventory's
addresses and returns file name -> content (a dict or list) for every
file of gpufleet_metrics_dir: the vLLM, gateway and node exporter
targets (file_sd) and the alert rules. The filter shell serialises
them; to_write() says which of them differ from what is on disk. Pure
functions, standard library only.
"""

from __future__ import annotations

import hashlib

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import prometheus, rules, targets

OPTIONS = ("addresses", "gateways", "nodes", "node_exporter_port", "down_for")


def metrics_files(record, options):
    """file name -> content. options: addresses (GPU host -> the address
    its instances listen on), gateways (gateway host -> {listen, port,
    reach}), nodes (host -> its address, for node exporters),
    node_exporter_port, down_for (gpufleet_alert_down_for)."""
    if not isinstance(options, dict):
        raise ValueError("metrics_files: options must be a mapping (got %s)" % checks.show(options))
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError("metrics_files: unknown option(s) %s (known: %s)" % (", ".join(unknown), ", ".join(OPTIONS)))
    missing = [name for name in OPTIONS if name not in options]
    if missing:
        raise ValueError("metrics_files: missing option(s) %s" % ", ".join(missing))
    names = prometheus.TARGET_FILES
    return {
        names[rules.VLLM_JOB]: targets.vllm_targets(record, options["addresses"]),
        names[rules.GATEWAY_JOB]: targets.gateway_targets(options["gateways"]),
        names[rules.NODE_JOB]: prometheus.node_targets(options["nodes"], options["node_exporter_port"]),
        prometheus.RULE_FILE: rules.alert_rules(options["down_for"]),
    }


def to_write(files, directory, looked, mode):
    """What of FILES (file name -> text) differs from what a look at
    DIRECTORY found (stat_paths's files: path, mode, isdir, checksum of the
    directory and its files): {create_directory, files: name -> text}, a
    file whose sha1 or mode (octal text, e.g. "0644") differs, or that is
    missing. A rerun that changes nothing writes nothing, and calls no
    module per file."""
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise ValueError("files must map file name -> text (got %s)" % checks.show(files))
    if not isinstance(looked, list) or not all(isinstance(f, dict) and isinstance(f.get("path"), str) for f in looked):
        raise ValueError("looked must be stat_paths's files (got %s)" % checks.show(looked))
    found = dict((f["path"], f) for f in looked)
    directory = directory.rstrip("/") or "/"
    here = found.get(directory)
    # The look does not follow links: a link is taken as the directory it
    # names (the copy follows it, as it did before).
    if here is not None and not (here.get("isdir") or here.get("islnk")):
        raise ValueError("%s is not a directory" % directory)
    differs = {}
    for name, text in sorted(files.items()):
        seen = found.get(directory + "/" + name)
        sha1 = hashlib.sha1(text.encode("utf-8")).hexdigest()
        if seen is None or seen.get("checksum") != sha1 or seen.get("mode") != mode:
            differs[name] = text
    return {"create_directory": here is None, "files": differs}
