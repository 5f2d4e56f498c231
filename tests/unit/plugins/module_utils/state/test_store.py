# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The seam between a run and the store of its record (state/store.py):
one variable chooses the store, its settings are checked naming the
variable (never the password's value), and the file store does exactly
what state/lock.py and state/record.py do (tests/system/test_state_backend_etcd.py
runs the etcd store under real deploys)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_lock, lock, record
from ansible_collections.gpufleet.numa.plugins.module_utils.state import store as state_store

ETCD = {"gpufleet_state_backend": "etcd", "gpufleet_etcd_endpoints": ["http://10.0.0.1:2379", "http://10.0.0.2:2379"],
        "gpufleet_etcd_prefix": "/gpufleet/prod/"}
SECRET = "s3cr3t-never-shown"


def test_the_file_store_is_the_default():
    assert state_store.settings({}, "/srv/prod.gpufleet/gpufleet-plan.json") == {
        "backend": "file", "path": "/srv/prod.gpufleet/gpufleet-plan.json",
        "location": "/srv/prod.gpufleet/gpufleet-plan.json"}
    # The etcd variables of a fleet that went back to the file are left alone.
    assert state_store.settings(dict(ETCD, gpufleet_state_backend="file", gpufleet_etcd_endpoints="x"),
                                "/p")["backend"] == "file"


def test_the_etcd_settings_with_their_defaults_and_location():
    settings = state_store.settings(ETCD)
    assert settings["backend"] == "etcd" and settings["lock_ttl"] == etcd_lock.DEFAULT_TTL
    assert settings["etcd"]["endpoints"] == ETCD["gpufleet_etcd_endpoints"]
    assert settings["etcd"]["timeout"] == 5 and settings["etcd"]["retry_seconds"] == 15
    assert settings["location"] == "etcd /gpufleet/prod/record at http://10.0.0.1:2379, http://10.0.0.2:2379"
    # -e gpufleet_etcd_endpoints=a,b gives one text.
    text = state_store.settings(dict(ETCD, gpufleet_etcd_endpoints="http://10.0.0.1:2379, http://10.0.0.2:2379",
                                     gpufleet_etcd_lock_ttl="60", gpufleet_etcd_username="deploy",
                                     gpufleet_etcd_password=SECRET))
    assert text["etcd"]["endpoints"] == ETCD["gpufleet_etcd_endpoints"] and text["lock_ttl"] == 60
    assert text["etcd"]["username"] == "deploy" and text["etcd"]["password"] == SECRET


@pytest.mark.parametrize("change, message", [
    ({"gpufleet_state_backend": "consul"}, "gpufleet_state_backend: must be one of file, etcd (got 'consul')"),
    ({"gpufleet_etcd_endpoints": None}, "gpufleet_etcd_endpoints: is required with gpufleet_state_backend etcd"),
    ({"gpufleet_etcd_endpoints": []}, "gpufleet_etcd_endpoints: must be a non-empty list of etcd client URLs"),
    ({"gpufleet_etcd_endpoints": ["10.0.0.1:2379"]}, "gpufleet_etcd_endpoints[0]: must be an etcd client URL"),
    ({"gpufleet_etcd_prefix": None}, "gpufleet_etcd_prefix: is required with gpufleet_state_backend etcd (the "
                                     "record's key prefix: must be a key prefix such as /gpufleet/<fleet>/"),
    ({"gpufleet_etcd_prefix": "/gpufleet/prod"}, "gpufleet_etcd_prefix: must be a key prefix"),
    ({"gpufleet_etcd_lock_ttl": 1}, "gpufleet_etcd_lock_ttl: must be at least 2"),
    ({"gpufleet_etcd_lock_ttl": "long"}, "gpufleet_etcd_lock_ttl: must be an integer"),
    ({"gpufleet_etcd_timeout": 0}, "gpufleet_etcd_timeout: must be at least 1"),
    ({"gpufleet_etcd_password": SECRET}, "gpufleet_etcd_username and gpufleet_etcd_password go together"),
    ({"gpufleet_etcd_username": "deploy", "gpufleet_etcd_password": SECRET + "\n"},
     "gpufleet_etcd_password: must be 1-512 printable ASCII characters"),
    ({"gpufleet_etcd_ca_file": "/nonexistent/ca.pem"}, "gpufleet_etcd_ca_file: must be a readable file"),
])
def test_bad_settings_name_their_variable_never_the_password(change, message):
    with pytest.raises(ValueError) as err:
        state_store.settings(dict(ETCD, **change))
    assert message in str(err.value) and SECRET not in str(err.value)


def test_open_store_chooses_by_backend():
    file_store = state_store.open_store(state_store.settings({}, "/srv/plan.json"))
    assert isinstance(file_store, state_store.FileStore) and file_store.location == "/srv/plan.json"
    etcd_store = state_store.open_store(state_store.settings(dict(ETCD, gpufleet_etcd_lock_ttl=9)))
    assert isinstance(etcd_store, state_store.EtcdStore) and etcd_store.ttl == 9
    assert etcd_store.location == "etcd /gpufleet/prod/record at http://10.0.0.1:2379, http://10.0.0.2:2379"
    assert etcd_store.store.prefix == "/gpufleet/prod/"
    for wrong in ("/srv/plan.json", {"backend": "s3"}, None):
        with pytest.raises(ValueError, match="must be what gpufleet.numa.state_settings made"):
            state_store.open_store(wrong)
    with pytest.raises(ValueError, match="the record's path: must be an absolute path on the controller"):
        state_store.open_store({"backend": "file", "path": "plan.json"})


def test_the_file_store_keeps_the_file_lock_and_records_contract(tmp_path):
    path = str(tmp_path / "inventory.gpufleet" / "gpufleet-plan.json")
    store = state_store.open_store({"backend": "file", "path": path})
    assert store.read_text() == "" and store.read_bytes() is None and store.revision() == record.ABSENT
    # No record directory yet: nothing is locked, the first write takes the lock.
    assert store.acquire(0) == {"locked": False, "msg": "no record yet (%s): the first write locks it" % path}
    assert store.renew() is None and store.preview('{"a": 1}\n') is True
    first, changed = store.advance('{"a": 1}\n')
    assert changed and first == record.revision(path) and store.held()["revision"] == first
    assert store.read_text() == '{"a": 1}\n'
    assert store.preview('{"a": 1}\n') is False and store.advance('{"a": 1}\n') == (first, False)
    assert store.release() is True and store.release() is False
    taken = store.acquire(0)
    assert taken == {"locked": True, "revision": first, "took_over": None}
    # Another live run's lock: refused, naming it, as lock.acquire says it.
    other = dict(lock.this_run(), host="ctl-elsewhere")
    store.release()
    lock.acquire(path, lambda: first, me=other)
    with pytest.raises(lock.LockError, match="is locked by another run: .*@ctl-elsewhere"):
        store.acquire(0)
    with pytest.raises(lock.LockError, match="no longer holds the lock"):
        store.advance('{"a": 2}\n')
    assert store.read_text() == '{"a": 1}\n' and store.describe(other) == lock.describe(other)


def test_an_unreadable_file_record_is_locked_and_left_to_the_reader(tmp_path):
    path = tmp_path / "gpufleet-plan.json"
    path.mkdir()  # a directory where the record should be
    store = state_store.FileStore(str(path))
    assert store.acquire(0)["revision"] == "unreadable"
    with pytest.raises(ValueError, match="is a directory"):
        store.read_text()


def test_the_etcd_lock_names_its_run_with_a_password_on_its_command_line_masked():
    me = dict(lock.this_run(), command="ansible-playbook deploy_inference.yml -e gpufleet_etcd_password=%s" % SECRET)
    entry = state_store.EtcdStore.run_entry(me)
    assert SECRET not in entry["command"] and "gpufleet_etcd_password=***" in entry["command"]
    assert lock.same_run(entry, me)
