# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The answers HAProxy writes itself, in OpenAI's error shape.

When no instance can take a request, an instance does not answer in time,
or a request cannot be read, HAProxy answers on its own. Its pages are
HTML; the gateway's are JSON like its own 400/401/404 and vLLM's errors:
{"error": {"message": ..., "type": ..., "code": STATUS}} (application/json),
the message saying what happened in words a client can act on. The
template places each body as an `http-error` of the defaults section, in
single quotes: no body may hold a quote or a backslash (ValueError).

HAProxy 2.6 uses these for the errors of a request it has read (a stream):
no instance, a timeout, an instance's bad answer, a malformed body. What
its HTTP/1 parser refuses before that (a malformed request line or header,
headers not complete within timeout http-request) gets HAProxy's built-in
HTML page whatever the configuration says. Pure, standard library only.
"""

from __future__ import annotations

import json

# The codes HAProxy 2.6 takes in http-error, but 200 (the monitor URI's
# "up" answer, not an error), 401 and 404 (the gateway's own answers carry
# their bodies), 407, 410 and 425 (nothing here asks for them).
ERRORS = (
    (400, "BadRequestError",
     "The gateway could not read the request: its HTTP framing is malformed (such as a bad chunk size), or the "
     "client closed its side of the connection before the answer, which the gateway takes as giving up"),
    (403, "PermissionDeniedError", "The gateway refused this request"),
    (405, "MethodNotAllowedError", "The gateway does not allow this HTTP method here"),
    (408, "RequestTimeoutError",
     "The request did not arrive in full within the gateway timeout (gateway_timeout_http_request); "
     "send the whole request without pausing"),
    (413, "RequestTooLargeError", "The request is larger than the gateway accepts"),
    (429, "RateLimitError", "Too many requests at the gateway; retry later"),
    (500, "InternalServerError", "The gateway failed while handling the request; retry later"),
    (501, "NotImplementedError", "The gateway does not implement what the request asks for"),
    (502, "BadGatewayError",
     "The instance of the model closed the connection without an answer, or sent one that is not valid HTTP; "
     "retry later"),
    (503, "ServiceUnavailableError",
     "No instance of this model is available right now (all are down or draining, or none had room within "
     "the gateway queue timeout, gateway_timeout_queue); retry later"),
    (504, "GatewayTimeoutError",
     "The instance of the model did not begin its answer within the gateway timeout (gateway_timeout_server); "
     "the request was not sent again. Ask for fewer tokens, or stream the answer (stream: true)"),
)
# The monitor URI's 503 (the frontend's own): a model cannot be served.
MONITOR_DOWN = (503, "ServiceUnavailableError",
                "A model has no instance up behind this gateway (all of its instances are down or draining); "
                "GET /v1/models says how many are up per model")


def body(status, kind, message):
    """One error body as compact JSON (message, type, code in that order),
    fit to stand in single quotes in HAProxy's configuration."""
    text = json.dumps({"error": {"message": message, "type": kind, "code": status}}, separators=(",", ":"))
    if "'" in text or "\\" in text:
        raise ValueError("gateway error body %d: must hold no quote or backslash (got %s)" % (status, text))
    return text


def http_errors():
    """[{status, body}] for every entry of ERRORS, in order."""
    return [{"status": status, "body": body(status, kind, message)} for status, kind, message in ERRORS]


def monitor_down():
    """The body of the monitor URI's 503."""
    return body(*MONITOR_DOWN)
