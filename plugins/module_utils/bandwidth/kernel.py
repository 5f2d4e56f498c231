# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The program each measurement runs in a child process (docs/bandwidth.md).

measure.py starts it as `numactl --cpunodebind=C --membind=M PYTHON -c
PROGRAM MODE KERNEL BYTES SECONDS`, so every page it touches comes from
node M and every thread runs on node C's CPUs. It prints one JSON line:

- mode memory: {"method", "bytes", "seconds", "repeats", "threads"}: the
  best time of one pass over the buffers. `torch-triad` (the engine's
  torch: a = b + s * c over float64 tensors, one thread per CPU it may run
  on) counts 24 bytes per element, STREAM's convention (two reads, one
  write); `stdlib-copy` (any Python 3: ctypes.memmove in one thread per
  CPU, which releases the GIL) counts 2 bytes per byte copied (STREAM's
  copy).
- mode gpu: {"method": "torch-cuda-pinned", "copies": [{index, gpu, name,
  h2d_seconds, d2h_seconds, bytes}]}: pinned host memory to each device and
  back, best time of each (CUDA events); or {"skipped": why} without torch
  or without a device (the GPU part always tries torch: KERNEL chooses only
  the memory kernel).
- anything that goes wrong: {"error": why}.

Each timed pass repeats for SECONDS after one warm-up pass (at least 3
passes): the best pass is the figure. Standard library only (the program
runs on the target with whatever Python it is given).
"""

from __future__ import annotations

# One program for both modes: what a target needs is this text alone.
PROGRAM = r'''
import json, os, sys, threading, time

def best_of(run, seconds):
    run()
    best, count, start = None, 0, time.perf_counter()
    while count < 3 or (time.perf_counter() - start < seconds and count < 10000):
        began = time.perf_counter()
        run()
        took = time.perf_counter() - began
        best = took if best is None or took < best else best
        count += 1
    return best, count

def cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

def memory_torch(torch, size, seconds):
    threads = cpus()
    torch.set_num_threads(threads)
    n = max(1, size // 8)
    a = torch.empty(n, dtype=torch.float64)
    b = torch.full((n,), 1.0, dtype=torch.float64)
    c = torch.full((n,), 2.0, dtype=torch.float64)
    best, count = best_of(lambda: torch.add(b, c, alpha=3.0, out=a), seconds)
    return {"method": "torch-triad", "bytes": 24 * n, "seconds": best, "repeats": count, "threads": threads}

def memory_stdlib(size, seconds):
    import ctypes
    threads = cpus()
    chunk = max(1, size // threads)
    # Written through (a calloc'd buffer would read the shared zero page).
    # The buffers stay referenced in `kept` while their addresses are used.
    kept, pairs = [], []
    for dummy in range(threads):
        source = (ctypes.c_char * chunk).from_buffer(bytearray(b"\x01") * chunk)
        target = (ctypes.c_char * chunk).from_buffer(bytearray(b"\x02") * chunk)
        kept.append((source, target))
        pairs.append((ctypes.addressof(target), ctypes.addressof(source)))
    def copy():
        running = [threading.Thread(target=ctypes.memmove, args=(t, s, chunk)) for t, s in pairs]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join()
    best, count = best_of(copy, seconds)
    return {"method": "stdlib-copy", "bytes": 2 * chunk * threads, "seconds": best, "repeats": count,
            "threads": threads}

def cuda_best(torch, source, target, seconds):
    target.copy_(source, non_blocking=True)
    torch.cuda.synchronize()
    best, count, start = None, 0, time.perf_counter()
    while count < 3 or (time.perf_counter() - start < seconds and count < 10000):
        began, ended = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began.record()
        target.copy_(source, non_blocking=True)
        ended.record()
        ended.synchronize()
        took = began.elapsed_time(ended) / 1000.0
        best = took if best is None or took < best else best
        count += 1
    return best

def bus_id(props):
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if any(not isinstance(part, int) for part in parts):
        return None
    return "%04x:%02x:%02x.0" % tuple(parts)

def gpu_copies(torch, size, seconds):
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        return {"skipped": "torch %s sees no CUDA or ROCm device" % torch.__version__}
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)
    copies = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        with torch.cuda.device(index):
            device = torch.empty(size, dtype=torch.uint8, device="cuda")
            h2d = cuda_best(torch, host, device, seconds)
            d2h = cuda_best(torch, device, host, seconds)
            del device
        copies.append({"index": index, "gpu": bus_id(props), "name": str(props.name)[:200], "bytes": size,
                       "h2d_seconds": h2d, "d2h_seconds": d2h})
    return {"method": "torch-cuda-pinned", "copies": copies}

def main(mode, kernel, size, seconds):
    # CUDA's own device order is not PCI order (docs: DESIGN "GPUs").
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    torch, missing = None, None
    if mode == "gpu" or kernel != "stdlib":
        try:
            import torch
        except Exception as exc:
            missing = "no torch in %s (%s)" % (sys.executable, (str(exc).splitlines() or [type(exc).__name__])[0][:200])
    if mode == "gpu":
        return {"skipped": missing} if torch is None else gpu_copies(torch, size, seconds)
    if torch is None and kernel == "torch":
        return {"error": missing}
    if torch is not None and kernel != "stdlib":
        return memory_torch(torch, size, seconds)
    return memory_stdlib(size, seconds)

try:
    answer = main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
except Exception as exc:
    answer = {"error": ("%s: %s" % (type(exc).__name__, exc))[:500]}
sys.stdout.write("\n" + json.dumps(answer) + "\n")
'''
