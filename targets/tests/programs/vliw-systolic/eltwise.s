# vliw-systolic eltwise: y[8x32] f32 = relu(x * x + x), x[8x32] f32.
# DMA x from HBM into SRAM, load it into vreg0, vfma vreg1 = x * x + x (not
# fused: rounded after the multiply and after the add), vmaxs vreg1 =
# max(vreg1, sreg0) with sreg0 = 0.0, store, DMA y back to HBM.
# cycles: 825
#
# Derivation (defaults: SRAM_LATENCY = 4, VLS_BYTES = 2048, HBM_LATENCY = 400,
# DMA_BYTES = 512; hazards EXPOSED, so dependent instructions are spaced by
# empty bundles):
#   cycle   0  dma_ld_f32 x, 8x32 f32 = 1024 B: latency 400 + ceil(1024/512)
#              = 402 -> sem0 at 402. In the same bundle: sli sreg0, 0.0 (latency 1).
#   cycle 402  wait sem0.
#   cycle 403  vld 8x32: latency SRAM_LATENCY + ceil(1024/2048) + 1 = 6 -> vreg0
#              ready at 409.
#   cycles 404..408: 5 empty bundles.
#   cycle 409  vfma vreg1 = vreg0 * vreg0 + vreg0: latency 4 -> ready 413.
#   cycles 410..412: 3 empty bundles.
#   cycle 413  vmaxs vreg1 = max(vreg1, sreg0): latency 2 -> ready 415.
#   cycle 414  empty.
#   cycle 415  vst 8x32 to SRAM 0x1000: latency 4 + ceil(1024/2048) + 1 = 6 ->
#              SRAM [0x1000, 0x1400) written at 421.
#   cycles 416..420: 5 empty bundles.
#   cycle 421  dma_st_f32 y, 1024 B: latency 402 (hbm booked only until 1)
#              -> sem1 at 823.
#   cycle 823  wait sem1.
#   cycle 824  halt.
#   total = max(825, 823) = 825.

.input  x hbm @0x0    f32 [8, 32]
.output y hbm @0x1000 f32 [8, 32]

dma_ld_f32 sem0, 8, 32, 32, @0x0, @0x0 || sli sreg0, 0.0
wait sem0
vld 8, 32, 32, vreg0, @0x0
{}
{}
{}
{}
{}
vfma vreg1, vreg0, vreg0, vreg0
{}
{}
{}
vmaxs vreg1, vreg1, sreg0
{}
vst 8, 32, 32, vreg1, @0x1000
{}
{}
{}
{}
{}
dma_st_f32 sem1, 8, 32, 32, @0x1000, @0x1000
wait sem1
halt
