# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Prefix affinity per model (gateway_affinity): which instance of a model
takes a request, when the engine's prefix cache should decide it.

By default every model's backend balances with gateway_balance
(leastconn). A model named in gateway_affinity is balanced instead by a
bounded-load consistent hash (HAProxy 2.6: `balance hash var(...)`,
`hash-type consistent`, `hash-balance-factor F`) of a key taken from the
request:

- the value of the model's session header, when one is set and the request
  carries it;
- else the first prefix_bytes bytes of the prompt as the Lua body reader
  (roles/gateway/files/gpufleet-request-model.lua) reads it: of a chat
  request, each message's role and text up to and including the first user
  message (the system prompt and the first turn, which every later turn of
  the conversation repeats); of a completion, "prompt" (its first string,
  or its JSON text when it is a list of token ids).

Requests with the same key go to the same instance, so its prefix cache
holds their shared prefix, as long as that instance has no more than F
percent of the backend's average of requests in flight; past that bound
the next instance on the hash ring takes them (HAProxy's bounded-load
consistent hashing). A request without a key (no prompt read, no header)
is spread round-robin. Unbounded consistent hashing is refused: one hot
prefix would pile onto one instance.

check_affinity() checks the variable against the models and sets, on each
model, `balance` (what follows HAProxy's `balance`) and `affinity` ({} or
the checked entry); it returns the frontend's body reader action. Pure,
standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as vc

NAME = "gateway_affinity"
MODES = ("prefix", "none")
FIELDS = ("mode", "prefix_bytes", "balance_factor", "session_header")
DEFAULTS = {"mode": "prefix", "prefix_bytes": 256, "balance_factor": 125, "session_header": ""}
PREFIX_BYTES = (1, 65536)
# HAProxy takes 0 (no bound) or above 100; no bound is refused here.
BALANCE_FACTOR = (101, 1000)
# An HTTP header name (RFC 9110 token), as HAProxy's req.fhdr() takes it.
HEADER = r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}"
HEADER_RULE = "must be an HTTP header name: 1-64 letters, digits or !#$%&'*+.^_`|~- (\"\" for none)"
# The transaction variables the reader and the backend share.
PREFIX_VARIABLE = "txn.body_prefix"
KEY_VARIABLE = "txn.affinity_key"
# The reader's actions: the model only, or the model and the prompt's
# first N bytes (N: the largest prefix_bytes of any model).
READER = "gpufleet_request_model"
READER_WITH_PREFIX = "gpufleet_request_model_prefix"


def entry(where, value):
    """One model's checked settings, the defaults filled in."""
    if not isinstance(value, dict):
        vc.fail(where, "must be a mapping of %s" % ", ".join(FIELDS), value)
    unknown = sorted(str(key) for key in value if key not in FIELDS)
    if unknown:
        vc.fail(where, "unknown field(s) %s; a model's affinity has %s" % (", ".join(unknown), ", ".join(FIELDS)),
                value)
    merged = dict(DEFAULTS, **value)
    return {
        "mode": vc.choice(where + ".mode", merged["mode"], MODES),
        "prefix_bytes": vc.integer(where + ".prefix_bytes", merged["prefix_bytes"], *PREFIX_BYTES),
        "balance_factor": vc.integer(where + ".balance_factor", merged["balance_factor"], *BALANCE_FACTOR),
        "session_header": vc.text(where + ".session_header", merged["session_header"], HEADER, HEADER_RULE,
                                  allow_empty=True),
    }


def check_affinity(value, models, balance):
    """Check gateway_affinity (served model name -> {mode, prefix_bytes,
    balance_factor, session_header}) against MODELS (settings.models: each
    {model, ...}) and set each model's `balance` and `affinity`. BALANCE is
    the checked gateway_balance, which models without affinity keep.
    Returns the body reader's action as the frontend's http-request calls it."""
    if not isinstance(value, dict):
        vc.fail(NAME, "must be a mapping of served model name -> {%s}" % ", ".join(FIELDS), value)
    by_name = dict((model["model"], model) for model in models)
    for model in models:
        model["balance"], model["affinity"] = balance, {}
    widest = 0
    for name in sorted(value, key=str):
        vc.served_model_name(NAME + " key", name)
        if name not in by_name:
            vc.fail(NAME, "names a model no backend serves (models: %s)" % ", ".join(sorted(by_name)), name)
        checked = entry("%s[%s]" % (NAME, name), value[name])
        if checked["mode"] == "none":
            continue
        by_name[name]["balance"] = "hash var(%s)" % KEY_VARIABLE
        by_name[name]["affinity"] = checked
        widest = max(widest, checked["prefix_bytes"])
    return "%s %d" % (READER_WITH_PREFIX, widest) if widest else READER
