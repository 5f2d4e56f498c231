# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""cpulist at its edges: each limit held where it moves by one, exact forms
and messages (scripts/mutation.py common/cpulist found these untested)."""

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import (
    MAX_CPUS,
    cpus_from_words,
    format_cpulist,
    parse_cpulist,
    parse_cpumask,
)


def test_max_cpus_is_pinned():
    assert MAX_CPUS == 65536


def test_parse_cpulist_takes_the_last_cpu_and_refuses_the_next():
    assert parse_cpulist("65535") == [65535]
    assert parse_cpulist("65534-65535") == [65534, 65535]
    with pytest.raises(ValueError, match=r"^CPU 65536 in '65536' is beyond the limit of 65536 CPUs"):
        parse_cpulist("65536")
    with pytest.raises(ValueError, match=r"^CPU 65536 in '0-65536' is beyond the limit"):
        parse_cpulist("0-65536")


def test_parse_cpulist_digit_count_limit_is_twenty():
    # 20 digits reach int(); 21 are refused before it (no huge integers)
    with pytest.raises(ValueError, match=r"^CPU 99999999999999999999 in "):
        parse_cpulist("9" * 20)
    with pytest.raises(ValueError, match=r"^CPU id in '9{21}' is beyond the limit of 65536 CPUs"):
        parse_cpulist("9" * 21)
    with pytest.raises(ValueError, match=r"^CPU id in '0-9{21}' is beyond"):
        parse_cpulist("0-" + "9" * 21)
    with pytest.raises(ValueError, match=r"^CPU id in "):
        parse_cpulist("0" * 20 + "7")


def test_parse_cpulist_twenty_digit_zero_padded_id_is_read():
    assert parse_cpulist("0" * 19 + "7") == [7]
    assert parse_cpulist("1-" + "0" * 19 + "2") == [1, 2]


def test_parse_cpulist_single_cpu_range_and_reversed_range():
    assert parse_cpulist("3-3") == [3]
    assert parse_cpulist(" 2 - 4 , 9 ") == [2, 3, 4, 9]
    assert parse_cpulist("4,1-2,2") == [1, 2, 4]
    with pytest.raises(ValueError, match=r"^bad range '4-3' in cpulist '4-3'$"):
        parse_cpulist("4-3")


@pytest.mark.parametrize("text, message", [
    (None, r"^cpulist is missing$"),
    ("1,,2", r"^empty element in cpulist '1,,2'$"),
    ("1,", r"^empty element in cpulist '1,'$"),
    ("x", r"^bad element 'x' in cpulist 'x'$"),
    ("1-x", r"^bad element '1-x' in cpulist '1-x'$"),
    ("x-1", r"^bad element 'x-1' in cpulist 'x-1'$"),
    ("1-", r"^bad element '1-' in cpulist '1-'$"),
    ("\u0663", r"^bad element"),  # a digit, but not an ASCII one
])
def test_parse_cpulist_messages(text, message):
    with pytest.raises(ValueError, match=message):
        parse_cpulist(text)


def test_messages_show_values_as_every_message_does():
    """The values in a message are common.checks.show's: repr, cut at 60
    characters with the full length named (one rule for every message)."""
    exact = "x" * 58  # repr adds two quotes: 60 characters, not cut
    with pytest.raises(ValueError) as info:
        parse_cpulist(exact)
    assert str(info.value) == "bad element %r in cpulist %r" % (exact, exact)
    longer = "y" * 59
    with pytest.raises(ValueError) as info:
        parse_cpulist(longer)
    shown = repr(longer)[:60] + "...(61 characters)"
    assert str(info.value) == "bad element %s in cpulist %s" % (shown, shown)


@pytest.mark.parametrize("cpus, text", [
    ([], ""),
    ([5], "5"),
    ([0, 1], "0-1"),
    ([0, 2], "0,2"),
    ([3, 1, 2, 2, "7"], "1-3,7"),
    ([0, 1, 2, 5, 7, 8, 10], "0-2,5,7-8,10"),
])
def test_format_cpulist_shortest_form(cpus, text):
    assert format_cpulist(cpus) == text


def test_parse_cpumask_words_and_forms():
    assert parse_cpumask("") == []
    assert parse_cpumask("1") == [0]
    assert parse_cpumask("80000000") == [31]
    assert parse_cpumask("1,0") == [32]
    assert parse_cpumask("0X1,,FF") == [0, 1, 2, 3, 4, 5, 6, 7, 64]
    assert parse_cpumask(" ffffffff ") == list(range(32))


def test_parse_cpumask_word_limits():
    with pytest.raises(ValueError, match=r"^bad word '100000000' in cpumask '100000000' \(32-bit hex words\)$"):
        parse_cpumask("100000000")
    with pytest.raises(ValueError, match=r"^bad word 'g' in cpumask"):
        parse_cpumask("g")
    with pytest.raises(ValueError, match=r"^cpumask is missing$"):
        parse_cpumask(None)


def test_parse_cpumask_takes_max_cpus_bits_and_refuses_one_word_more():
    words = MAX_CPUS // 32
    assert parse_cpumask(",".join(["80000000"] + ["0"] * (words - 1))) == [MAX_CPUS - 1]
    with pytest.raises(ValueError, match=r"has 2049 words, more than the limit of 65536 CPUs$"):
        parse_cpumask(",".join(["0"] * (words + 1)))


def test_cpus_from_words_word_size_bounds():
    assert cpus_from_words([1], bits=1) == [0]
    assert cpus_from_words([1, 1], bits=1) == [0, 1]
    assert cpus_from_words([1 << 63], bits=64) == [63]
    assert cpus_from_words([0b101, 0b10], bits=3) == [0, 2, 4]
    for bits in (0, 65):
        with pytest.raises(ValueError, match=r"^word size %d is not between 1 and 64 bits$" % bits):
            cpus_from_words([1], bits=bits)


def test_cpus_from_words_value_bounds():
    assert cpus_from_words([0, "3"], bits=2) == [2, 3]
    with pytest.raises(ValueError, match=r"^word 1 is not a 2-bit value$"):
        cpus_from_words([0, 4], bits=2)
    with pytest.raises(ValueError, match=r"^word 0 is not a 2-bit value$"):
        cpus_from_words([-1], bits=2)


def test_cpus_from_words_takes_max_cpus_bits_and_refuses_one_word_more():
    words = [0] * (MAX_CPUS // 64 - 1) + [1 << 63]
    assert cpus_from_words(words) == [MAX_CPUS - 1]
    with pytest.raises(ValueError, match=r"^1025 words of 64 bits are more than the limit of 65536 CPUs$"):
        cpus_from_words([0] * (MAX_CPUS // 64 + 1))
    assert cpus_from_words([0] * MAX_CPUS, bits=1) == []
    with pytest.raises(ValueError):
        cpus_from_words([0] * (MAX_CPUS + 1), bits=1)
