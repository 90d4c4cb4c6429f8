"""On-chip memory distribution: the paper's Fig. 5 saving, and addresses checked by brute
force (no two live buffers overlap, except an output over the input it deep-reuses, where
no output position overwrites input a later position reads)."""
import itertools

from hypothesis import given, settings, strategies as st

from relaydsl.backend.accel.memory import Buffer, allocate, deep_reuse_offset


def test_fig5_example_saves_31_percent():
    # 8x64x3 input, 4x4 stride-2 convolution, 3x31x16 output, float32 (the paper's bytes)
    d = deep_reuse_offset((8, 64, 3), (3, 31, 16), row_starts=[0, 2, 4],
                          col_starts=range(0, 62, 2), element_bytes=4)
    x = Buffer("in", 8 * 64 * 3 * 4, 0, 0)
    y = Buffer("out", 3 * 31 * 16 * 4, 0, 1, reuses=(x, d))
    addresses, span = allocate([x, y], reuse=True)
    # the paper: input at bytes 2096..8240, output at 0..5952
    assert (addresses[x], addresses[y]) == (2096, 0)
    assert span == 8240
    assert int(100 * (1 - span / (x.size + y.size))) == 31


def _writes_never_clobber(in_tile, out_tile, row_starts, col_starts, kernel, d):
    """Replay the layer position by position on a byte map (element units)."""
    in_rows, in_cols, in_ch = in_tile
    out_rows, out_cols, out_ch = out_tile
    base_in = max(0, -d)
    base_out = base_in + d
    for p, (r, c) in enumerate(itertools.product(range(out_rows), range(out_cols))):
        written_end = base_out + p * out_ch  # positions 0 .. p-1 are written
        # every input position this output reads must still be intact
        for dr, dc in itertools.product(range(kernel), range(kernel)):
            rr, cc = row_starts[r] + dr, col_starts[c] + dc
            if rr < in_rows and cc < in_cols:
                first = base_in + (rr * in_cols + cc) * in_ch
                if base_out < written_end and first < written_end and base_out < first + in_ch:
                    return False
    return True


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(3, 9), cols=st.integers(3, 9), cin=st.integers(1, 4),
       cout=st.integers(1, 6), k=st.integers(1, 3), s=st.integers(1, 2))
def test_deep_reuse_offset_is_safe_and_tight(rows, cols, cin, cout, k, s):
    out_rows, out_cols = (rows - k) // s + 1, (cols - k) // s + 1
    row_starts = [r * s for r in range(out_rows)]
    col_starts = [c * s for c in range(out_cols)]
    d = deep_reuse_offset((rows, cols, cin), (out_rows, out_cols, cout), row_starts,
                          col_starts, element_bytes=1)
    assert _writes_never_clobber((rows, cols, cin), (out_rows, out_cols, cout), row_starts,
                                 col_starts, k, d)
    if out_rows * out_cols > 1:  # one byte higher would overwrite input still to be read
        assert not _writes_never_clobber((rows, cols, cin), (out_rows, out_cols, cout),
                                         row_starts, col_starts, k, d + 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(0, 5), st.integers(0, 5)),
                min_size=1, max_size=8), st.booleans())
def test_live_buffers_never_overlap(specs, reuse):
    buffers = [Buffer(f"b{i}", size, min(a, b), max(a, b)) for i, (size, a, b)
               in enumerate(specs)]
    addresses, span = allocate(buffers, reuse)
    for x, y in itertools.combinations(buffers, 2):
        if x.start <= y.end and y.start <= x.end:  # live together
            assert addresses[x] + x.size <= addresses[y] or \
                addresses[y] + y.size <= addresses[x]
    assert span == max(addresses[b] + b.size for b in buffers)
    assert min(addresses.values()) == 0
    if not reuse:
        assert span == sum(b.size for b in buffers)
    else:  # at least the bytes live at once, at most each buffer its own space
        peak = max(sum(b.size for b in buffers if b.start <= t <= b.end)
                   for t in range(6))
        assert peak <= span <= sum(b.size for b in buffers)
