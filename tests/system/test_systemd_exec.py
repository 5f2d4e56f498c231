# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The unit reader and the numactl rewriting the real-process test relies on.

The Environment=/ExecStart= cases are the examples of systemd.service(5),
"Command lines" (https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html),
with the values systemd 252 really produces, and a unit read by systemd's
own parser (`systemd --test --user` prints what it loaded) next to ours.
"""

import os
import re
import shutil
import subprocess

import pytest

from fleet_processes import node_cpus, rebind_to_local_node, split_numactl
from systemd_exec import (
    SYSTEMD, parse_environment, parse_environment_file, parse_exec_line, read_unit, service_process, split_words,
    systemd_unit_dump,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist


def test_parse_exec_line_man_page_example_braced_and_bare_variables():
    environment = parse_environment(['"ONE=one" \'TWO=two two\''])
    assert environment == {"ONE": "one", "TWO": "two two"}
    dummy, argv = parse_exec_line("echo $ONE $TWO ${TWO}", environment)
    assert argv == ["echo", "one", "two", "two", "two two"]


def test_parse_exec_line_man_page_example_quotes_inside_values():
    # The man page says ONE keeps its quotes; systemd 252 removes quotes
    # inside a word (see test_reader_agrees_with_systemd_own_parser).
    environment = parse_environment(["ONE='one' \"TWO='two two' too\" THREE="])
    assert environment == {"ONE": "one", "TWO": "'two two' too", "THREE": ""}
    dummy, braced = parse_exec_line("/bin/echo ${ONE} ${TWO} ${THREE}", environment)
    assert braced == ["/bin/echo", "one", "'two two' too", ""]
    dummy, bare = parse_exec_line("/bin/echo $ONE $TWO $THREE", environment)
    assert bare == ["/bin/echo", "one", "two two", "too"]


def test_parse_exec_line_literal_dollar_percent_quote_and_backslash():
    dummy, argv = parse_exec_line(r'/bin/vllm serve "a \"7B\" 100%% $$HOME \\ x" --port 8000', {"HOME": "/root"})
    assert argv == ["/bin/vllm", "serve", 'a "7B" 100% $HOME \\ x', "--port", "8000"]


def test_parse_exec_line_prefixes_and_argv0():
    prefixes, argv = parse_exec_line("-@/usr/bin/python3 myname -c pass", {})
    assert prefixes == "-@"
    assert argv == ["/usr/bin/python3", "-c", "pass"]
    prefixes, argv = parse_exec_line(":/bin/echo $HOME", {"HOME": "/root"})
    assert (prefixes, argv) == (":", ["/bin/echo", "$HOME"])


def test_split_words_c_escapes_and_single_quotes():
    assert split_words(r"a\tb 'c d' \x41\101 \u00e9") == ["a\tb", "c d", "AA", "\u00e9"]


def test_split_words_quotes_inside_a_word_group_like_systemd():
    assert split_words("ONE='one' a\"b c\"d 'x'y") == ["ONE=one", "ab cd", "xy"]


@pytest.mark.parametrize("text, message", [
    ('"open', "unterminated"),
    ("it's", "unterminated"),
    ("a\\q", "invalid escape"),
])
def test_split_words_rejects_bad_input(text, message):
    with pytest.raises(ValueError, match=message):
        split_words(text)


def test_parse_exec_line_several_commands_are_refused():
    with pytest.raises(ValueError, match="several command lines"):
        parse_exec_line("/bin/echo a ; /bin/echo b", {})


def test_parse_exec_line_unknown_specifier_is_an_error():
    with pytest.raises(ValueError, match="specifier %i"):
        parse_exec_line("/bin/echo %i", {})


def test_read_unit_continuation_lines_skip_comments():
    sections = read_unit(
        "# header\n[Service]\nExecStart=/bin/echo a \\\n# a comment inside\n    b \\\n    c\n"
        "Environment=X=1\n; another comment\n[Install]\nWantedBy=multi-user.target\n")
    assert sections["Service"] == [("ExecStart", "/bin/echo a b c"), ("Environment", "X=1")]
    assert sections["Install"] == [("WantedBy", "multi-user.target")]


def test_read_unit_assignment_before_section_is_an_error():
    with pytest.raises(ValueError, match="before the first"):
        read_unit("ExecStart=/bin/true\n", "x.service")


def test_parse_environment_file_quoting_rules():
    text = ('# comment\n; other\nexport A=plain value  \nB="say \\"hi\\" \\$x \\\\ `\\`"\n'
            "C='single $x \\n'\nD=\n")
    assert parse_environment_file(text) == {
        "A": "plain value", "B": 'say "hi" $x \\ ``', "C": "single $x \\n", "D": "",
    }


def test_service_process_reads_environment_file_and_expands_in_exec(tmp_path):
    (tmp_path / "secrets.env").write_text('KEY="a b"\n')
    unit = tmp_path / "demo.service"
    unit.write_text(
        "[Service]\nEnvironment=GPUS=0,1 \"NAME=my model\"\n"
        "EnvironmentFile=%s/secrets.env\nEnvironmentFile=-%s/missing.env\n"
        "WorkingDirectory=-/tmp\nExecStart=/bin/run ${NAME} $KEY %%%%n %%n\n" % (tmp_path, tmp_path))
    process = service_process(str(unit), {"PATH": "/usr/bin"})
    assert process["argv"] == ["/bin/run", "my model", "a", "b", "%n", "demo.service"]
    assert process["environment"] == {"PATH": "/usr/bin", "GPUS": "0,1", "NAME": "my model", "KEY": "a b"}
    assert process["working_directory"] == "/tmp"


def test_service_process_missing_environment_file_is_an_error(tmp_path):
    unit = tmp_path / "demo.service"
    unit.write_text("[Service]\nEnvironmentFile=%s/nope.env\nExecStart=/bin/true\n" % tmp_path)
    with pytest.raises(ValueError, match="nope.env cannot be read"):
        service_process(str(unit))


def test_split_numactl_long_and_short_options():
    numactl, options, program = split_numactl(
        ["/usr/bin/numactl", "--cpunodebind=1", "-m", "1", "/opt/vllm/bin/vllm", "serve", "m"])
    assert numactl == "/usr/bin/numactl"
    assert options == [("cpunodebind", "1"), ("membind", "1")]
    assert program == ["/opt/vllm/bin/vllm", "serve", "m"]


@pytest.mark.parametrize("argv, message", [
    (["/usr/bin/numactl", "--hardware"], "not understood"),
    (["/usr/bin/numactl", "--membind=0"], "without a program"),
    (["/usr/bin/taskset", "-c", "0", "x"], "not a numactl"),
])
def test_split_numactl_rejects_what_it_cannot_rewrite(argv, message):
    with pytest.raises(ValueError, match=message):
        split_numactl(argv)


def test_rebind_to_local_node_bind_records_the_planned_nodes():
    argv, record = rebind_to_local_node(
        ["/usr/bin/numactl", "--cpunodebind=1", "--membind=1", "/x/vllm-stub", "serve", "m"], 0)
    assert argv == ["/usr/bin/numactl", "--cpunodebind=0", "--membind=0", "/x/vllm-stub", "serve", "m"]
    assert record == {"requested": {"cpunodebind": "1", "membind": "1"},
                      "cpus": format_cpulist(node_cpus(0)), "memory_policy": "bind:0"}


def test_rebind_to_local_node_shared_node_gets_one_cpu_per_slot():
    local = node_cpus(0)
    argv, record = rebind_to_local_node(
        ["/usr/bin/numactl", "--physcpubind=8-15,40-47", "--membind=0", "/x/vllm-stub"], 0, slot=1)
    assert argv[1] == "--physcpubind=%d" % local[1 % len(local)]
    assert record["requested"]["physcpubind"] == "8-15,40-47"
    assert record["cpus"] == str(local[1 % len(local)])


def test_rebind_to_local_node_interleave_keeps_the_policy():
    argv, record = rebind_to_local_node(
        ["/usr/bin/numactl", "--interleave=0,1", "--cpunodebind=0,1", "/x/vllm-stub"], 0)
    assert argv[1:3] == ["--interleave=0", "--cpunodebind=0"]
    assert record["memory_policy"] == "interleave:0"
    assert record["requested"] == {"interleave": "0,1", "cpunodebind": "0,1"}


def test_node_cpus_agrees_with_numactl_hardware():
    hardware = subprocess.run(["numactl", "--hardware"], stdout=subprocess.PIPE, text=True, check=True).stdout
    line = next(line for line in hardware.splitlines() if line.startswith("node 0 cpus:"))
    assert node_cpus(0) == [int(cpu) for cpu in line.split(":", 1)[1].split()]


# Quoting, escapes, specifiers, $ and continuation lines, as units written
# by hand or by the vllm role use them.
TRICKY_UNIT = r"""[Service]
Environment=ONE='one' "TWO='two two' too" THREE=
Environment="A=a \"q\" 100%% $$x \\ y" B=x"y z"w
ExecStart=/usr/bin/numactl --physcpubind=0-7,32-39 --membind=0 /opt/x/vllm-stub serve \
    "acme/Llama \"7B\" 100%% $$HOME \\ tuned" \
