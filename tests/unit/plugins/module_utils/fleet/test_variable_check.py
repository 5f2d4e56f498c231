# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The fleet's variables checked together (module_utils/plan/variable_check.py),
against the roles' real argument specs and defaults."""

import pathlib
import re

import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import variable_check
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files

REPO = pathlib.Path(__file__).resolve().parents[5]
SECRET = "s3cr3t-value-never-shown-0123456789"


def check(gpu, gateways=None, extra_vars=()):
    return variable_check.check_fleet(gpu, gateways or {}, role_files.spec_names(), role_files.defaults("vllm"),
                                      role_files.defaults("gateway"), extra_vars=extra_vars)


def good_gpu(**more):
    return dict({"vllm_model": "meta-llama/Llama-3.1-70B-Instruct", "gpufleet_tp_size": 4}, **more)


def test_a_good_fleet_has_no_error():
    assert check({"gpu-a": good_gpu()}, {"lb-1": {"gateway_listen_address": "127.0.0.1"}}) == []


def test_every_error_of_every_host_in_one_list_secrets_hidden():
    errors = check(
        {"gpu-a": good_gpu(vllm_listen_host="0.0.0.0", vllm_hf_token="line\n" + SECRET, gpufleet_pp_size=0,
                           vllm_health_delay="soon"),
         "gpu-b": good_gpu(vllm_api_key="short")},
        {"lb-1": {"gateway_listen_address": "0.0.0.0", "gateway_listen_port": "eighty"},
         "lb-2": {"gateway_api_key": SECRET + "\n", "gateway_listen_address": "127.0.0.1"}})
    text = "\n".join(errors)
    for expected in (
            "gpu-a: gpufleet_pp_size: must be at least 1 (got 0)",
            "gpu-a: vllm_api_key: is required when vllm_listen_host is not a loopback address (got 0.0.0.0)",
            "gpu-a: vllm_hf_token: must be a string on one line without control characters (value hidden)",
            "gpu-a: vllm_health_delay: ",
            "gpu-b: vllm_api_key: ",
            "lb-1: gateway_api_key: is required when the gateway listens beyond loopback",
            "lb-1: gateway_listen_port: must be an integer (got 'eighty')",
            "lb-2: gateway_api_key: "):
        assert expected in text, text
    assert SECRET[:8] not in text and "short" not in text
    # one error per line, each naming its host first
    assert all(re.match(r"(gpu-a|gpu-b|lb-1|lb-2): [a-z_]+", error) for error in errors), errors


def test_unknown_names_with_the_nearest_known_one():
    errors = check({"gpu-a": good_gpu(gpufleet_tp_szie=2, vllm_served_model_nmae="llama", vllm_api_kye=SECRET,
                                      numa_zzz=1, audit_reprot="/tmp/x", other_variable=1)},
                   {"lb-1": {"gateway_listen_prot": 80}})
    assert "gpu-a: gpufleet_tp_szie: is no variable of the collection (did you mean gpufleet_tp_size?)" in errors
    assert ("gpu-a: vllm_served_model_nmae: is no variable of the collection (did you mean vllm_served_model_name?)"
            in errors)
    assert "gpu-a: vllm_api_kye: is no variable of the collection (did you mean vllm_api_key?)" in errors
    assert "gpu-a: numa_zzz: is no variable of the collection" in errors
    assert "gpu-a: audit_reprot: is no variable of the collection (did you mean audit_report?)" in errors
    assert "lb-1: gateway_listen_prot: is no variable of the collection (did you mean gateway_listen_port?)" in errors
    assert not any("other_variable" in error or SECRET in error for error in errors)


