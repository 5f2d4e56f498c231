# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""numa_bandwidth ships to a host only what measures (the kernel, the
measurement, the reader seam and the sysfs node reader); the record's
checks, the verdict and the settings stay on the controller."""

from __future__ import annotations

from test_payload import COLLECTION, MODULE_UTILS, controller_only, payload


def test_numa_bandwidth_ships_the_measurement_and_no_controller_code():
    names = payload("numa_bandwidth")
    assert controller_only(names) == []
    ours = sorted(n[len(MODULE_UTILS):] for n in names if n.startswith(MODULE_UTILS + "bandwidth/"))
    assert ours == ["bandwidth/__init__.py", "bandwidth/kernel.py", "bandwidth/measure.py"]
    assert MODULE_UTILS + "topology/live.py" in names and MODULE_UTILS + "topology/sysfs.py" in names
    assert not [n for n in names if n.startswith(COLLECTION + "plugins/plugin_utils/")]
