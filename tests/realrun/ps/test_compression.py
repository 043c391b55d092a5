"""2-bit gradient compression: quantisation, packing of 16 values per word, residual feedback."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from realrun.ps.compression import compress, decompress, words_for


def test_values_at_or_beyond_the_threshold_become_plus_or_minus_threshold_the_rest_zero():
    grad = np.array([0.5, 0.49, -0.5, -0.7, 0.0, 2.0, -0.1], dtype=np.float32)
    residual = np.zeros_like(grad)
    words = compress(grad, residual, threshold=0.5)
    assert words.dtype == np.uint32 and words.size == 1  # 7 values fit one 32-bit word
    np.testing.assert_array_equal(decompress(words, 7, 0.5), [0.5, 0.0, -0.5, -0.5, 0.0, 0.5, 0.0])
    # What was not sent is kept: 0.49 stays whole, -0.7 keeps -0.2, 2.0 keeps 1.5.
    np.testing.assert_allclose(residual, [0.0, 0.49, 0.0, -0.2, 0.0, 1.5, -0.1], atol=1e-7)


def test_sixteen_codes_per_word_in_order_two_bits_each():
    grad = np.zeros(33, dtype=np.float32)
    grad[0] = 1.0  # +t: code 1 in bits 0-1 of word 0
    grad[15] = -1.0  # -t: code 2 in bits 30-31 of word 0
    grad[32] = 1.0  # the 33rd value opens a third word
    words = compress(grad, np.zeros_like(grad), threshold=1.0)
    assert words.tolist() == [1 | (2 << 30), 0, 1]
    assert words_for(32) == 2 and words_for(33) == 3


def test_the_residual_delivers_a_small_constant_gradient_over_time():
    # 0.3 per step with threshold 1: nothing, nothing, nothing, then +1 (0.3*4 = 1.2 >= 1) ...
    residual = np.zeros(1, dtype=np.float32)
    sent = [
        float(decompress(compress(np.array([0.3], np.float32), residual, 1.0), 1, 1.0)[0])
        for _ in range(10)
    ]
    assert sent == [0, 0, 0, 1, 0, 0, 1, 0, 0, 1]
    assert abs(sum(sent) + residual[0] - 3.0) < 1e-5  # nothing lost, only delayed


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-4, 4, width=32), min_size=1, max_size=70), st.floats(0.0625, 2.0, width=32)
)
def test_sent_plus_residual_always_equals_gradient_plus_old_residual(values, threshold):
    grad = np.array(values, dtype=np.float32)
    old = np.linspace(-1, 1, grad.size).astype(np.float32)
    residual = old.copy()
    sent = decompress(compress(grad, residual, threshold), grad.size, threshold)
    assert set(np.unique(sent)) <= {0.0, np.float32(threshold), -np.float32(threshold)}
    np.testing.assert_allclose(sent + residual, grad + old, atol=1e-5)
