# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/gateway/errors.py: HAProxy's own answers in OpenAI's error shape,
each fit for a single-quoted http-error string, through the checked settings."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import errors
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.tests.fixtures.gateway_inputs import variables

# The codes HAProxy 2.6 takes in http-error (its configuration manual).
HAPROXY_CODES = {200, 400, 401, 403, 404, 405, 407, 408, 410, 413, 425, 429, 500, 501, 502, 503, 504}


def test_every_error_is_json_in_openais_shape():
    s = gateway_settings.check_settings(variables())
    statuses = [entry["status"] for entry in s["http_errors"]]
    assert statuses == [400, 403, 405, 408, 413, 429, 500, 501, 502, 503, 504]
    assert set(statuses) <= HAPROXY_CODES
    for entry in s["http_errors"] + [{"status": 503, "body": s["monitor_down"]}]:
        error = json.loads(entry["body"])
        assert list(error) == ["error"] and list(error["error"]) == ["message", "type", "code"], error
        assert error["error"]["code"] == entry["status"] and error["error"]["type"].endswith("Error")
        assert "'" not in entry["body"] and "\\" not in entry["body"] and "\n" not in entry["body"]
    bodies = dict((entry["status"], json.loads(entry["body"])["error"]) for entry in s["http_errors"])
    assert bodies[503]["type"] == "ServiceUnavailableError" and "retry later" in bodies[503]["message"]
    assert bodies[504]["type"] == "GatewayTimeoutError" and "gateway_timeout_server" in bodies[504]["message"]


@pytest.mark.parametrize("message", ["the gateway's timeout", "a \\ backslash"])
def test_a_body_that_would_end_its_quotes_is_refused(message):
    with pytest.raises(ValueError, match="gateway error body 502: must hold no quote or backslash"):
        errors.body(502, "BadGatewayError", message)
