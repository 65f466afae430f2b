"""Zero copy: the kernel reads the caller's buffers. The op counts every input
it copies (qkv::input_copies(), a strided last dim only) and the extension
records the data pointers it handed to the op (_qkv._testing.last_pointers())."""

import numpy as np
import torch

import qkv
from qkv import _qkv


def ref(q, k, v, **kw):
    return qkv.scaled_dot_product_attention(np.ascontiguousarray(q), np.ascontiguousarray(k),
                                            np.ascontiguousarray(v), **kw)


def rng():
    return np.random.default_rng(7)


def test_numpy_inputs_are_read_in_place():
    r = rng()
    q, k, v = r.random((2, 4, 6, 16)), r.random((2, 4, 9, 16)), r.random((2, 4, 9, 8))
    before = _qkv._testing.input_copies()
    qkv.scaled_dot_product_attention(q, k, v)
    assert _qkv._testing.input_copies() == before
    assert _qkv._testing.last_pointers() == [q.ctypes.data, k.ctypes.data, v.ctypes.data]


def test_kv_cache_slice_is_read_in_place():
    r = rng()
    cache_k, cache_v = r.random((1, 2, 64, 32)), r.random((1, 2, 64, 32))
    q = r.random((1, 8, 1, 32))
    length = 37
    k, v = cache_k[:, :, :length], cache_v[:, :, :length]
    assert not k.flags["C_CONTIGUOUS"]
    before = _qkv._testing.input_copies()
    out = qkv.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert _qkv._testing.input_copies() == before
    assert _qkv._testing.last_pointers()[1:] == [cache_k.ctypes.data, cache_v.ctypes.data]
    np.testing.assert_allclose(out, ref(q, k, v, enable_gqa=True), rtol=1e-13)


def test_transposed_heads_are_read_in_place():
    # [B, N, H, D] (a fused projection's layout) viewed as [B, H, N, D]
    r = rng()
    q, k, v = (r.random((2, 5, 3, 8)).transpose(0, 2, 1, 3) for _ in range(3))
    before = _qkv._testing.input_copies()
    out = qkv.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert _qkv._testing.input_copies() == before
    assert _qkv._testing.last_pointers()[0] == q.ctypes.data
    np.testing.assert_allclose(out, ref(q, k, v, is_causal=True), rtol=1e-13)


def test_torch_tensors_are_read_in_place():
    q, k, v = torch.rand(2, 8, 3, 16), torch.rand(2, 2, 40, 16)[:, :, :30], torch.rand(2, 2, 30, 16)
    before = _qkv._testing.input_copies()
    out = qkv.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert isinstance(out, torch.Tensor)
    assert _qkv._testing.input_copies() == before
    assert _qkv._testing.last_pointers() == [q.data_ptr(), k.data_ptr(), v.data_ptr()]
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_requires_grad_tensors_are_read_in_place():
    q = torch.rand(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    before = _qkv._testing.input_copies()
    with torch.no_grad():  # recording a graph, the call is refused (test_trust.py)
        qkv.scaled_dot_product_attention(q, q, q)
    assert _qkv._testing.input_copies() == before
    assert _qkv._testing.last_pointers()[0] == q.data_ptr()


def test_fortran_order_is_copied_once_each_and_correct():
    r = rng()
    q, k, v = (np.asfortranarray(r.random((2, 3, 7, 5))) for _ in range(3))
    before = _qkv._testing.input_copies()
    out = qkv.scaled_dot_product_attention(q, k, v, is_causal=True, causal="bottom-right")
    assert _qkv._testing.input_copies() == before + 3
    np.testing.assert_allclose(out, ref(q, k, v, is_causal=True, causal="bottom-right"),
                               rtol=1e-13)


def test_negative_and_broadcast_strides():
    r = rng()
    q = r.random((2, 6, 4))[:, ::-1]  # reversed queries: negative stride
    k = np.broadcast_to(r.random((1, 9, 4)), (2, 9, 4))  # one key set for both heads: stride 0
    v = r.random((2, 9, 4))
    mask = np.broadcast_to(r.random((6, 9)) < 0.8, (2, 6, 9))
    before = _qkv._testing.input_copies()
    out = qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert _qkv._testing.input_copies() == before
    np.testing.assert_allclose(out, ref(q, k, v, attn_mask=np.ascontiguousarray(mask)),
                               rtol=1e-13)


def test_results_own_their_buffer_and_match_the_input_kind():
    q = np.random.default_rng(1).random((3, 4, 8))
    out = qkv.scaled_dot_product_attention(q, q, q)
    assert isinstance(out, np.ndarray) and out.flags["C_CONTIGUOUS"] and out.flags["WRITEABLE"]
    assert out.ctypes.data % 64 == 0  # qkv's aligned storage, handed over, not copied
    t = qkv.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(q),
                                         torch.from_numpy(q))
    assert isinstance(t, torch.Tensor) and t.data_ptr() % 64 == 0
    del q
    assert np.isfinite(out).all() and torch.isfinite(t).all()


