import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import (
    is_link_class,
    link_score,
    normalize_bus_id,
)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("00000000:1A:00.0", "0000:1a:00.0"),
        ("0000:1a:00.0", "0000:1a:00.0"),
        ("1a:00.0", "0000:1a:00.0"),
        ("0002:01:00.0", "0002:01:00.0"),
        (" 00000001:C1:1F.7\n", "0001:c1:1f.7"),
    ],
)
def test_normalize_bus_id_forms(raw, expected):
    assert normalize_bus_id(raw) == expected


@pytest.mark.parametrize("raw", ["", "GPU0", "1a:00", "0000:1a:00.8", "100000000:1a:00.0", "zz:00.0"])
def test_normalize_bus_id_rejects_garbage(raw):
    with pytest.raises(ValueError):
        normalize_bus_id(raw)


def test_link_score_orders_classes_best_first():
    ordered = ["NV18", "NV4", "XGMI2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"]
    scores = [link_score(c) for c in ordered]
    assert scores == sorted(scores, reverse=True)
    assert link_score("NV2") == link_score("XGMI2")


@pytest.mark.parametrize("raw", ["X", "NV0", "PCIE", "", "nv4"])
def test_link_score_rejects_unknown(raw):
    assert not is_link_class(raw)
    with pytest.raises(ValueError):
        link_score(raw)
