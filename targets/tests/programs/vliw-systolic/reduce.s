# vliw-systolic reduce: y[8] f32 = row-wise max of x[8x32] f32.
# DMA x from HBM into SRAM, load it into vreg0 (8 sublanes x 32 lanes),
# vrmax over the first 32 lanes of each row (the maximum lands in every lane
# of the row), store lane 0 of each row as 8 consecutive f32 (vst 8 x 1 with
# row pitch 1), DMA y back to HBM.
# cycles: 827
#
# Derivation (defaults: SUB = 8, VL = 128, SRAM_LATENCY = 4, VLS_BYTES = 2048,
# HBM_LATENCY = 400, DMA_BYTES = 512; hazards EXPOSED):
#   cycle   0  dma_ld_f32 x, 8x32 f32 = 1024 B: latency 400 + 2 = 402 -> sem0 at 402.
#   cycle 402  wait sem0.
#   cycle 403  vld 8x32: latency 4 + ceil(1024/2048) + 1 = 6 -> vreg0 ready 409.
#   cycles 404..408: 5 empty bundles.
#   cycle 409  vrmax cols=32: latency log2(VL) + 2 = 9 -> vreg1 ready 418.
#   cycles 410..417: 8 empty bundles.
#   cycle 418  vst 8x1 (ld 1) = 32 B: latency 4 + ceil(32/2048) + 1 = 6 -> SRAM
#              [0x1000, 0x1020) written at 424.
#   cycles 419..423: 5 empty bundles.
#   cycle 424  dma_st_f32 y, 8x1 f32 = 32 B: latency 400 + ceil(32/512) = 401
#              -> sem1 at 825.
#   cycle 825  wait sem1.
#   cycle 826  halt.
#   total = max(827, 825) = 827.

.input  x hbm @0x0    f32 [8, 32]
.output y hbm @0x1000 f32 [8]

dma_ld_f32 sem0, 8, 32, 32, @0x0, @0x0
wait sem0
vld 8, 32, 32, vreg0, @0x0
{}
{}
{}
{}
{}
vrmax 32, vreg1, vreg0
{}
{}
{}
{}
{}
{}
{}
{}
vst 8, 1, 1, vreg1, @0x1000
{}
{}
{}
{}
{}
dma_st_f32 sem1, 8, 1, 1, @0x1000, @0x1000
wait sem1
halt
