# systolic-os matmul: c[8x8] f32 = a[8x16] bf16 x b[16x8] bf16.
# DMA a into ifmap and b into filter, one output-stationary fold on the
# 32x32 array, DMA c out of ofmap.
# cycles: 287
#
# Derivation (systolic-os.isa defaults: ROWS = COLS = 32, DATAFLOW = 0 (OS),
# OS_DRAIN = 0; dram: latency 100, bandwidth 64 words * 2 B = 128 B/cycle;
# ifmap/filter bandwidth (32 + 64) * 2 = 192 B/cycle, ofmap 2*32*4 + 128 = 384;
# one instruction per word, interlocked; dma: 2 copies, async):
#   cycle   0  ld_ifmap  8x16 bf16 = 256 B. Latency dram.latency + ceil(256/128)
#              = 100 + 2 = 102. Books dram for ceil(256/128) = 2 cycles (until 2),
#              ifmap for ceil(256/192) = 2. Completes (signals sem0) at 102.
#   cycle   1  ld_filter 16x8 bf16 = 256 B, on the second DMA copy. DRAM is booked
#              until 2, so the transfer starts at 2 (first come first served);
#              latency 102 -> completes at 104. (dram booked until 4.)
#   cycle 102  wait sem0 (signalled at 102).
#   cycle 104  wait sem1 (signalled at 104).
#   cycle 105  mmul m=8 k=16 n=8: OS fold, latency = occupancy
#              = ROWS + COLS + k - 2 + OS_DRAIN = 32 + 32 + 16 - 2 = 78 -> ofmap
#              [0, 256) written at 183.
#   cycle 183  st_ofmap 8x8 f32 = 256 B: interlocked on the ofmap region until 183;
#              dram free (booked until 4) -> starts 183, latency 100 + ceil(256/128)
#              = 102 -> completes at 285.
#   cycle 285  wait sem2.
#   cycle 286  halt.
#   total = max(last issue + 1, last completion) = max(287, 285) = 287.

.input  a dram @0x0    bf16 [8, 16]
.input  b dram @0x1000 bf16 [16, 8]
.output c dram @0x2000 f32  [8, 8]

ld_ifmap  sem0, 8, 16, 16, @0x0, @0x0
ld_filter sem1, 16, 8, 8, @0x1000, @0x0
wait sem0
wait sem1
mmul 8, 16, 8, @0x0, @0x0, @0x0
st_ofmap  sem2, 8, 8, 8, @0x0, @0x2000
wait sem2
halt
