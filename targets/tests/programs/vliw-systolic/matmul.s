# vliw-systolic matmul: c[8x16] f32 = a[8x16] bf16 x b[16x16] bf16.
# DMA a and b from HBM into SRAM, one pass through MXU 0 (mmul_z into the
# f32 accumulator acc0), pop acc0 to SRAM (mpop), DMA c back to HBM.
# cycles: 1102
#
# Derivation (vliw-systolic.isa defaults: SA_ROWS = SA_COLS = 128,
# SRAM_LATENCY = 4, HBM_LATENCY = 400, DMA_BYTES = 512; hbm bandwidth
# 1200 * 1000 / 1050 = 1142 B/cycle, sram 32 * 256 = 8192 B/cycle; hazards are
# EXPOSED: nothing stalls on registers or memory, so the schedule spaces
# dependent instructions with empty bundles `{}`; one bundle per cycle unless a
# `wait` stalls):
#   cycle    0  dma_ld_bf16 a, 8x16 bf16 = 256 B: latency hbm.latency
#               + ceil(256/512) = 401 -> sem0 at 401. Books hbm and sram for
#               ceil(256/1142) = ceil(256/8192) = 1 cycle (until 1).
#   cycle    1  dma_ld_bf16 b, 16x16 bf16 = 512 B (second engine; hbm and sram
#               booked until 1, so it starts at 1): latency 400 + 1 -> sem1 at 402.
#   cycle  401  wait sem0.
#   cycle  402  wait sem1.
#   cycle  403  mmul_z m=8 k=16 n=16: latency k + m + SA_ROWS + SA_COLS + 2
#               = 16 + 8 + 256 + 2 = 282 -> acc0 ready at 685.
#   cycles 404..684: 281 empty bundles (mpop must not read acc0 before 685).
#   cycle  685  mpop m=8 n=16: latency m + SRAM_LATENCY + 2 = 14 -> SRAM
#               [0x2000, 0x2200) written at 699.
#   cycles 686..698: 13 empty bundles (the DMA must not read it before 699).
#   cycle  699  dma_st_f32 c, 8x16 f32 = 512 B: latency 400 + ceil(512/512) = 401
#               -> sem2 at 1100.
#   cycle 1100  wait sem2.
#   cycle 1101  halt.
#   total = max(last issue + 1, last completion) = max(1102, 1100) = 1102.

.input  a hbm @0x0    bf16 [8, 16]
.input  b hbm @0x1000 bf16 [16, 16]
.output c hbm @0x2000 f32  [8, 16]

dma_ld_bf16 sem0, 8, 16, 16, @0x0, @0x0
dma_ld_bf16 sem1, 16, 16, 16, @0x1000, @0x1000
wait sem0
wait sem1
mmul_z 8, 16, 16, 16, acc0, @0x0, @0x1000
# 281 empty bundles: cycles 404..684
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
mpop 8, 16, 16, acc0, @0x2000
# 13 empty bundles: cycles 686..698
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
{}
dma_st_f32 sem2, 8, 16, 16, @0x2000, @0x2000
wait sem2
halt
