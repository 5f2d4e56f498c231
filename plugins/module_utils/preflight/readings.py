# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the host preflight reads on a host, through the reader seam
(topology/reader.py), so that a recorded capture replays it.

read_host() returns the readings: plain values, judged on the controller
(findings.py). Every input is read by a path or a canonical command line:

- numactl: `numactl --show` (the unit's numactl, by binaries={"numactl": ...});
- automatic NUMA balancing: /proc/sys/kernel/numa_balancing;
- the services' cgroup cpuset: cpuset.mems.effective (cgroup v2) or
  cpuset.effective_mems/cpuset.mems (v1) of the slice, else of the root this
  host shows (topology/sysfs_limits.py finds the mounts, as for the CPUs);
- persistence mode per GPU: NVML when pynvml imports on a live host, else
  `nvidia-smi --query-gpu=pci.bus_id,persistence_mode --format=csv,noheader`;
- NVSwitches: NVIDIA PCI bridges (class 0x0680) in /sys/bus/pci/devices, or
  NVLinks to a switch in a recorded NVML record; the fabric manager's state:
  `systemctl show --property=LoadState,ActiveState nvidia-fabricmanager.service`;
- systemd as PID 1: /run/systemd/system exists (sd_booted());
- per unit the syscall probe (probe.py) under `systemd-run`, with the
  unit's User=/Group= where `getent passwd|group NAME` finds the account.

A value that could not be read is None (unknown), never a default.
Standard library only (runs on targets).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import normalize_bus_id
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import probe
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs_limits
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt

NUMACTL_COMMAND = "numactl --show"
NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
PERSISTENCE_COMMAND = "nvidia-smi --query-gpu=pci.bus_id,persistence_mode --format=csv,noheader"
FABRIC_MANAGER = "nvidia-fabricmanager.service"
FABRIC_MANAGER_COMMAND = "systemctl show --property=LoadState,ActiveState " + FABRIC_MANAGER
SYSTEMD_BOOTED = "/run/systemd/system"
PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
BRIDGE_OTHER_CLASS = "0x0680"  # NVSwitch: bridge, other
NVML_SWITCH = 2  # nvmlDeviceGetNvLinkRemoteDeviceType: NVML_NVLINK_DEVICE_TYPE_SWITCH


def getent_command(database, name):
    return "getent %s %s" % (database, name)


def read_cpuset_mems(reader, cgroup_slice, warnings):
    """{path, mems} of the first cpuset memory-node file that reads and names nodes, else None."""
    slice_name = sysfs_limits.check_cgroup_slice(cgroup_slice)
    for path in sysfs_limits.cpuset_files(reader, slice_name, warnings, sysfs_limits.CPUSET_MEMS):
        text = reader.read(path)
        if text is None or not text.strip():
            continue
        try:
            return {"path": path, "mems": format_cpulist(parse_cpulist(text.strip()))}
        except ValueError as exc:
            warnings.append("%s: %s" % (path, exc))
            return None
    return None


def parse_persistence(text):
    """bus id -> True/False (Enabled/Disabled) from the nvidia-smi query; None when no line parses."""
    found = {}
    for line in (text or "").splitlines():
        bus, sep, mode = line.partition(",")
        if not sep:
            continue
        try:
            bus = normalize_bus_id(bus.strip())
        except ValueError:
            continue
        mode = mode.strip().lower()
        if mode in ("enabled", "disabled"):
            found[bus] = mode == "enabled"
    return found or None


def nvml_persistence(pynvml):
    """bus id -> persistence mode on from NVML; None when NVML does not answer."""
    try:
        pynvml.nvmlInit()
    except Exception:  # pylint: disable=broad-except
        return None
    found = {}
    try:
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
            bus = bus.decode("ascii", "replace") if isinstance(bus, bytes) else str(bus)
            found[normalize_bus_id(bus)] = int(pynvml.nvmlDeviceGetPersistenceMode(handle)) == 1
    except Exception:  # pylint: disable=broad-except
        return found or None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # pylint: disable=broad-except
            pass
    return found or None


def read_persistence(reader, pynvml, record=False):
    """{source, gpus: {bus id: on}} or None when no source answers."""
    if pynvml is not None:
        found = nvml_persistence(pynvml)
        if record:
            reader.run(PERSISTENCE_COMMAND)  # for the capture: NVML is not recorded
        if found is not None:
            return {"source": "nvml", "gpus": found}
    found = parse_persistence(reader.run(PERSISTENCE_COMMAND))
    return None if found is None else {"source": "nvidia-smi", "gpus": found}


def read_nvswitches(reader):
    """Bus ids of the NVSwitches this host shows (sysfs, else a recorded NVML
    record's NVLinks to switches); None when neither source is there."""
    switches = set()
    names = reader.listdir(PCI_DEVICES)
    for name in names or []:
        vendor = (reader.read("%s/%s/vendor" % (PCI_DEVICES, name)) or "").strip().lower()
        kind = (reader.read("%s/%s/class" % (PCI_DEVICES, name)) or "").strip().lower()
        if vendor == NVIDIA_VENDOR and kind.startswith(BRIDGE_OTHER_CLASS):
            switches.add(name)
    record = reader.nvml()
    devices = (record or {}).get("devices") or []
    links = [link for device in devices if isinstance(device, dict) for link in device.get("nvlinks") or []]
    for link in links:
        if isinstance(link, dict) and link.get("active") and link.get("remote_device_type") == NVML_SWITCH:
            try:
                switches.add(normalize_bus_id(str(link.get("remote_bus_id"))))
            except ValueError:
                switches.add(excerpt(str(link.get("remote_bus_id")), 40, quote=False))
    if names is None and not record:
        return None
    return sorted(switches)


def parse_show(text):
    """{Property: value} of `systemctl show --property=...`; None for None."""
    if text is None:
        return None
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def read_probes(reader, units, booted):
    """Per unit {instance, command, output (None: not run or not recorded), skipped (why not run, or None)}."""
    accounts = {}

    def exists(database, name):
        if not name:
            return False
        key = (database, name)
        if key not in accounts:
            accounts[key] = reader.run(getent_command(database, name)) is not None
        return accounts[key]

    probes = []
    for unit in units:
        command = probe.probe_command(unit, exists("passwd", unit.get("user")), exists("group", unit.get("group")))
        entry = {"instance": unit["name"], "command": command, "output": None, "skipped": None}
        if booted is False:
            entry["skipped"] = "systemd is not PID 1 here (%s does not exist)" % SYSTEMD_BOOTED
        else:
            entry["output"] = reader.run(command)
        probes.append(entry)
    return probes


def read_host(reader, units, cgroup_slice=sysfs_limits.DEFAULT_SLICE, pynvml=None, record=False):
    """The readings of one host for the preflight (docs/preflight.md).

    units: the planned units to probe ([] for none): {name, properties,
    prefix, user, group, mems, cpus, policy} each (probe.probe_command);
    the numactl check is read when any unit has a numactl prefix.
    """
    warnings = []
    booted = reader.listdir(SYSTEMD_BOOTED)
    readings = {
        "numactl": reader.run(NUMACTL_COMMAND) if any(unit.get("prefix") for unit in units) else None,
        "numa_balancing": None,
        "cpuset": read_cpuset_mems(reader, cgroup_slice, warnings),
        "persistence": read_persistence(reader, pynvml, record),
        "nvswitches": read_nvswitches(reader),
        "fabric_manager": parse_show(reader.run(FABRIC_MANAGER_COMMAND)),
        "systemd": None if booted is None and reader.read("/proc/1/comm") is None else booted is not None,
        "probes": [],
        "warnings": warnings,
    }
    balancing = reader.read(NUMA_BALANCING)
    if balancing is not None:
        readings["numa_balancing"] = excerpt(balancing.strip(), 20, quote=False)
    readings["probes"] = read_probes(reader, units, readings["systemd"])
    return readings
