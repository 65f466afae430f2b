"""Bad inputs give Python exceptions with the library's message: TypeError for
the kind, dtype or device of an array, ValueError for shapes, options and values."""

import numpy as np
import pytest
import torch

import qkv


def qkv3(dtype=np.float64, n=4, s=5, d=8):
    r = np.random.default_rng(3)
    return (r.random((2, n, d)).astype(dtype), r.random((2, s, d)).astype(dtype),
            r.random((2, s, d)).astype(dtype))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float16, np.complex128, np.uint8])
def test_unsupported_dtype_is_a_type_error(dtype):
    q, k, v = qkv3()
    with pytest.raises(TypeError, match="query: dtype .* is not supported"):
        qkv.scaled_dot_product_attention(q.astype(dtype), k, v)


def test_bfloat16_backward_checks_lse_dtype():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 32, generator=g).to(torch.bfloat16) for _ in range(3))
    out = qkv.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    with pytest.raises(ValueError, match="lse: expected float32 .*found bfloat16"):
        qkv.attention_backward(q, k, v, out, torch.zeros(2, 4, 16, dtype=torch.bfloat16), out)


def test_mixed_dtypes_are_a_type_error():
    q, k, v = qkv3()
    with pytest.raises(TypeError, match="key: dtype float32 differs from query's float64"):
        qkv.scaled_dot_product_attention(q, k.astype(np.float32), v)


def test_not_an_array_is_a_type_error():
    q, k, v = qkv3()
    with pytest.raises(TypeError, match="query: expected a NumPy array or a DLPack tensor"):
        qkv.scaled_dot_product_attention(q.tolist(), k, v)


def test_wrong_device_is_a_type_error():
    q = torch.rand(2, 4, 8, device="meta")
    with pytest.raises(TypeError, match="device 'meta'.*CPU"):
        qkv.scaled_dot_product_attention(q, q, q)


def test_head_dim_mismatch_is_a_value_error_with_the_library_message():
    q, k, v = qkv3()
    with pytest.raises(ValueError, match=r"^key: expected head dim D = 8 \(from query\), found 7"):
        qkv.scaled_dot_product_attention(q, k[..., :7], v)


def test_bad_mask_shape():
    q, k, v = qkv3()
    with pytest.raises(ValueError, match="mask"):
        qkv.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((3, 4), bool))


def test_integer_mask_is_a_type_error():
    q, k, v = qkv3()
    with pytest.raises(TypeError, match="attn_mask: dtype int64 .*or bool"):
        qkv.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 5), np.int64))


@pytest.mark.parametrize("what", [0, 1, 2])
def test_nan_in_inputs_names_the_tensor_and_index(what):
    arrays = list(qkv3())
    arrays[what] = arrays[what].copy()
    arrays[what][1, 2, 3] = np.nan
    with pytest.raises(ValueError, match=r"%s.*\[1, 2, 3\]" % "qkv"[what]):
        qkv.scaled_dot_product_attention(*arrays)


def test_nan_in_float_mask():
    q, k, v = qkv3()
    mask = np.zeros((4, 5))
    mask[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_gqa_needs_enable_gqa():
    q = np.zeros((4, 3, 8))
    k = np.zeros((2, 3, 8))
    with pytest.raises(ValueError, match="enable_gqa=True"):
        qkv.scaled_dot_product_attention(q, k, k)
    qkv.scaled_dot_product_attention(q, k, k, enable_gqa=True)


def test_heads_not_divisible():
    q, k = np.zeros((3, 3, 8)), np.zeros((2, 3, 8))
    with pytest.raises(ValueError):
        qkv.scaled_dot_product_attention(q, k, k, enable_gqa=True)


@pytest.mark.parametrize("kw,match", [
    (dict(causal="diagonal"), "causal: expected"),
    (dict(kernel="gpu"), "kernel: expected"),
    (dict(window=(1, 2, 3)), "window: expected"),
    (dict(key_lengths=[1, 2]), "key_lengths"),
    (dict(alibi_slopes=[1.0]), "alibi"),
])
def test_bad_options(kw, match):
    q, k, v = qkv3()
    with pytest.raises(ValueError, match=match):
        qkv.scaled_dot_product_attention(q, k, v, **kw)


@pytest.mark.parametrize("kw,message", [
    (dict(iters=0), "train options: iters must be at least 1, found 0"),
    (dict(min_lr=0.5), "train options: min_lr must be in [0, lr 0.001], found 0.5"),
    (dict(stop_at=7), "train options: stop_at must be a multiple of eval_interval 250"),
    (dict(embd=8, heads=3), "model config: heads must divide embd 8, found 3"),
    (dict(kernel="gpu"), "kernel: expected reference, fast or auto, found 'gpu'"),
])
def test_train_errors_name_the_keyword(kw, message, tmp_path):
    """train() checks nothing itself: the library's message names its field,
    the keyword the caller passed, never a command-line flag."""
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. " * 40)
    with pytest.raises(ValueError) as info:
        qkv.train(text, tmp_path / "out", **kw)
    assert message in str(info.value)
    assert "--" not in str(info.value)
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_fast_kernel_refuses_float64():
    q, k, v = qkv3()
    with pytest.raises(ValueError, match="float"):
        qkv.scaled_dot_product_attention(q, k, v, kernel="fast")


def test_torch_input_errors_are_the_same():
    q = torch.zeros(2, 4, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match="key: dtype float32 differs"):
        qkv.scaled_dot_product_attention(q, q.float(), q)
