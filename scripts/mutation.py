"""Mutation testing of plugins/module_utils (docs/development.md, "Test strength").

One small change ("mutant") at a time is made to a module, in a temporary copy
of the repository (never in this checkout), and the module's own tests run
against it: a mutant they fail on is killed, one they pass is a survivor, a
gap in the tests. Survivors then meet a wider suite (every unit test file that
imports the module, or --wider). The score is the share of mutants caught, out
of those that change behaviour: mutants reviewed as equivalent are listed in
tests/mutation_equivalent.txt (one id a line, then the reason) and left out.

    nice -n 15 python scripts/mutation.py common/cpulist plan/artifact
    python scripts/mutation.py common/cpulist --list            # the mutants, no run
    python scripts/mutation.py common/cpulist --only ID [ID..]  # just these mutants
    python scripts/mutation.py common/cpulist --json out.json   # figures for benchmarks

Mutations: comparison flips (< <=, > >=, == !=, in / not in, is / is not),
+ and - (also += -=), integer constants +1 and -1, and / or, `not` removed,
True / False, `return X` to `return None`, a `raise` removed, slice bounds +1
and -1. The process lowers its own priority (nice 15) before it starts.
"""
import argparse
import ast
import copy
import glob
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "plugins/module_utils"
EQUIVALENT = "tests/mutation_equivalent.txt"
COPIED = ("plugins", "tests", "roles", "meta", "galaxy.yml", "pytest.ini", "ansible.cfg")
UNIT = "tests/unit/plugins/module_utils"
# The module's own tests: globs, so that test_<module>_mutants.py files count.
OWN_TESTS = {
    "common/cpulist": [UNIT + "/common/test_cpulist*.py"],
    "common/checks": [UNIT + "/common/test_checks*.py"],
    "deploy/gateway/settings": ["tests/unit/plugins/filter/test_gateway_settings*.py",
                                UNIT + "/deploy/gateway/test_settings*.py"],
    "plan/artifact": [UNIT + "/plan/test_artifact*.py"],
    "topology/nvidia_smi": [UNIT + "/topology/test_nvidia_smi*.py"],
    "topology/nvidia_smi_topo": [UNIT + "/topology/test_nvidia_smi*.py"],
    "topology/nvidia_smi_cells": [UNIT + "/topology/test_nvidia_smi*.py"],
    "topology/nvml_parse": [UNIT + "/topology/test_nvml*.py"],
    "topology/sysfs_pci": [UNIT + "/topology/test_sysfs*.py"],
    "placement/domains": [UNIT + "/placement/test_domains*.py", UNIT + "/placement/test_search*.py"],
    "placement/template": [UNIT + "/placement/test_template*.py", UNIT + "/placement/test_api*.py"],
    "topology/nvml": [UNIT + "/topology/test_nvml*.py"],
    "topology/sysfs": [UNIT + "/topology/test_sysfs*.py"],
    "placement/search": [UNIT + "/placement/test_search*.py", UNIT + "/placement/test_bounds*.py"],
    "placement/cpus": [UNIT + "/placement/test_binding*.py", UNIT + "/placement/test_cpus*.py"],
    "placement/host": [UNIT + "/placement/test_hosts*.py", UNIT + "/placement/test_host_*.py"],
    "preflight/replay": [UNIT + "/preflight/test_gather_replay.py"],
}
COMPARE_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
          ast.In: "in", ast.NotIn: "not_in", ast.Is: "is", ast.IsNot: "is_not", ast.Add: "+", ast.Sub: "-",
          ast.And: "and", ast.Or: "or"}
ARITH_FLIP = {ast.Add: ast.Sub, ast.Sub: ast.Add}
KILLED_RC = (1, 2, 3)  # tests failed, collection failed (the mutant broke the import), internal error


def _int_constant(node):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool)


def _plus(node, delta):
    return ast.BinOp(left=node, op=ast.Add() if delta > 0 else ast.Sub(), right=ast.Constant(1))


