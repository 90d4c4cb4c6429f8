"""QConfig: validation naming the field, the schemes, the qconfig context."""
import pytest

from relaydsl.quantize import QConfig, current, qconfig


@pytest.mark.parametrize("field, value", [
    ("calibrate_mode", "entropy"), ("weight_scale", "min"), ("rounding", "nearest"),
    ("global_scale", 0.0), ("percentile", 101.0), ("skip_conv_layers", 0),
])
def test_a_bad_setting_is_a_value_error_naming_its_field(field, value):
    with pytest.raises(ValueError, match=f"QConfig {field}"):
        QConfig(**{field: value})


@pytest.mark.parametrize("bits, message", [
    ((8, 8, 24), "scheme .* must be one of 8/32, 8/16, 16/32, got '8/24'"),
    ((4, 4, 32), "got '4/32'"),
    ((8, 16, 32), "nbit_weight must equal nbit_input"),
])
def test_an_unknown_scheme_is_a_value_error(bits, message):
    i, w, a = bits
    with pytest.raises(ValueError, match=message):
        QConfig(nbit_input=i, nbit_weight=w, nbit_activation=a)


@pytest.mark.parametrize("bits, scheme, inputs, acc", [
    ((8, 32), "8/32", "int8", "int32"), ((8, 16), "8/16", "int8", "int16"),
    ((16, 32), "16/32", "int16", "int32")])
def test_schemes(bits, scheme, inputs, acc):
    cfg = QConfig(nbit_input=bits[0], nbit_weight=bits[0], nbit_activation=bits[1])
    assert (cfg.scheme, cfg.input_dtype, cfg.accumulator_dtype) == (scheme, inputs, acc)


def test_unsigned_is_uint8_for_8_32_only():
    assert QConfig(signed=False).input_dtype == "uint8"
    with pytest.raises(ValueError, match="signed=False"):
        QConfig(signed=False, nbit_activation=16)


def test_qconfig_nests_and_restores():
    assert current() == QConfig()
    with qconfig(calibrate_mode="mse") as outer:
        assert current() is outer
        with qconfig(per_channel=True):
            assert current().calibrate_mode == "mse" and current().per_channel
        assert not current().per_channel
    assert current() == QConfig()
    with pytest.raises(TypeError, match="no setting 'bits'"), qconfig(bits=8):
        pass


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        QConfig().per_channel = True  # type: ignore[misc]