# a comment inside the continued line
    a"b c"d \x41\t 'x'y --served-model-name "it's"
"""


def systemd_dump_words(line):
    """Words of a command line as systemd prints it: double-quoted words
    escape \\ " $ ` with a backslash and control characters C-style."""
    controls = {"t": "\t", "n": "\n", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
    words = []
    for token in re.findall(r'"(?:[^"\\]|\\.)*"|\S+', line):
        if token.startswith('"'):
            token = re.sub(r"\\(.)", lambda m: controls.get(m.group(1), m.group(1)), token[1:-1])
        words.append(token)
    return words


def systemd_reads(unit_text, name="tricky.service"):
    """(ExecStart argv, {Environment}) as systemd's own parser loaded them."""
    body = systemd_unit_dump(unit_text, name)
    command_lines = re.findall(r"^\t+Command Line: (.*)$", body, re.M)
    assert len(command_lines) == 1, body
    argv = systemd_dump_words(command_lines[0])
    environment = dict(e.split("=", 1) for e in re.findall(r"^\t\tEnvironment: (.*)$", body, re.M))
    return argv, environment


@pytest.mark.skipif(SYSTEMD is None or (os.geteuid() == 0 and shutil.which("setpriv") is None),
                    reason="systemd's manager binary (and setpriv as root) are needed")
def test_reader_agrees_with_systemd_own_parser():
    systemd_argv, systemd_environment = systemd_reads(TRICKY_UNIT)
    sections = read_unit(TRICKY_UNIT)
    ours_environment = parse_environment([v for k, v in sections["Service"] if k == "Environment"])
    exec_start = next(v for k, v in sections["Service"] if k == "ExecStart")
    # systemd prints the command line before $ expansion, which happens at exec time.
    dummy, ours_argv = parse_exec_line(":" + exec_start, {})
    assert ours_argv == systemd_argv
    assert ours_environment == systemd_environment
    assert ours_argv[5] == 'acme/Llama "7B" 100% $$HOME \\ tuned'