def candidates(node):
    """(label, build) for each mutation of this node; build() returns the replacement."""
    found = []
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            new = COMPARE_FLIP[type(op)]

            def build(i=i, new=new):
                node.ops[i] = new()
                return node
            found.append(("compare:%s:%s" % (SYMBOL[type(op)], SYMBOL[new]), build))
    elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in ARITH_FLIP:
        new = ARITH_FLIP[type(node.op)]

        def build():
            node.op = new()
            return node
        found.append(("arith:%s:%s" % (SYMBOL[type(node.op)], SYMBOL[new]), build))
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        found.append(("bool:%s:%s" % (node.value, not node.value),
                      lambda: ast.copy_location(ast.Constant(not node.value), node)))
    elif isinstance(node, ast.Constant) and isinstance(node.value, int):
        for delta in (1, -1):
            found.append(("int:%d:%d" % (node.value, node.value + delta),
                          lambda delta=delta: ast.copy_location(ast.Constant(node.value + delta), node)))
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And

        def build():
            node.op = new()
            return node
        found.append(("boolop:%s:%s" % (SYMBOL[type(node.op)], SYMBOL[new]), build))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        found.append(("not-removed", lambda: node.operand))
    elif isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        found.append(("return-none", lambda: ast.copy_location(ast.Return(value=None), node)))
    elif isinstance(node, ast.Raise):
        found.append(("raise-removed", lambda: ast.copy_location(ast.Pass(), node)))
    elif isinstance(node, ast.Slice):
        for field in ("lower", "upper"):
            bound = getattr(node, field)
            if bound is None or _int_constant(bound):
                continue  # an integer bound is already an integer-constant mutant
            for delta in (1, -1):
                def build(field=field, bound=bound, delta=delta):
                    setattr(node, field, _plus(bound, delta))
                    return node
                found.append(("slice-%s:%+d" % (field, delta), build))
    return found


class Mutator(ast.NodeTransformer):
    """Walks a module in a fixed order; lists every mutation site, or applies one (target)."""

    def __init__(self, target=None):
        self.target, self.index, self.sites, self.scope, self.counts = target, 0, [], [], {}
        self.in_fstring = 0

    def visit(self, node):
        scoped = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if scoped:
            self.scope.append(node.name)
        fstring = isinstance(node, ast.JoinedStr)
        self.in_fstring += fstring
        node = self.generic_visit(node)
        self.in_fstring -= fstring
        qualname = ".".join(self.scope) or "<module>"
        if scoped:
            self.scope.pop()
        if self.in_fstring:
            return node
        for label, build in candidates(node):
            key = (qualname, label)
            self.counts[key] = self.counts.get(key, 0) + 1
            if self.target is None:
                self.sites.append({"qualname": qualname, "label": label, "line": node.lineno,
                                   "n": self.counts[key]})
            elif self.index == self.target:
                node = build()
            self.index += 1
        return node


def module_path(name):
    if name.endswith(".py"):
        return os.path.relpath(os.path.abspath(name), REPO)
    return "%s/%s.py" % (PACKAGE, name)


def module_name(path):
    return os.path.relpath(path, PACKAGE)[:-3] if path.startswith(PACKAGE + "/") else path


def list_mutants(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as handle:
        source = handle.read()
    tree = ast.parse(source)
    mutator = Mutator()
    mutator.visit(tree)
    lines = source.splitlines()
    for index, site in enumerate(mutator.sites):
        site["index"] = index
        site["id"] = "%s::%s::%s::%d" % (module_name(path), site["qualname"], site["label"], site["n"])
        site["source"] = lines[site["line"] - 1].strip()
    return tree, mutator.sites


def mutated_source(tree, index):
    tree = copy.deepcopy(tree)
    Mutator(index).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def read_equivalent(path):
    listed = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line and not line.startswith("#"):
                    mutant, dummy, reason = line.partition(" ")
                    listed[mutant] = reason.strip()
    return listed


def make_copy():
    root = tempfile.mkdtemp(prefix="gpufleet-mutation-")
    skip = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache", "output")
    for entry in COPIED:
        source = os.path.join(REPO, entry)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(root, entry), ignore=skip, symlinks=True)
        elif os.path.exists(source):
            shutil.copy2(source, os.path.join(root, entry))
    os.makedirs(os.path.join(root, ".collections", "ansible_collections", "gpufleet"))
    os.symlink("../../..", os.path.join(root, ".collections", "ansible_collections", "gpufleet", "numa"))
    return root


