# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""An etcd v3 cluster reached over etcd's own HTTP/JSON API (the gRPC
gateway every member serves on its client URLs: /v3/kv/range, /v3/kv/txn,
/v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke; keys and values
base64), so a controller needs no etcd package (docs/state.md).

The settings are checked here (check_settings). A Client sends each call
to one member; a member that does not answer (refused, reset, timed out,
TLS refused) or answers that it has no leader is skipped and the next
endpoint tried, round after round, until `retry_seconds` have passed;
then EtcdError names every endpoint and what failed. An answer that is an
error of etcd itself (permission denied, a malformed request) ends the
call at once. A txn whose member died after it was sent may have been
applied: the callers' compares make sending it again safe (a retried
write finds its own history entry, state/etcd_record.py).

Also the store's layout under the key prefix (record, lock, history/NNN)
and its revisions ("etcd:<mod_revision>", or "absent"). Controller only;
standard library only.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks

ABSENT = "absent"
REVISION_PREFIX = "etcd:"
# The key prefix: '/', then one or more names of [A-Za-z0-9._-] each ending in '/'.
PREFIX_PATTERN = r"(?:/[A-Za-z0-9._-]+)+/"
PREFIX_RULE = "must be a key prefix such as /gpufleet/<fleet>/: '/'-separated names of [A-Za-z0-9._-], ending in '/'"
HISTORY_DIGITS = 20
# The names the settings are reported under (the deploy's variables).
NAMES = dict((key, "gpufleet_etcd_" + key) for key in (
    "endpoints", "prefix", "ca_file", "cert_file", "key_file", "username", "password", "timeout", "retry_seconds"))
DEFAULTS = {"ca_file": "", "cert_file": "", "key_file": "", "username": "", "password": "", "timeout": 5,
            "retry_seconds": 15}
# etcd's gRPC codes that say "this member cannot serve now": 14 Unavailable, 4 DeadlineExceeded.
RETRIABLE_CODES = (4, 14)
RETRIABLE_WORDS = ("leader changed", "no leader", "timed out", "not capable", "too many requests", "stopped")
UNAUTHENTICATED = 16
AUTHENTICATE = "/v3/auth/authenticate"
MAX_ANSWER_BYTES = 64 * 1024 * 1024


class EtcdError(ValueError):
    """The cluster could not be reached or refused the call (message says which endpoint and why)."""


# ---------------------------------------------------------------- settings


def check_endpoint(name, value):
    """http(s)://HOST:PORT, nothing else (no path, user or query); canonical form."""
    checks.text(name, value)
    parts = urllib.parse.urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = None
    if (parts.scheme not in ("http", "https") or not parts.hostname or port is None or parts.username
            or parts.password or parts.path not in ("", "/") or parts.query or parts.fragment):
        checks.fail(name, "must be an etcd client URL http://HOST:PORT or https://HOST:PORT", value)
    host = checks.address(name, parts.hostname)
    checks.port(name, port)
    return "%s://%s:%d" % (parts.scheme, "[%s]" % host if ":" in host else host, port)


def _file(name, value):
    if value == "":
        return value
    checks.absolute_path(name, value)
    if not os.path.isfile(value) or not os.access(value, os.R_OK):
        checks.fail(name, "must be a readable file", value)
    return value


