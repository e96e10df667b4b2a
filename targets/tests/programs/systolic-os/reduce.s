# systolic-os reduce: y[8] f32 = row-wise max of x[8x16] f32.
# DMA x into ofmap, vrowmax on the post-processing unit (a column vector of
# 8 f32 in ofmap), DMA y out.
# cycles: 225
#
# Derivation (defaults: COLS = 32; dram latency 100, 128 B/cycle; interlocked):
#   cycle   0  ld_ofmap 8x16 f32 = 512 B: latency 100 + ceil(512/128) = 104
#              -> sem0 at 104.
#   cycle 104  wait sem0.
#   cycle 105  vrowmax rows=8 cols=16: latency rows * ceil(cols/COLS) + 4 + log2(COLS)
#              = 8 * 1 + 4 + 5 = 17 -> y column ready 122.
#   cycle 122  st_ofmap 1x8 f32 = 32 B: interlocked on y until 122; latency
#              100 + ceil(32/128) = 101 -> completes 223.
#   cycle 223  wait sem1.
#   cycle 224  halt.
#   total = max(225, 223) = 225.

.input  x dram @0x0    f32 [8, 16]
.output y dram @0x1000 f32 [8]

ld_ofmap sem0, 8, 16, 16, @0x0, @0x0
wait sem0
vrowmax 8, 16, @0x200, @0x0
st_ofmap sem1, 1, 8, 8, @0x200, @0x1000
wait sem1
halt
