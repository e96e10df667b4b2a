# pim-dram eltwise: y[2x64] f32 = relu(x * x + x), x[2x64] f32 in the PIM DRAM.
# DMA x into the controller buffer, on the controller vector unit (VL = 64
# f32 lanes): vfma t = x * x + x, vmax y = max(t, 0) against a zero vector
# (sli s0, 0.0; vbcast v3, s0); store, DMA y back.
# cycles: 142
#
# Derivation (defaults: VL = 64; pim latency 60, 1024 B/cycle; gbuf latency 2,
# 256 B/cycle; one `vec` slot, one `scl` slot and one `cmd` slot per bundle;
# interlocked on registers and buffer regions; vpu pipelined, occupancy 1):
#   cycle   0  dmald32 x: rows 2, cols 64 f32 (ld 8: 8 * 8 >= 64, dense):
#              latency 60 + ceil(2 * align_up(256, 32) / min(1024, 256)) = 62
#              -> dsem0 at 62. Same bundle: sli s0, 0.0 (latency 1).
#   cycle   1  vbcast v3, s0 (s0 ready at 1): latency 2 -> v3 = 0 at 3.
#   cycle  62  wait dsem0.
#   cycle  63  vld v0: latency gbuf.latency + ceil(64 * 4 / 256) = 3 -> 66.
#   cycle  64  vld v1 -> 67.
#   cycle  66  vfma v4 = v0 * v0 + v0 (waits for v0): latency 5 -> 71.
#   cycle  67  vfma v5 = v1 * v1 + v1: -> 72.
#   cycle  71  vmax v4 = max(v4, v3) (waits for v4): latency 3 -> 74.
#   cycle  72  vmax v5 -> 75.
#   cycle  74  vst v4 to 0x200: latency 2 + ceil(256 / 256) = 3 -> written 77.
#   cycle  75  vst v5 to 0x300 -> written 78.
#   cycle  78  dmast32 y (2 x 64 f32 from 0x200): interlocked on the buffer
#              until 78; latency 62 -> dsem1 at 140.
#   cycle 140  wait dsem1.
#   cycle 141  halt.
#   total = max(142, 140) = 142.

.input  x pim @0x0    f32 [2, 64]
.output y pim @0x1000 f32 [2, 64]

dmald32 dsem0, 2, 64, 8, @0x0, @0x0 || sli s0, 0.0
vbcast v3, s0
wait dsem0
vld v0, @0x0
vld v1, @0x100
vfma v4, v0, v0, v0
vfma v5, v1, v1, v1
vmax v4, v4, v3
vmax v5, v5, v3
vst @0x200, v4
vst @0x300, v5
dmast32 dsem1, 2, 64, 8, @0x1000, @0x200
wait dsem1
halt