def check_settings(settings):
    """The store's settings, checked, with the defaults filled in: endpoints
    (a non-empty list of client URLs, all http or all https), prefix, and
    optional ca_file, cert_file + key_file (https only), username +
    password (etcd's own users), timeout (seconds a member has to answer)
    and retry_seconds (how long a call goes on trying other members)."""
    if not isinstance(settings, dict):
        raise EtcdError("the etcd settings must be a mapping (got %s)" % checks.show(settings))
    unknown = sorted(str(key) for key in settings if key not in NAMES)
    if unknown:
        raise EtcdError("unknown etcd setting(s) %s; known: %s" % (", ".join(unknown), ", ".join(NAMES)))
    values = dict(DEFAULTS, **dict((k, v) for k, v in settings.items() if v is not None))
    endpoints = values.get("endpoints")
    if not isinstance(endpoints, list) or not endpoints:
        checks.fail(NAMES["endpoints"], "must be a non-empty list of etcd client URLs", endpoints)
    values["endpoints"] = [check_endpoint("%s[%d]" % (NAMES["endpoints"], i), e) for i, e in enumerate(endpoints)]
    schemes = set(e.split(":", 1)[0] for e in values["endpoints"])
    if len(schemes) > 1:
        checks.fail(NAMES["endpoints"], "must be all http:// or all https://", endpoints)
    checks.text(NAMES["prefix"], values.get("prefix"), PREFIX_PATTERN, PREFIX_RULE, max_length=512)
    for key in ("ca_file", "cert_file", "key_file"):
        _file(NAMES[key], values[key])
    if bool(values["cert_file"]) != bool(values["key_file"]):
        raise EtcdError("%s and %s go together: give both (the client certificate and its key) or neither"
                        % (NAMES["cert_file"], NAMES["key_file"]))
    if schemes == {"http"} and (values["ca_file"] or values["cert_file"]):
        raise EtcdError("%s/%s are for https:// endpoints; %s are http://"
                        % (NAMES["ca_file"], NAMES["cert_file"], NAMES["endpoints"]))
    if bool(values["username"]) != bool(values["password"]):
        raise EtcdError("%s and %s go together: give both or neither" % (NAMES["username"], NAMES["password"]))
    if values["username"]:
        checks.text(NAMES["username"], values["username"], max_length=256)
        checks.secret(NAMES["password"], values["password"])
    values["timeout"] = checks.integer(NAMES["timeout"], values["timeout"], 1, 300)
    values["retry_seconds"] = checks.integer(NAMES["retry_seconds"], values["retry_seconds"], 0, 3600)
    return values


# ---------------------------------------------------------------- layout and encoding


def b64(data):
    return base64.b64encode(data.encode("utf-8") if isinstance(data, str) else data).decode("ascii")


def unb64(text):
    return base64.b64decode(text or "")


def prefix_end(key):
    """The range end that covers every key starting with `key` (bytes): its
    last byte below 0xff plus one."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    data = data.rstrip(b"\xff")
    return data[:-1] + bytes([data[-1] + 1]) if data else b"\0"


def record_key(prefix):
    return prefix + "record"


def lock_key(prefix):
    return prefix + "lock"


def history_prefix(prefix):
    return prefix + "history/"


def history_key(prefix, sequence):
    return "%s%0*d" % (history_prefix(prefix), HISTORY_DIGITS, sequence)


def history_sequence(prefix, key):
    """The number of a history key (bytes or str); None for another key."""
    name = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
    tail = name[len(history_prefix(prefix)):]
    ok = name.startswith(history_prefix(prefix)) and len(tail) == HISTORY_DIGITS and tail.isdigit()
    return int(tail) if ok else None


def revision_of(kv):
    """A key's revision as the store names it: "etcd:<mod_revision>", or "absent"."""
    return ABSENT if kv is None else "%s%d" % (REVISION_PREFIX, kv["mod_revision"])


def mod_revision(name, revision):
    """The mod_revision of a revision string (0 for "absent"); ValueError otherwise."""
    if revision == ABSENT:
        return 0
    if not isinstance(revision, str) or not revision.startswith(REVISION_PREFIX) \
            or not revision[len(REVISION_PREFIX):].isdigit() or len(revision) > 30:
        checks.fail(name, "must be an etcd revision etcd:<number> or %s" % ABSENT, revision)
    return int(revision[len(REVISION_PREFIX):])


def decode_kv(kv):
    """A key-value of an answer with its numbers as ints and key/value as bytes."""
    out = {"key": unb64(kv.get("key")), "value": unb64(kv.get("value"))}
    for field in ("create_revision", "mod_revision", "version", "lease"):
        out[field] = int(kv.get(field) or 0)
    return out


