# systolic-os eltwise: y[8x16] f32 = relu(x * x + x), x[8x16] f32.
# DMA x into ofmap, then on the post-processing unit: t = x * x (vmul),
# t = t + x (vadd), y = max(t, 0) (vrelu); DMA y out.
# cycles: 247
#
# Derivation (defaults: COLS = 32; dram latency 100, 128 B/cycle; ofmap
# 384 B/cycle; ppu ops on a rows x cols tile: occupancy rows * ceil(cols / COLS),
# latency occupancy + 4; interlocked on ofmap regions):
#   cycle   0  ld_ofmap 8x16 f32 = 512 B: latency 100 + ceil(512/128) = 104
#              -> sem0 at 104.
#   cycle 104  wait sem0.
#   cycle 105  vmul 8x16: occupancy 8 * ceil(16/32) = 8, latency 12 -> t ready 117.
#   cycle 117  vadd reads t: interlocked until 117 (ppu free since 113);
#              latency 12 -> ready 129.
#   cycle 129  vrelu: waits for t (129); latency 12 -> y ready 141.
#   cycle 141  st_ofmap 512 B: interlocked on y until 141; dram booked only until 4
#              -> completes at 141 + 104 = 245.
#   cycle 245  wait sem1.
#   cycle 246  halt.
#   total = max(247, 245) = 247.

.input  x dram @0x0    f32 [8, 16]
.output y dram @0x1000 f32 [8, 16]

ld_ofmap sem0, 8, 16, 16, @0x0, @0x0
wait sem0
vmul  8, 16, @0x200, @0x0, @0x0
vadd  8, 16, @0x200, @0x200, @0x0
vrelu 8, 16, @0x200, @0x200
st_ofmap sem1, 8, 16, 16, @0x200, @0x1000
wait sem1
halt
