# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Linux cpulist strings ("0-3,8,10-11") and CPU bit masks, both ways.

Pure functions, standard library only: used on targets (the fact module)
and on the controller (placement).
"""

from __future__ import annotations


def parse_cpulist(text):
    """Return the sorted list of CPU ids in a cpulist such as "0-3,8".

    Empty or whitespace-only text is the empty list (a memory-only NUMA
    node). Raises ValueError naming the bad part for anything else.
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
            raise ValueError("empty element in cpulist %r" % text)
        lo, sep, hi = part.partition("-")
        try:
            start = int(lo)
            end = int(hi) if sep else start
        except ValueError:
            raise ValueError("bad element %r in cpulist %r" % (part, text))
        if start < 0 or end < start:
            raise ValueError("bad range %r in cpulist %r" % (part, text))
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
    """
    if text is None:
        raise ValueError("cpumask is missing")
    words = str(text).strip().split(",")
    value = 0
    for word in words:
        word = word.strip().lower()
        if word.startswith("0x"):
            word = word[2:]
        try:
            value = (value << 32) | (int(word, 16) if word else 0)
        except ValueError:
            raise ValueError("bad word %r in cpumask %r" % (word, text))
    return [bit for bit in range(value.bit_length()) if value >> bit & 1]


def cpus_from_words(words, bits=64):
    """Return the CPU ids set in a list of machine words, least significant
    word first (NVML's cpuSet: bit j of word i is CPU bits*i+j)."""
    cpus = []
    for i, word in enumerate(words):
        word = int(word)
        for j in range(bits):
            if word >> j & 1:
                cpus.append(bits * i + j)
    return cpus
