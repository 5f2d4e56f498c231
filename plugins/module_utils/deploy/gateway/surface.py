# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the gateway answers about itself: the models, its health, its routing rule.

HAProxy answers these without an instance, from the state of its own
backends at the moment of the request (nbsrv(BACKEND): the servers of a
model that are up and take requests; a server a drain or an agent weight
of 0% took out is not counted):

- GET /v1/models: OpenAI's list, every model the gateway routes, each with
  `instances_up` (0: the model is configured but nothing serves it now);
- GET /v1/models/{id} (the id as written, or percent-encoded): that model's
  entry, or a 404 in OpenAI's error shape as vLLM answers an unknown model;
- GET /health with no model named and the monitor URI: 200 only while
  every model has an instance up, else 503 naming how many are up per model
  (/health naming a model in the X-Model header reaches one of its
  instances' /health);
- the one-model rule: with a single model a request that names none goes to
  it, with several it is refused (400).

Each answer is built here as HAProxy log-format text (lf-string) or as the
ACL the template places; the template decides nothing. Served model names
hold no '%', quote or backslash (common/checks.served_model_name), so they
stand in JSON and log-format text as they are. Pure, standard library only.
"""

from __future__ import annotations

import json

MODELS_PATH = "/v1/models"
HEALTH_PATH = "/health"
OWNER = "gpufleet"


def _card_fields(model):
    """The static fields of one model's entry, in the order written."""
    return json.dumps({"id": model["model"], "object": "model", "created": 0, "owned_by": OWNER},
                      separators=(",", ":"))[:-1]


def model_card(model):
    """One model's entry as log-format text: its static fields and
    instances_up, the number of its servers up now."""
    return '%s,"instances_up":%%[nbsrv(%s)]}' % (_card_fields(model), model["backend"])


def models_list(found):
    """GET /v1/models as log-format text: OpenAI's list shape, one entry
    per served model name in the order the models first appear."""
    return '{"object":"list","data":[%s]}' % ",".join(model_card(model) for model in found)


def model_paths(found):
    """[{path, card}]: GET /v1/models/{id} of each model (the path compared
    after percent-decoding, so Qwen%2FQwen2.5 is Qwen/Qwen2.5)."""
    return [{"path": "%s/%s" % (MODELS_PATH, model["model"]), "card": model_card(model)} for model in found]


def unknown_model():
    """The 404 of GET /v1/models/{id} for an id the gateway does not route,
    as log-format text (the id as JSON, decoded)."""
    return ('{"error":{"message":"The model %[path,url_dec,regsub(^/v1/models/,),json(utf8s)] does not exist on '
            'this gateway; GET /v1/models lists the models","type":"NotFoundError","param":"model","code":404}}')


def none_up(found):
    """The tests of one named ACL (HAProxy ORs the lines of one name) that
    holds while some model has no instance up: the monitor URI's and GET
    /health's 503."""
    return ["nbsrv(%s) eq 0" % model["backend"] for model in found]


def health_down(found):
    """The 503 of GET /health (no model named) as log-format text: how
    many instances are up per model."""
    counts = ",".join('%s:%%[nbsrv(%s)]' % (json.dumps(model["model"]), model["backend"]) for model in found)
    return ('{"error":{"message":"A model has no instance up behind this gateway; instances up per model: '
            '%s","type":"ServiceUnavailableError","code":503},"instances_up":{%s}}'
            % (",".join("%s %%[nbsrv(%s)]" % (model["model"], model["backend"]) for model in found), counts))


def health_up():
    """The 200 of GET /health (no model named): every model has an instance up."""
    return '{"status":"ok"}'


def routing(found):
    """The one-model rule: {default_backend, model_required}. One model: a
    request that names none goes to its backend; several: such a request
    is refused (400), never guessed."""
    if len(found) == 1:
        return {"default_backend": found[0]["backend"], "model_required": False}
    return {"default_backend": "", "model_required": True}


def answers(found):
    """Everything above, as the settings the template places."""
    out = {"models_list": models_list(found), "model_paths": model_paths(found), "unknown_model": unknown_model(),
           "none_up": none_up(found), "health_down": health_down(found), "health_up": health_up(),
           "models_path": MODELS_PATH, "health_path": HEALTH_PATH}
    out.update(routing(found))
    return out
