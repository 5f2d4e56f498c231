# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/gateway/surface.py: the gateway's own answers about models and
health, and the one-model routing rule (test_gateway_models_and_health.py
runs them in the real HAProxy)."""

import json
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import surface

ONE = [{"model": "org/m", "backend": "model-org_m"}]
TWO = ONE + [{"model": "spare", "backend": "model-spare"}]


def filled(text, up):
    """TEXT with each %[nbsrv(BACKEND)] replaced by up[BACKEND]."""
    return re.sub(r"%\[nbsrv\(([^)]*)\)\]", lambda found: str(up[found.group(1)]), text)


def test_the_list_and_the_cards_carry_the_instances_up_of_each_model():
    up = {"model-org_m": 2, "model-spare": 0}
    assert json.loads(filled(surface.models_list(TWO), up)) == {"object": "list", "data": [
        {"id": "org/m", "object": "model", "created": 0, "owned_by": "gpufleet", "instances_up": 2},
        {"id": "spare", "object": "model", "created": 0, "owned_by": "gpufleet", "instances_up": 0}]}
    paths = surface.model_paths(TWO)
    assert [entry["path"] for entry in paths] == ["/v1/models/org/m", "/v1/models/spare"]
    assert json.loads(filled(paths[1]["card"], up))["instances_up"] == 0


def test_health_is_down_while_any_model_has_no_instance_up():
    assert surface.none_up(TWO) == ["nbsrv(model-org_m) eq 0", "nbsrv(model-spare) eq 0"]
    down = json.loads(filled(surface.health_down(TWO), {"model-org_m": 1, "model-spare": 0}))
    assert down["error"]["code"] == 503 and down["instances_up"] == {"org/m": 1, "spare": 0}
    assert "org/m 1,spare 0" in down["error"]["message"]
    assert json.loads(surface.health_up()) == {"status": "ok"}


def test_one_model_takes_requests_that_name_none_several_refuse_them():
    assert surface.routing(ONE) == {"default_backend": "model-org_m", "model_required": False}
    assert surface.routing(TWO) == {"default_backend": "", "model_required": True}
    assert surface.answers(TWO)["model_required"] is True


def test_the_unknown_models_404_names_the_decoded_id():
    text = surface.unknown_model()
    assert "%[path,url_dec,regsub(^/v1/models/,),json(utf8s)]" in text
    assert json.loads(text.replace("%[path,url_dec,regsub(^/v1/models/,),json(utf8s)]", "x"))["error"]["code"] == 404