def compare(key, target, value, result="EQUAL"):
    field = {"MOD": "mod_revision", "CREATE": "create_revision", "VERSION": "version", "LEASE": "lease"}[target]
    return {"key": b64(key), "target": target, "result": result, field: str(value)}


def put(key, value, lease=0):
    return {"request_put": {"key": b64(key), "value": b64(value), "lease": str(lease)}}


def get(key):
    return {"request_range": {"key": b64(key)}}


def delete(key, end=None):
    body = {"key": b64(key)}
    if end is not None:
        body["range_end"] = b64(end)
    return {"request_delete_range": body}


def error_of(status, data):
    """(code, message) of an error answer: etcd's JSON {"error"|"message", "code"}, else the HTTP status."""
    try:
        body = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        body = None
    if isinstance(body, dict) and (body.get("message") or body.get("error")):
        return body.get("code"), checks.printable(str(body.get("message") or body.get("error")))[:300]
    return None, "HTTP %d %s" % (status, checks.printable(data[:200].decode("utf-8", "replace")))


def retriable(code, message):
    """Whether another member (or this one a moment later) may serve the call."""
    return code in RETRIABLE_CODES or any(word in message.lower() for word in RETRIABLE_WORDS)


def transport_error(exc, client_cert=True):
    """What a failed connection says, in words (no traceback). A member
    that wants client certificates ends the handshake of a client without
    one (`client_cert` False) with an alert or by closing the connection."""
    reason = getattr(exc, "reason", exc)
    text = str(reason)
    tls = isinstance(reason, ssl.SSLError) or "SSL" in text or "certificate" in text.lower()
    if "CERTIFICATE_REQUIRED" in text or "certificate required" in text or "BAD_CERTIFICATE" in text \
            or (tls and not client_cert and "EOF" in text):
        return ("TLS refused: the member wants a client certificate its CA signed%s (%s/%s) (%s)"
                % ("" if client_cert else ", and this client has none", NAMES["cert_file"], NAMES["key_file"], text))
    if tls:
        if "CERTIFICATE_VERIFY_FAILED" in text:
            return "TLS: the member's certificate is not one %s trusts (%s)" % (NAMES["ca_file"], text)
        return "TLS failed (%s)" % text
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "no answer in time (%s)" % text
    return "cannot connect (%s)" % (getattr(reason, "strerror", None) or text)


# ---------------------------------------------------------------- the client