def expand(root, patterns):
    found = []
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            rel = os.path.relpath(path, root)
            if rel not in found:
                found.append(rel)
    return found


def importers(root, path):
    """Unit test files of plugins/ that import the module: the default wider
    suite (the role tests, which render and verify whole roles, are left to --wider)."""
    dotted = path[:-3].replace("/", ".")
    parent, dummy, leaf = dotted.rpartition(".")
    pattern = re.compile(r"%s\b|%s import [^\n]*\b%s\b" % (re.escape(dotted), re.escape(parent), re.escape(leaf)))
    found = []
    for test in sorted(glob.glob(os.path.join(root, "tests/unit/plugins/**/test_*.py"), recursive=True)):
        with open(test, encoding="utf-8") as handle:
            if pattern.search(handle.read()):
                found.append(os.path.relpath(test, root))
    return found


PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "--hypothesis-seed=0"]
# Imported once, before the copy's modules: each forked run starts with them.
PRELOAD = ("pytest", "hypothesis", "yaml", "jinja2", "ansible.errors", "ansible.module_utils.basic")


def preload(root):
    """Import pytest and the heavy libraries once, so that each mutant's run
    is a fork of this process and not a new interpreter. False where pytest
    does not import here (then each run is a subprocess)."""
    os.environ["ANSIBLE_CONFIG"] = os.path.join(root, "ansible.cfg")
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            if name == "pytest":
                return False
    return True


def _forked(root, tests):
    pid = os.fork()
    if pid == 0:  # the child: run pytest in the copy, never return
        rc = 3
        try:
            os.setpgid(0, 0)
            os.chdir(root)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            rc = int(sys.modules["pytest"].main(PYTEST_ARGS + tests))
        finally:
            os._exit(rc)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child did it first, or is gone
    return pid


