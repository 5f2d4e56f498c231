# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Read a rendered systemd service the way systemd would execute it.

Enough of systemd's rules (systemd.syntax(7), systemd.service(5) "Command
lines", systemd.exec(5) "Environment") to turn a unit file into the argv
and environment of its main process, so tests can start that process
without systemd:

- unit files: [Section] headers, # and ; comments, a trailing backslash
  joins the next line (comment lines inside a continuation are skipped);
- ExecStart=: the prefixes @ - : + ! !!, words split at whitespace with
  double and single quotes and C escapes, specifiers (%% is %; others are
  refused because the caller would need systemd's values), then $$ -> $,
  ${NAME} inside a word and a lone $NAME word split at whitespace (quotes
  in the value respected);
- Environment=: quoted assignments with C escapes and specifiers;
- EnvironmentFile=: KEY=VALUE lines with shell-like quoting, "-" prefix for
  optional files.

Anything this module cannot read faithfully raises ValueError naming the
unit and the problem, rather than guessing.
"""

import os
import re
import shutil
import subprocess
import tempfile

_SIMPLE_ESCAPES = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", '"': '"', "'": "'", "s": " ",
}
_EXEC_PREFIXES = "@-:+!"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def read_unit(text, source="unit"):
    """Return {section: [(key, value), ...]} in file order."""
    sections = {}
    current = None
    pending = None  # (key, collected value) while a line ends in a backslash
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if pending is not None:
            if line.startswith(("#", ";")):
                continue
            key, collected = pending
            if line.endswith("\\"):
                pending = (key, collected + " " + line[:-1].strip())
                continue
            sections[current].append((key, (collected + " " + line).strip()))
            pending = None
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections.setdefault(current, [])
            continue
        if current is None:
            raise ValueError("%s:%d: assignment before the first [Section]" % (source, number))
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError("%s:%d: expected KEY=VALUE, got %r" % (source, number, raw))
        key, value = key.strip(), value.strip()
        if value.endswith("\\"):
            pending = (key, value[:-1].strip())
            continue
        sections[current].append((key, value))
    if pending is not None:
        raise ValueError("%s: the last line ends in a backslash" % source)
    return sections


def unit_values(sections, section, key):
    """Every value of KEY in SECTION, in order (an empty value resets the list,
    as systemd does for list settings)."""
    values = []
    for name, value in sections.get(section, []):
        if name == key:
            if value == "":
                values = []
            else:
                values.append(value)
    return values


def _unescape(text, i, source):
    """Decode the C escape starting after the backslash at text[i]; return
    (character(s), index after the escape)."""
    if i >= len(text):
        raise ValueError("%s: backslash at the end of %r" % (source, text))
    c = text[i]
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], i + 1
    if c == "x":
        digits = text[i + 1:i + 3]
        if len(digits) == 2 and all(d in "0123456789abcdefABCDEF" for d in digits):
            return chr(int(digits, 16)), i + 3
    if c in "uU":
        width = 4 if c == "u" else 8
        digits = text[i + 1:i + 1 + width]
        if len(digits) == width and all(d in "0123456789abcdefABCDEF" for d in digits):
            return chr(int(digits, 16)), i + 1 + width
    if c in "01234567":
        digits = text[i:i + 3]
        if len(digits) == 3 and all(d in "01234567" for d in digits):
            return chr(int(digits, 8)), i + 3
    raise ValueError("%s: invalid escape \\%s in %r" % (source, c, text))


def split_words(text, source="value"):
    """Split at whitespace the way systemd's extract_first_word(EXTRACT_UNQUOTE
    | EXTRACT_CUNESCAPE) does: single or double quotes anywhere in a word
    group what they enclose (systemd.syntax(7) asks for quotes around whole
    words only, but systemd 252 also unquotes `a"b c"d` to `ab cd`), C
    escapes are decoded inside and outside quotes."""
    words = []
    i = 0
    n = len(text)
    while True:
        while i < n and text[i] in " \t\n":
            i += 1
        if i >= n:
            return words
        word = []
        quote = None
        while i < n:
            c = text[i]
            if quote is None and c in " \t\n":
                break
            if c == "\\":
                decoded, i = _unescape(text, i + 1, source)
                word.append(decoded)
            elif quote is None and c in "\"'":
                quote = c
                i += 1
            elif c == quote:
                quote = None
                i += 1
            else:
                word.append(c)
                i += 1
        if quote:
            raise ValueError("%s: unterminated %s quote in %r" % (source, quote, text))
        words.append("".join(word))


def resolve_specifiers(text, source="value", specifiers=None):
    """Replace %% by % and the given specifiers ({"n": "unit.service"});
    any other % specifier is an error."""
    specifiers = specifiers or {}
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(text):
            raise ValueError("%s: lone %% at the end of %r" % (source, text))
        spec = text[i + 1]
        if spec == "%":
            out.append("%")
        elif spec in specifiers:
            out.append(specifiers[spec])
        else:
            raise ValueError("%s: specifier %%%s in %r is not known to this reader" % (source, spec, text))
        i += 2
    return "".join(out)


def expand_variables(words, environment, source="ExecStart"):
    """systemd's $ rules for command lines: $$ is a literal $, ${NAME} is
    replaced inside a word, a word that is exactly $NAME becomes the
    variable's whitespace-separated words. Unset variables are empty."""
    expanded = []
    for word in words:
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:
            # Split like the command line itself: quotes respected, then removed.
            expanded.extend(split_words(environment.get(whole.group(1), ""), source))
            continue
        out = []
        i = 0
        while i < len(word):
            if word[i] != "$":
                out.append(word[i])
                i += 1
            elif word.startswith("$$", i):
                out.append("$")
                i += 2
            elif word.startswith("${", i):
                end = word.find("}", i)
                name = word[i + 2:end] if end > 0 else ""
                if not _NAME.fullmatch(name):
                    raise ValueError("%s: bad variable reference in %r" % (source, word))
                out.append(environment.get(name, ""))
                i = end + 1
            else:
                # A $ not followed by { or $ inside a word stays as it is.
                out.append("$")
                i += 1
        expanded.append("".join(out))
    return expanded