class Client(object):
    """Calls to the cluster of `settings` (check_settings), each answered by
    the first member that can: the member that answered last is asked first."""

    def __init__(self, settings, clock=time.monotonic, sleep=time.sleep):
        self.settings = check_settings(settings)
        self.endpoints = list(self.settings["endpoints"])
        self.clock, self.sleep = clock, sleep
        self.token = None
        self.tls = None
        if self.endpoints[0].startswith("https://"):
            self.tls = ssl.create_default_context(cafile=self.settings["ca_file"] or None)
            if self.settings["cert_file"]:
                try:
                    self.tls.load_cert_chain(self.settings["cert_file"], self.settings["key_file"])
                except (ssl.SSLError, OSError) as exc:
                    raise EtcdError("%s/%s: not a client certificate and its key (%s)"
                                    % (self.settings["cert_file"], self.settings["key_file"], exc))

    def _send(self, endpoint, path, body):
        """One request to one member: (HTTP status, body bytes); OSError-likes on transport failure."""
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = self.token
        request = urllib.request.Request(endpoint + path, json.dumps(body).encode("utf-8"), headers, method="POST")
        # An opener with the store's TLS context (what urlopen(context=) builds).
        handlers = [urllib.request.HTTPSHandler(context=self.tls)] if self.tls else []
        try:
            with urllib.request.build_opener(*handlers).open(request, timeout=self.settings["timeout"]) as answer:
                return answer.status, answer.read(MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(MAX_ANSWER_BYTES)

    def call(self, path, body):
        """POST `body` to `path` of the first member that serves it; its JSON answer."""
        deadline = self.clock() + self.settings["retry_seconds"]
        relogged = False
        if self.settings["username"] and self.token is None and path != AUTHENTICATE:
            self.authenticate()
        while True:
            failed = {}
            for endpoint in list(self.endpoints):
                try:
                    status, data = self._send(endpoint, path, body)
                    code, message = error_of(status, data) if status != 200 else (None, "")
                    if code == UNAUTHENTICATED and self.settings["username"] and not relogged:
                        relogged = True  # the token expired: one new one
                        self.authenticate()
                        status, data = self._send(endpoint, path, body)
                        code, message = error_of(status, data) if status != 200 else (None, "")
                except (OSError, http.client.HTTPException) as exc:
                    failed[endpoint] = transport_error(exc, bool(self.settings["cert_file"]))
                    continue
                if status == 200:
                    self._prefer(endpoint)
                    return _json(endpoint, path, data)
                if not retriable(code, message):
                    raise EtcdError("etcd %s%s refused the call: %s" % (endpoint, path, message))
                failed[endpoint] = message
            # A member's certificate (or its wish for ours) does not change by waiting.
            if self.clock() >= deadline or all(why.startswith("TLS") for why in failed.values()):
                raise EtcdError("no etcd member served %s: %s" % (path, "; ".join(
                    "%s: %s" % item for item in sorted(failed.items()))))
            self.sleep(0.2)

    def _prefer(self, endpoint):
        self.endpoints.remove(endpoint)
        self.endpoints.insert(0, endpoint)

    def authenticate(self):
        """etcd's own user: a token sent with every later call (Authorization)."""
        self.token = None
        if self.settings["username"]:
            answer = self.call(AUTHENTICATE, {"name": self.settings["username"],
                                              "password": self.settings["password"]})
            self.token = answer.get("token")
            if not self.token:
                raise EtcdError("etcd gave no token for user %s" % checks.printable(self.settings["username"]))
        return self

    def get(self, key):
        """The key-value at `key` (decode_kv), or None."""
        kvs = self.call("/v3/kv/range", {"key": b64(key)}).get("kvs") or []
        return decode_kv(kvs[0]) if kvs else None

    def range(self, prefix, keys_only=False):
        """Every key-value under `prefix`, in key order."""
        body = {"key": b64(prefix), "range_end": b64(prefix_end(prefix)), "keys_only": keys_only,
                "sort_order": "ASCEND", "sort_target": "KEY"}
        return [decode_kv(kv) for kv in self.call("/v3/kv/range", body).get("kvs") or []]

    def txn(self, compares, success, failure=()):
        """(succeeded, answer): one transaction, applied whole or not at all."""
        answer = self.call("/v3/kv/txn", {"compare": list(compares), "success": list(success),
                                          "failure": list(failure)})
        return bool(answer.get("succeeded")), answer

    def grant(self, ttl):
        """A new lease of `ttl` seconds: (id, the TTL etcd gave)."""
        answer = self.call("/v3/lease/grant", {"TTL": str(ttl), "ID": "0"})
        if answer.get("error") or not answer.get("ID"):
            raise EtcdError("etcd granted no lease: %s" % checks.printable(str(answer.get("error")))[:300])
        return int(answer["ID"]), int(answer.get("TTL") or 0)

    def keepalive(self, lease):
        """Renew `lease`: the seconds it has now, 0 when it is gone."""
        answer = self.call("/v3/lease/keepalive", {"ID": str(lease)})
        return int((answer.get("result") or answer).get("TTL") or 0)

    def revoke(self, lease):
        """End `lease` and delete its keys; False when it was gone already."""
        try:
            self.call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if "not found" in str(exc):
                return False
            raise
        return True


def responses(answer):
    """The ranges' key-values of a txn answer, one entry (None when absent) per op."""
    found = []
    for op in answer.get("responses") or []:
        kvs = (op.get("response_range") or {}).get("kvs") or []
        found.append(decode_kv(kvs[0]) if kvs else None)
    return found


def _json(endpoint, path, data):
    try:
        answer = json.loads(data.decode("utf-8"))
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise EtcdError("etcd %s%s answered something that is not etcd's JSON: %s"
                        % (endpoint, path, checks.show(data[:200])))
    return answer
