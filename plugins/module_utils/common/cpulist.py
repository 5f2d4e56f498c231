# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Linux cpulist strings ("0-3,8,10-11") and CPU bit masks, both ways.

Pure functions, standard library only: used on targets (the fact module)
and on the controller (placement).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show

# No machine this collection serves has more CPUs (Linux's own NR_CPUS
# tops out at 8192). Larger ids are rejected, so that "0-99999999" in a
# capture is an error and not 100 million integers.
MAX_CPUS = 65536


def _digits(text):
    text = text.strip()
    return bool(text) and text.isascii() and text.isdigit()


def parse_cpulist(text):
    """Return the sorted list of CPU ids in a cpulist such as "0-3,8".

    Empty or whitespace-only text is the empty list (a memory-only NUMA
    node). Raises ValueError naming the bad part for anything else, and
    for CPU ids of MAX_CPUS or more.
    """
    if text is None:
        raise ValueError("cpulist is missing")
    text = str(text).strip()
    if not text:
        return []
    cpus = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ValueError("empty element in cpulist %s" % show(text))
        lo, sep, hi = part.partition("-")
        if not (_digits(lo) and (not sep or _digits(hi))):
            raise ValueError("bad element %s in cpulist %s" % (show(part), show(text)))
        if len(lo.strip()) > 20 or len(hi.strip()) > 20:
            raise ValueError("CPU id in %s is beyond the limit of %d CPUs (cpulist %s)" % (
                show(part), MAX_CPUS, show(text)))
        start = int(lo)
        end = int(hi) if sep else start
        if end < start:
            raise ValueError("bad range %s in cpulist %s" % (show(part), show(text)))
        if end >= MAX_CPUS:
            raise ValueError("CPU %d in %s is beyond the limit of %d CPUs (cpulist %s)" % (
                end, show(part), MAX_CPUS, show(text)))
        cpus.update(range(start, end + 1))
    return sorted(cpus)


def format_cpulist(cpus):
    """Return the shortest cpulist string for an iterable of CPU ids."""
    ordered = sorted(set(int(c) for c in cpus))
    parts = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else "%d-%d" % (ordered[i], ordered[j]))
        i = j + 1
    return ",".join(parts)


def parse_cpumask(text):
    """Return the CPU ids set in a kernel/hwloc hex mask ("00ff,ffff0000").

    Comma-separated 32-bit words, most significant first; empty words (as
    hwloc writes ",,") are zero; an optional 0x prefix per word is accepted.
    Masks of more than MAX_CPUS bits are rejected.
    """
    if text is None:
        raise ValueError("cpumask is missing")
    text = str(text)
    words = text.strip().split(",")
    if len(words) > MAX_CPUS // 32:
        raise ValueError("cpumask %s has %d words, more than the limit of %d CPUs" % (
            show(text), len(words), MAX_CPUS))
    value = 0
    for word in words:
        word = word.strip().lower()
        if word.startswith("0x"):
            word = word[2:]
        if len(word) > 8 or (word and not all(c in "0123456789abcdef" for c in word)):
            raise ValueError("bad word %s in cpumask %s (32-bit hex words)" % (show(word), show(text)))
        value = (value << 32) | (int(word, 16) if word else 0)
    return [bit for bit in range(value.bit_length()) if value >> bit & 1]


def cpus_from_words(words, bits=64):
    """Return the CPU ids set in a list of machine words, least significant
    word first (NVML's cpuSet: bit j of word i is CPU bits*i+j). Raises
    ValueError for a word out of range or more than MAX_CPUS bits."""
    if not 1 <= bits <= 64:
        raise ValueError("word size %r is not between 1 and 64 bits" % (bits,))
    words = list(words)
    if len(words) * bits > MAX_CPUS:
        raise ValueError("%d words of %d bits are more than the limit of %d CPUs" % (len(words), bits, MAX_CPUS))
    cpus = []
    for i, word in enumerate(words):
        word = int(word)
        if not 0 <= word < 1 << bits:
            raise ValueError("word %d is not a %d-bit value" % (i, bits))
        for j in range(bits):
            if word >> j & 1:
                cpus.append(bits * i + j)
    return cpus
