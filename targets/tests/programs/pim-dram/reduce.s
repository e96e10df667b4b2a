# pim-dram reduce: y[4] f32 = row-wise max of x[4x64] f32 in the PIM DRAM.
# DMA x into the controller buffer; per row: vld, vredmax into a scalar
# register, sst into the buffer; DMA the 4 maxima back.
# cycles: 147
#
# Derivation (defaults: VL = 64; pim latency 60, 1024 B/cycle; gbuf latency 2,
# 256 B/cycle; interlocked; vpu and spu pipelined, occupancy 1):
#   cycle   0  dmald32 x: rows 4, cols 64 f32 (ld 8): latency
#              60 + ceil(4 * 256 / 256) = 64 -> dsem0 at 64.
#   cycle  64  wait dsem0.
#   cycles 65..68  vld v0..v3 (one vec slot per bundle): latency 2 + 1 = 3
#              -> ready 68, 69, 70, 71.
#   cycles 69..72  vredmax s0..s3 (each after its vld): latency 3 + log2(VL) = 9
#              -> ready 78, 79, 80, 81.
#   cycles 78..81  sst s0..s3 to 0x1000, 0x1004, 0x1008, 0x100c (each waits
#              for its scalar): latency gbuf.latency + 1 = 3 -> last written 84.
#   cycle  84  dmast32 y, 1 x 4 f32 (ld 1: 8 >= 4): interlocked until 84;
#              latency 60 + ceil(align_up(16, 32) / 256) = 61 -> dsem1 at 145.
#   cycle 145  wait dsem1.
#   cycle 146  halt.
#   total = max(147, 145) = 147.

.input  x pim @0x0    f32 [4, 64]
.output y pim @0x1000 f32 [4]

dmald32 dsem0, 4, 64, 8, @0x0, @0x0
wait dsem0
vld v0, @0x0
vld v1, @0x100
vld v2, @0x200
vld v3, @0x300
vredmax s0, v0
vredmax s1, v1
vredmax s2, v2
vredmax s3, v3
sst @0x1000, s0
sst @0x1004, s1
sst @0x1008, s2
sst @0x100c, s3
dmast32 dsem1, 1, 4, 1, @0x1000, @0x1000
wait dsem1
halt
