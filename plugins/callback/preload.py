# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Load gpufleet.numa's filter and action plugins once, before Ansible forks its workers
description:
  - Ansible runs every task of every host in a process forked from the
    controller's main process, and compiles a collection's plugins from
    source (no bytecode cache) in each of them; looking up any one
    C(gpufleet.numa) filter loads every filter file of the collection and
    the code they import.
  - This callback loads them once in the main process, with the roles'
    defaults and argument specs they read and role vllm's templates
    compiled, so that each worker inherits
    them instead of compiling and parsing them again, which saves
    controller CPU on every task of every host (figures in the
    deployment guide, docs/deploy.md).
  - It changes no result and prints nothing. Enable it with
    C(callbacks_enabled = gpufleet.numa.preload) in C(ansible.cfg), as
    this repository's C(ansible.cfg) does.
requirements:
  - enabled in C(callbacks_enabled)
"""

import pkgutil

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import action_loader, filter_loader

COLLECTION = "gpufleet.numa"
# Looking up any one filter of the collection loads every filter file.
ANY_FILTER = COLLECTION + ".controller_path"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.numa.preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        filter_loader.get(ANY_FILTER)
        # Every action plugin of the collection (their module_utils are as heavy).
        from ansible_collections.gpufleet.numa.plugins import action
        for found in pkgutil.iter_modules(action.__path__):
            action_loader.get("%s.%s" % (COLLECTION, found.name), class_only=True)
        # The roles' defaults and argument specs, which per-host filters read.
        from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files, role_templates
        role_files.preload()
        # Role vllm's templates, compiled (the vllm_files action renders them for every host).
        role_templates.preload()
