import pytest
from hypothesis import given, strategies as st

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import (
    cpus_from_words,
    format_cpulist,
    parse_cpulist,
    parse_cpumask,
)


@pytest.mark.parametrize(
    "text, cpus",
    [("0-3,8\n", [0, 1, 2, 3, 8]), ("", []), ("  \n", []), ("5", [5]), ("64-127,192-254", list(range(64, 128)) + list(range(192, 255)))],
)
def test_parse_cpulist_forms(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["0-", "a", "3-1", "1,,2", "-1"])
def test_parse_cpulist_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_cpulist(text)


@given(st.sets(st.integers(min_value=0, max_value=1023)))
def test_format_then_parse_cpulist_round_trips(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == sorted(cpus)


def test_parse_cpumask_hwloc_power8_mask():
    # From a recorded IBM Minsky (POWER8) hwloc export: socket 1's CPUs.
    assert parse_cpumask("0x00000303,0x03030000,,0x0") == [80, 81, 88, 89, 96, 97, 104, 105]


def test_parse_cpumask_rejects_garbage():
    with pytest.raises(ValueError):
        parse_cpumask("0xzz")


def test_cpus_from_words_nvml_layout():
    assert cpus_from_words([0b11, 1]) == [0, 1, 64]


# Limits pinned one step either side (a limit moved by one fails here).

@pytest.mark.parametrize("text", [
    "\u0660-\u0663",  # Arabic-Indic digits: int() reads them as 0-3
    "0,\u0661",
    "\u0967",  # Devanagari one
    "\uff11",  # fullwidth one
    "0-\u0663",
])
def test_parse_cpulist_refuses_digits_that_are_not_ascii(text):
    assert int(text.split(",")[-1].split("-")[-1]) in range(10)  # what the check guards against
    with pytest.raises(ValueError, match="bad element"):
        parse_cpulist(text)


def test_cpus_from_words_word_count_limit_64_bit_words():
    # NVML's cpuSet: 1,024 words of 64 bits are the 65,536 CPUs allowed, one word more is refused.
    assert cpus_from_words([0] * 1023 + [1 << 63]) == [65535]
    with pytest.raises(ValueError, match="1025 words of 64 bits are more than the limit of 65536 CPUs"):
        cpus_from_words([0] * 1025)


def test_cpus_from_words_word_count_limit_one_bit_words():
    # One bit a word: the limit to the single CPU (MAX_CPUS + 1 would let 65,537 words through).
    assert cpus_from_words([0] * 65535 + [1], bits=1) == [65535]
    with pytest.raises(ValueError, match="65537 words of 1 bits"):
        cpus_from_words([0] * 65537, bits=1)
