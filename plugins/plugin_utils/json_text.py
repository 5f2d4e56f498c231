# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""JSON files the controller reads (a model's config.json, a kept plan),
read as JSON and bounded in depth.

As JSON, not as YAML: YAML 1.1 reads `1e-05` or `5e-324` as strings.
Bounded: Python's parser recurses once per level, so a file nested some
thousand levels deep ends in a bare RecursionError, and one nested a few
hundred levels deep is no file the collection writes or reads. Errors are
ValueError naming the file. Controller only.
"""

from __future__ import annotations

import json

# The kept plan nests 7 levels deep, a model's config.json about 5.
MAX_DEPTH = 32


def too_deep(value, limit):
    """True when VALUE has lists or objects nested more than LIMIT deep
    (walked with a stack of its own, so no depth can recurse here)."""
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        todo.extend((child, depth + 1) for child in children)
    return False


def loads(text, name, max_depth=MAX_DEPTH):
    """The value of the JSON TEXT read from the file NAME."""
    try:
        value = json.loads(text)
    except RecursionError:
        value, deep = None, True
    except ValueError as exc:
        raise ValueError("%s is not JSON: %s" % (name, exc))
    else:
        deep = too_deep(value, max_depth)
    if deep:
        raise ValueError("%s nests lists or objects deeper than %d levels: not read" % (name, max_depth))
    return value