def parse_environment(values, source="Environment", specifiers=None):
    """The variables of a list of Environment= values, later ones winning."""
    environment = {}
    for value in values:
        for word in split_words(value, source):
            word = resolve_specifiers(word, source, specifiers)
            name, sep, content = word.partition("=")
            if not sep or not _NAME.fullmatch(name):
                raise ValueError("%s: %r is not a NAME=VALUE assignment" % (source, word))
            environment[name] = content
    return environment


def parse_environment_file(text, source="EnvironmentFile"):
    """KEY=VALUE lines as systemd reads an EnvironmentFile=: # and ;
    comments, optional "export ", double quotes (\\ escapes \\ \" $ `
    and newline), single quotes (literal), unquoted values trimmed."""
    environment = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not _NAME.fullmatch(name):
            raise ValueError("%s:%d: expected NAME=VALUE, got %r" % (source, number, raw))
        value = value.strip()
        if value.startswith('"'):
            out = []
            i = 1
            while i < len(value) and value[i] != '"':
                if value[i] == "\\" and i + 1 < len(value) and value[i + 1] in '\\"$`':
                    out.append(value[i + 1])
                    i += 2
                else:
                    out.append(value[i])
                    i += 1
            if i >= len(value):
                raise ValueError("%s:%d: unterminated double quote" % (source, number))
            value = "".join(out)
        elif value.startswith("'"):
            end = value.find("'", 1)
            if end < 0:
                raise ValueError("%s:%d: unterminated single quote" % (source, number))
            value = value[1:end]
        environment[name] = value
    return environment


