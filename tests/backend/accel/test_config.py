"""AcceleratorConfig: the presets' figures and the ValueError naming a bad field."""
import pytest

from relaydsl import relay
from relaydsl.backend.accel.config import KIB, AcceleratorConfig


def test_deep_fusion_preset_is_the_papers_platform():
    cfg = relay.AcceleratorConfig.deep_fusion()
    assert cfg.peak_flops == 200e9
    assert cfg.dram_bandwidth == 1.5e9
    assert cfg.onchip_bytes == 768 * KIB
    assert cfg.dtype == "float32" and cfg.element_bytes == 4


def test_vta_presets_keep_the_mac_count():
    single, multi = AcceleratorConfig.vta(), AcceleratorConfig.vta(batch=4, block_in=8,
                                                                    block_out=8)
    assert single.macs_per_cycle == multi.macs_per_cycle == 256
    assert single.onchip_bytes == (32 + 256 + 128) * KIB
    assert single.buffers() == {"input_buffer_bytes": 32 * KIB,
                                "weight_buffer_bytes": 256 * KIB,
                                "acc_buffer_bytes": 128 * KIB}
    assert AcceleratorConfig.deep_fusion().buffers() == {"onchip_bytes": 768 * KIB}


@pytest.mark.parametrize("field, value, message", [
    ("dram_bandwidth", 0, "dram_bandwidth must be a positive number"),
    ("onchip_bytes", -1, "onchip_bytes must be a positive int"),
    ("clock_hz", float("nan"), "clock_hz must be a positive number"),
    ("mac_array", (0, 4), "mac_array must be two positive ints"),
    ("dtype", "float16", "dtype must be one of"),
    ("alu_lanes", 10 ** 6, "alu_lanes must be at most twice the MAC count"),
])
def test_a_bad_field_is_a_value_error_naming_it(field, value, message):
    with pytest.raises(ValueError, match=f"AcceleratorConfig.{message}"):
        AcceleratorConfig.deep_fusion(**{field: value})


@pytest.mark.parametrize("changes, message", [
    (dict(weight_buffer_bytes=0), "weight_buffer_bytes must be a positive int"),
    (dict(acc_buffer_bytes=None), "acc_buffer_bytes must be a positive int"),
    (dict(onchip_bytes=512 * KIB), r"onchip_bytes must be the sum of the three buffers"),
])
def test_a_bad_split_buffer_names_its_field(changes, message):
    with pytest.raises(ValueError, match=f"AcceleratorConfig.{message}"):
        AcceleratorConfig.vta(**changes)


def test_an_unknown_field_is_a_type_error_listing_the_fields():
    with pytest.raises(TypeError, match=r"no field bandwidth .*dram_bandwidth"):
        AcceleratorConfig.deep_fusion(bandwidth=1e9)


def test_vta_checks_its_block_sizes():
    with pytest.raises(ValueError, match="block_in must be a positive int"):
        AcceleratorConfig.vta(block_in=0)