def test_a_play_keyword_input_in_the_inventory():
    errors = check({"gpu-a": good_gpu(gpufleet_rollout_hosts_at_once=2)})
    assert errors == ["gpu-a: gpufleet_rollout_hosts_at_once: is a play keyword input (serial), which inventory "
                      "variables do not reach: give it with -e or in the playbook's vars"]
    # given with -e it reaches the play keyword (and hostvars): fine
    assert check({"gpu-a": good_gpu(gpufleet_rollout_hosts_at_once=2)},
                 extra_vars={"gpufleet_rollout_hosts_at_once"}) == []


def test_one_error_of_many_hosts_is_said_once_naming_them():
    """A value set once for a group (group_vars, the inventory's all) is one
    error, not one line per host of the group."""
    fleet = dict(("gpu-%02d" % i, good_gpu(gpufleet_tp_size="four")) for i in range(12))
    fleet["gpu-00"]["vllm_api_kye"] = "x"
    errors = check(fleet, {"lb-1": {"gateway_listen_address": "127.0.0.1"}})
    assert variable_check.grouped(errors, sorted(fleet), ["lb-1"]) == [
        "gpu-00: vllm_api_kye: is no variable of the collection (did you mean vllm_api_key?)",
        "every GPU server (12 hosts): gpufleet_tp_size: must be an integer (got 'four')"]
    some = dict((host, fleet[host]) for host in sorted(fleet)[:10])
    assert variable_check.grouped(check(some), sorted(fleet), ["lb-1"])[1] == (
        "gpu-00, gpu-01, gpu-02, gpu-03, gpu-04, gpu-05, gpu-06, gpu-07 and 2 more hosts: gpufleet_tp_size: must be "
        "an integer (got 'four')")
    both = check({"gpu-a": good_gpu(gpufleet_rollout_hosts_at_once=2)},
                 {"lb-1": {"gateway_listen_address": "127.0.0.1", "gpufleet_rollout_hosts_at_once": 2}})
    assert len(both) == 2 and variable_check.grouped(both, ["gpu-a"], ["lb-1"]) == [
        "every GPU server and gateway (2 hosts): gpufleet_rollout_hosts_at_once: is a play keyword input (serial), "
        "which inventory variables do not reach: give it with -e or in the playbook's vars"]
    # a line of no known host is kept; a host named twice with one message is named once
    assert variable_check.grouped(["x: y", "gpu-a: m", "gpu-a: m", "gpu-b: m"], ["gpu-a", "gpu-b", "gpu-c"]) == [
        "x: y", "gpu-a, gpu-b: m"]


def test_facts_and_private_names_are_not_flagged():
    names = ["vllm_deployed", "vllm_removed", "numa_topology", "__gpufleet_run_plan", "__vllm", "ansible_facts",
             "ansible_host", "gpufleet_tp_size", "inventory_hostname"]
    assert variable_check.inventory_names(names) == ["gpufleet_tp_size"]
    assert check({"gpu-a": good_gpu(vllm_deployed={"instances": []}, vllm_removed=None)}) == []
    # numa_facts' fact, there when a deploy runs after another in one ansible-playbook
    assert check({"gpu-a": good_gpu(numa_topology={"schema_version": 1})}) == []
    assert check({"gpu-a": good_gpu(numa_topologie={})}) == ["gpu-a: numa_topologie: is no variable of the collection"]


def test_the_names_the_playbooks_read_are_known():
    """Every prefixed name a playbook, role task or the demo inventory uses is
    known, a fact, a filter/module/lookup name, or a group."""
    known = variable_check.known_names(role_files.spec_names())
    used = set()
    for path in list((REPO / "playbooks").rglob("*.yml")) + list((REPO / "inventories").rglob("*.yml")):
        used.update(re.findall(r"(?<![\w.])((?:gpufleet|vllm|gateway|numa|audit)_[a-z0-9_]+)\b(?!\.yml)", path.read_text()))
    plugins = set(p.stem for d in ("filter", "modules", "lookup") for p in (REPO / "plugins" / d).glob("*"))
    not_variables = plugins | {"gpufleet_leaving", "gpufleet_gateway_rollout", "gpufleet_record", "gateway_configured",
                               "gpufleet_unplannable"} | set(
        variable_check.FACTS)
    assert sorted(used - known - not_variables) == []