def parse_exec_line(value, environment, source="ExecStart", specifiers=None):
    """Return (prefixes, argv) for one ExecStart= value."""
    prefixes = ""
    while value and value[0] in _EXEC_PREFIXES:
        prefixes += value[0]
        value = value[1:]
    words = [resolve_specifiers(word, source, specifiers) for word in split_words(value, source)]
    if not words:
        raise ValueError("%s: empty command line" % source)
    if ";" in words:
        raise ValueError("%s: several command lines (;) where one process is expected" % source)
    if ":" not in prefixes:
        words = expand_variables(words, environment, source)
    if "@" in prefixes:
        # The second word is argv[0]; the first is the program to run.
        words = [words[0]] + words[2:]
    return prefixes, words


def service_process(path, base_environment=None):
    """What systemd would execute for the service file at PATH: a dict with
    argv, environment, working_directory and the raw [Service] settings.

    base_environment stands for systemd's own (PATH, LANG, ...); Environment=
    is applied, then EnvironmentFile= (in order, later ones winning)."""
    with open(path) as unit:
        text = unit.read()
    source = os.path.basename(path)
    sections = read_unit(text, source)
    if "Service" not in sections:
        raise ValueError("%s: no [Service] section" % source)
    specifiers = {"n": source, "N": os.path.splitext(source)[0]}
    environment = dict(base_environment or {})
    environment.update(parse_environment(unit_values(sections, "Service", "Environment"),
                                         "%s Environment=" % source, specifiers))
    for entry in unit_values(sections, "Service", "EnvironmentFile"):
        optional = entry.startswith("-")
        env_path = resolve_specifiers(entry[1:] if optional else entry, source, specifiers)
        try:
            with open(env_path) as env_file:
                env_text = env_file.read()
        except OSError as error:
            if optional:
                continue
            raise ValueError("%s: EnvironmentFile=%s cannot be read: %s" % (source, env_path, error))
        environment.update(parse_environment_file(env_text, env_path))
    exec_starts = unit_values(sections, "Service", "ExecStart")
    if len(exec_starts) != 1:
        raise ValueError("%s: expected one ExecStart=, found %d" % (source, len(exec_starts)))
    prefixes, argv = parse_exec_line(exec_starts[0], environment, "%s ExecStart=" % source, specifiers)
    working_directories = unit_values(sections, "Service", "WorkingDirectory")
    return {
        "unit": source,
        "argv": argv,
        "exec_prefixes": prefixes,
        "environment": environment,
        "working_directory": working_directories[-1].lstrip("-") if working_directories else None,
        "service": dict(sections["Service"]),
    }


SYSTEMD = next((path for path in ("/lib/systemd/systemd", "/usr/lib/systemd/systemd") if os.access(path, os.X_OK)), None)


def systemd_unit_dump(unit_text, name):
    """What systemd's own parser makes of a unit: the unit's section of
    `systemd --test --user` output (stdout and stderr together), or
    AssertionError with the output's tail when systemd did not load it."""
    work = tempfile.mkdtemp(prefix="unit-reader-")
    try:
        os.chmod(work, 0o755)
        units, runtime = os.path.join(work, "units"), os.path.join(work, "runtime")
        os.mkdir(units, 0o755)
        os.mkdir(runtime, 0o700)
        with open(os.path.join(units, name), "w") as unit:
            unit.write(unit_text)
        os.chmod(os.path.join(units, name), 0o644)
        command = [SYSTEMD, "--test", "--user", "--unit=" + name, "--log-target=console"]
        if os.geteuid() == 0:
            # A user manager refuses to run as root: read the unit as nobody.
            os.chown(runtime, 65534, 65534)
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + command
        env = {"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": runtime, "HOME": runtime,
               "SYSTEMD_UNIT_PATH": units + ":"}
        result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, check=False, timeout=120)
    finally:
        shutil.rmtree(work)
    section = re.search(r"^\t-> Unit %s:\n(.*?)(?=^\t-> Unit |\Z)" % re.escape(name), result.stdout, re.S | re.M)
    assert section, "systemd did not load %s (exit %d):\n%s" % (name, result.returncode, result.stdout[-3000:])
    return section.group(1)