def test_gil_is_released_while_the_kernel_runs():
    import threading
    import time
    r = rng()
    q, k, v = r.random((1, 8, 512, 64)), r.random((1, 8, 512, 64)), r.random((1, 8, 512, 64))
    t0 = time.perf_counter()
    qkv.scaled_dot_product_attention(q, k, v, kernel="reference", threads=1)
    alone = time.perf_counter() - t0
    ticks = 0
    done = threading.Event()

    def work():
        qkv.scaled_dot_product_attention(q, k, v, kernel="reference", threads=1)
        done.set()

    th = threading.Thread(target=work)
    th.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    th.join()
    # With the GIL held for the whole call, the loop could not run in between.
    assert alone > 0.02
    assert ticks >= 5


def test_two_dim_inputs_are_one_head():
    r = rng()
    q, k, v = r.random((4, 3)), r.random((6, 3)), r.random((6, 2))
    out, w, lse = qkv.scaled_dot_product_attention(q, k, v, is_causal=True, causal="bottom-right",
                                                   return_weights=True, return_lse=True)
    assert out.shape == (4, 2) and w.shape == (4, 6) and lse.shape == (4,)
    before = _qkv._testing.input_copies()
    o3 = qkv.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True,
                                          causal="bottom-right")
    assert _qkv._testing.input_copies() == before
    np.testing.assert_array_equal(out, o3[0])
    t = torch.from_numpy(q)
    torch.testing.assert_close(qkv.scaled_dot_product_attention(t, t, t),
                               torch.nn.functional.scaled_dot_product_attention(t, t, t))
    dq, dk, dv = qkv.attention_backward(q, k, v, out, lse, np.ones((4, 2)), is_causal=True,
                                        causal="bottom-right")
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


def test_dropped_results_are_recycled_never_shared():
    r = rng()
    q, k, v = r.random((2, 3, 5, 8)), r.random((2, 3, 6, 8)), r.random((2, 3, 6, 8))
    q2 = r.random((2, 3, 5, 8))
    a = qkv.scaled_dot_product_attention(q, k, v)
    expected_a = a.copy()
    b = qkv.scaled_dot_product_attention(q2, k, v)  # `a` is alive: a different buffer
    assert a.ctypes.data != b.ctypes.data
    np.testing.assert_array_equal(a, expected_a)
    view_of_b = b[1]  # a view keeps b's buffer alive
    address = b.ctypes.data
    del b
    c = qkv.scaled_dot_product_attention(q, k, v)
    assert c.ctypes.data != address
    np.testing.assert_array_equal(c, expected_a)
    del a
    d = qkv.scaled_dot_product_attention(q2, k, v)  # reuses a's buffer: every element rewritten
    np.testing.assert_array_equal(d[1], view_of_b)
    t = torch.from_numpy(q)
    first = qkv.scaled_dot_product_attention(t, t, t)
    ptr, expected = first.data_ptr(), first.clone()
    del first
    again = qkv.scaled_dot_product_attention(t, t, t)
    assert again.data_ptr() == ptr  # the dropped torch result came back through the pool
    torch.testing.assert_close(again, expected, rtol=0, atol=0)