def _wait(pid, timeout):
    """The exit code, or None when the run passed `timeout` (then killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)


def run_tests(root, tests, timeout, fork=True):
    """'killed', 'survived' or 'timeout' for the code now in the copy."""
    shutil.rmtree(os.path.join(root, ".hypothesis"), ignore_errors=True)
    if fork:
        pid = _forked(root, tests)
    else:
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg"))
        pid = subprocess.Popen([sys.executable, "-m", "pytest"] + PYTEST_ARGS + tests, cwd=root, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True).pid
    rc = _wait(pid, timeout)
    if rc is None:
        return "timeout"
    if rc == 0:
        return "survived"
    if rc in KILLED_RC or rc < 0:  # < 0: the run died of a signal
        return "killed"
    raise SystemExit("pytest exited %d (usage error or no tests) for %s" % (rc, " ".join(tests)))


def write_module(root, path, text):
    target = os.path.join(root, path)
    with open(target, "w", encoding="utf-8") as handle:
        handle.write(text)
    # a stale .pyc of the same size and second would hide the change
    cache = os.path.join(os.path.dirname(target), "__pycache__")
    stem = os.path.basename(path)[:-3] + "."
    for name in os.listdir(cache) if os.path.isdir(cache) else ():
        if name.startswith(stem):
            os.unlink(os.path.join(cache, name))


def own_tests(name):
    """The globs of a module's own tests: OWN_TESTS, else the files named after
    it in the mirrored folder, test_<module>*.py, or test_<folder>_<module>*.py
    where another folder's module has the same name (tests/unit/test_layout.py
    holds every module to having some)."""
    if name in OWN_TESTS:
        return OWN_TESTS[name]
    folder, module = os.path.split(name)
    return ["%s/%s/test_%s*.py" % (UNIT, folder, module),
            "%s/%s/test_%s_%s*.py" % (UNIT, folder, os.path.basename(folder), module)]


def mutate_module(root, path, args, equivalent):
    tree, sites = list_mutants(path)
    name = module_name(path)
    own = expand(root, args.tests or own_tests(name))
    if args.wider == ["none"]:
        wider = []
    else:
        wider = [t for t in (expand(root, args.wider) if args.wider else importers(root, path)) if t not in own]
    if not own:
        raise SystemExit("%s: no tests found (give --tests)" % name)
    with open(os.path.join(root, path), encoding="utf-8") as handle:
        original = handle.read()
    write_module(root, path, mutated_source(tree, -1))  # the unparsed module, unmutated: must pass
    timeout = {}
    for suite, tests in (("own", own), ("wider", wider)):
        started = time.monotonic()
        if tests and run_tests(root, tests, 1200, args.fork) != "survived":
            raise SystemExit("%s: %s tests fail on the unmutated (unparsed) module; fix that first" % (name, suite))
        timeout[suite] = max(args.min_timeout, args.timeout_factor * (time.monotonic() - started))
        if args.verbose:
            print("  %s: %d test files, unmutated run %.1f s" % (suite, len(tests), time.monotonic() - started), flush=True)
    chosen = [s for s in sites if not args.only or s["id"] in args.only]
    try:
        for number, site in enumerate(chosen, 1):
            if site["id"] in equivalent:
                site["result"] = "equivalent"
                continue
            write_module(root, path, mutated_source(tree, site["index"]))
            site["result"] = run_tests(root, own, timeout["own"], args.fork)
            if site["result"] == "survived" and wider:
                site["result"] = run_tests(root, wider, timeout["wider"], args.fork)
                site["wider"] = site["result"] != "survived"
            if args.verbose:
                print("  [%d/%d] %-8s %s" % (number, len(chosen), site["result"], site["id"]), flush=True)
    finally:
        write_module(root, path, original)
    ids = {s["id"] for s in sites}
    return {"module": name, "path": path, "own_tests": own, "wider_tests": wider, "mutants": chosen,
            "stale_equivalent": sorted(m for m in equivalent if m.startswith(name + "::") and m not in ids)}


def summary(result):
    counts = {k: sum(1 for s in result["mutants"] if s.get("result") == k)
              for k in ("killed", "survived", "timeout", "equivalent")}
    counted = counts["killed"] + counts["survived"] + counts["timeout"]
    score = 100.0 * (counts["killed"] + counts["timeout"]) / counted if counted else 100.0
    return dict(counts, total=len(result["mutants"]), score=round(score, 1))


def report(result):
    figures = summary(result)
    result["summary"] = figures
    print("%s: %d mutants, %d killed, %d survived, %d timed out, %d equivalent; score %.1f%% "
          "(caught of those that change behaviour)" % (
              result["module"], figures["total"], figures["killed"], figures["survived"],
              figures["timeout"], figures["equivalent"], figures["score"]))
    for site in result["mutants"]:
        if site.get("result") == "survived":
            print("  SURVIVED %s:%d  %s\n           %s\n           id %s" % (
                result["path"], site["line"], site["label"], site["source"], site["id"]))
    for mutant in result["stale_equivalent"]:
        print("  STALE equivalent id (no such mutant now): %s" % mutant)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="+", help="e.g. common/cpulist, or a path to a .py file")
    parser.add_argument("--tests", nargs="+", help="the module's own tests (globs, from the repository root)")
    parser.add_argument("--wider", nargs="+", help="the suite for survivors (default: plugin test files importing it; 'none': no wider run)")
    parser.add_argument("--only", nargs="+", help="run only these mutant ids")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--equivalent", default=os.path.join(REPO, EQUIVALENT))
    parser.add_argument("--min-timeout", type=float, default=30.0, help="seconds a mutant may run at least")
    parser.add_argument("--timeout-factor", type=float, default=5.0, help="times the unmutated run")
    parser.add_argument("--json", help="write every mutant and the figures here")
    parser.add_argument("--no-fork", action="store_true", help="a new interpreter per run (slower)")
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per mutant as it runs")
    args = parser.parse_args()
    paths = [module_path(m) for m in args.modules]
    if args.list:
        for path in paths:
            for site in list_mutants(path)[1]:
                print("%s:%d  %s  %s" % (path, site["line"], site["id"], site["source"]))
        return 0
    os.nice(max(0, 15 - os.nice(0)))
    equivalent = read_equivalent(args.equivalent)
    root = make_copy()
    args.fork = not args.no_fork and preload(root)
    results = []
    try:
        for path in paths:
            results.append(mutate_module(root, path, args, equivalent))
            report(results[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