def test_templated_defaults_are_all_derived():
    """defaults/main.yml's Jinja values are the ones derived_defaults() derives."""
    templated = set(name for role in role_files.ROLES for name, value in role_files.defaults(role).items()
                    if isinstance(value, str) and "{{" in value)
    assert templated == set(variable_check.derived_defaults({}))


def test_spec_names_are_the_argument_specs():
    spec = yaml.safe_load((REPO / "roles" / "gateway" / "meta" / "argument_specs.yml").read_text())
    assert set(spec["argument_specs"]["main"]["options"]) <= role_files.spec_names()
    assert "vllm_remove_files" in role_files.spec_names()


LLAMA_70B = {"num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 80}


def test_tp_and_pp_against_the_models_heads_and_layers():
    configs = {"/models/llama": ("/models/llama/config.json", LLAMA_70B),
               "org/vlm": ("hub/config.json", {"text_config": {"num_attention_heads": 28, "num_hidden_layers": 2}})}
    assert variable_check.model_errors({"vllm_model": "/models/llama", "gpufleet_tp_size": 3}, configs) == [
        "gpufleet_tp_size: must divide the model's 64 attention heads (/models/llama/config.json): vLLM refuses it "
        "at start (got 3)"]
    assert variable_check.model_errors({"vllm_model": "org/vlm", "gpufleet_tp_size": 4, "gpufleet_pp_size": 3}, configs) == [
        "gpufleet_pp_size: must be at most the model's 2 layers (hub/config.json): vLLM refuses it at start (got 3)"]
    for fine in ({"vllm_model": "/models/llama", "gpufleet_tp_size": 8, "gpufleet_pp_size": 2},
                 {"vllm_model": "/models/llama"},  # tp 1
                 {"vllm_model": "/models/other", "gpufleet_tp_size": 3},  # no config at hand
                 {"vllm_model": "/models/llama", "gpufleet_tp_size": "3"}):  # placement_errors says that one
        assert variable_check.model_errors(fine, configs) == []
    assert variable_check.model_errors({"vllm_model": "/m"}, {"/m": ("/m/config.json", None)}) == [
        "vllm_model: /m/config.json is not a JSON object: vLLM cannot read the model"]


def test_gpufleet_device_class_is_a_known_variable_checked_by_value():
    assert check({"gpu-a": good_gpu(gpufleet_device_class="cpu")}) == []
    assert check({"gpu-a": good_gpu(gpufleet_device_class="rocm")}) == [
        "gpu-a: gpufleet_device_class: must be one of auto, nvidia, amd, cpu (got 'rocm')"]
    errors = check({"gpu-a": good_gpu(gpufleet_device_clas="cpu")})
    assert errors == ["gpu-a: gpufleet_device_clas: is no variable of the collection (did you mean "
                      "gpufleet_device_class?)"]


def test_the_device_class_set_in_the_inventory_decides_what_the_role_allows():
    """An AMD host without vllm_executable is refused before anything changes
    (vLLM for ROCm is not on PyPI); a CPU host may not set the variables its
    units set themselves. An NVIDIA host may set VLLM_CPU_KVCACHE_SPACE."""
    errors = check({"gpu-a": good_gpu(gpufleet_device_class="amd")})
    assert len(errors) == 1 and errors[0].startswith("gpu-a: vllm_executable: is required on amd hosts"), errors
    assert check({"gpu-a": good_gpu(gpufleet_device_class="amd", vllm_executable="/opt/rocm-vllm/bin/vllm")}) == []
    cpu = check({"gpu-a": good_gpu(gpufleet_device_class="cpu", vllm_environment={"VLLM_CPU_KVCACHE_SPACE": "4"})})
    assert len(cpu) == 1 and "VLLM_CPU_KVCACHE_SPACE" in cpu[0], cpu
    assert check({"gpu-a": good_gpu(vllm_environment={"VLLM_CPU_KVCACHE_SPACE": "4"})}) == []


def test_the_metrics_variables_are_checked_before_anything_changes():
    """The files a deploy writes at its end cannot fail there on a bad value:
    checked with the fleet's variables, on GPU hosts and gateways."""
    good = {"gpufleet_alert_down_for": "2m", "gpufleet_node_exporter_port": 9100,
            "gpufleet_metrics_dir": "/srv/metrics", "audit_textfile_dir": "/var/lib/prometheus/node-exporter"}
    assert check({"gpu-a": good_gpu(**good)}, {"lb-1": dict(good, gateway_listen_address="127.0.0.1")}) == []
    errors = check({"gpu-a": good_gpu(gpufleet_alert_down_for="2 minutes")},
                   {"lb-1": {"gateway_listen_address": "127.0.0.1", "gpufleet_node_exporter_port": 0}})
    assert errors == [
        "gpu-a: gpufleet_alert_down_for: must be a Prometheus duration such as 30s, 2m or 1h30m (units y w d h m s "
        "ms, largest first) (got '2 minutes')",
        "lb-1: gpufleet_node_exporter_port: must be at least 1 (got 0)"]


def test_the_records_store_is_the_controllers_checked_with_the_fleet():
    """gpufleet_state_backend and gpufleet_etcd_* are the controller's
    (docs/state.md): checked before anything changes, and a host's own
    different value is an error, its value never shown."""
    store = {"gpufleet_state_backend": "etcd", "gpufleet_etcd_endpoints": ["http://10.0.0.1:2379"],
             "gpufleet_etcd_prefix": "/gpufleet/prod/", "gpufleet_etcd_username": "deploy",
             "gpufleet_etcd_password": SECRET, "gpufleet_etcd_lock_ttl": 60}
    good = variable_check.check_fleet({"gpu-a": good_gpu(**store)}, {}, role_files.spec_names(),
                                      role_files.defaults("vllm"), role_files.defaults("gateway"), controller=store)
    assert good == []
    errors = variable_check.check_fleet(
        {"gpu-a": good_gpu(gpufleet_etcd_password="other-" + SECRET)}, {"lb-1": {"gateway_listen_address": "127.0.0.1"}},
        role_files.spec_names(), role_files.defaults("vllm"), role_files.defaults("gateway"),
        controller=dict(store, gpufleet_etcd_prefix="prod"))
    assert errors == [
        "gpu-a: gpufleet_etcd_password: is read from the controller's variables (group_vars/all, host_vars/localhost "
        "or -e): this host's own value differs from the controller's and would be ignored; set it for the controller",
        "localhost: gpufleet_etcd_prefix: must be a key prefix such as /gpufleet/<fleet>/: '/'-separated names of "
        "[A-Za-z0-9._-], ending in '/' (got 'prod')"]
    assert not [e for e in errors if SECRET in e]
    # The plan file's path is the controller's too: a GPU host's own is refused, never shown.
    errors = variable_check.check_fleet(
        {"gpu-a": good_gpu(gpufleet_plan_file="/srv/private/plan.json")}, {}, role_files.spec_names(),
        role_files.defaults("vllm"), role_files.defaults("gateway"), controller={"gpufleet_plan_file": "/srv/plan.json"})
    assert errors == [
        "gpu-a: gpufleet_plan_file: is read from the controller's variables (group_vars/all, host_vars/localhost "
        "or -e): this host's own value differs from the controller's and would be ignored; set it for the controller"]
    assert variable_check.check_fleet(
        {"gpu-a": good_gpu(gpufleet_plan_file="/srv/plan.json")}, {}, role_files.spec_names(),
        role_files.defaults("vllm"), role_files.defaults("gateway"), controller={"gpufleet_plan_file": "/srv/plan.json"}) == []
