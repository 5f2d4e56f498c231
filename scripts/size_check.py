"""The size limits of plugins/ (docs/development.md): no module_utils or
plugin_utils file over 400 lines, no function or method anywhere in plugins/
over 80 lines. Prints what is over and exits 1; prints nothing and exits 0
when all is within.

    python scripts/size_check.py            # the limits
    python scripts/size_check.py --top 10   # the ten longest functions, for reading
"""
import argparse
import ast
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE_LIMIT = 400
FUNCTION_LIMIT = 80
FILE_LIMITED = ("plugins/module_utils/", "plugins/plugin_utils/")


def python_files():
    for root, dirs, files in os.walk(os.path.join(REPO, "plugins")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(root, name), REPO)


def functions(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--top", type=int, default=0, help="print the N longest functions")
    args = parser.parse_args()
    over, lengths = [], []
    for path in python_files():
        with open(os.path.join(REPO, path), encoding="utf-8") as handle:
            lines = sum(1 for dummy in handle)
        if path.startswith(FILE_LIMITED) and lines > FILE_LIMIT:
            over.append("%s: %d lines (limit %d)" % (path, lines, FILE_LIMIT))
        for name, lineno, length in functions(path):
            lengths.append((length, "%s:%d %s" % (path, lineno, name)))
            if length > FUNCTION_LIMIT:
                over.append("%s:%d: function %s is %d lines (limit %d)" % (path, lineno, name, length, FUNCTION_LIMIT))
    for length, where in sorted(lengths, reverse=True)[:args.top]:
        print("%5d  %s" % (length, where))
    for line in over:
        print(line)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
