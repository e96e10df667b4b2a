# simd-dsp eltwise: y[4x16] f32 = relu(x * x + x), x[4x16] f32 in DRAM.
# DMA x into L1, four 16-lane vectors: vld, vfma t = x * x + x on the
# multiplier array, vrelu on the vector ALUs, vst; DMA y back to DRAM.
# cycles: 250
#
# Derivation (simd-dsp.isa defaults: VLANES = 16; dram latency 100, 16 B/cycle;
# l1 latency 2, 128 B/cycle; hazards EXPOSED: nothing stalls on registers or
# memory, so dependent instructions are spaced by hand; units: lsu x2 (slots
# ls0, ls1), valu x2 (va0, va1), vmac x1 (vm), one dma/ctl slot per bundle;
# every unit pipelined with occupancy 1):
#   cycle   0  dma_dram_l1_f32 x, 4x16 f32 = 256 B: latency dram.latency
#              + ceil(256/16) = 116 -> dsem0 at 116 (dram booked until 16).
#   cycle 116  wait dsem0.
#   cycle 117  vld v0 || vld v1: latency l1.latency + 2 = 4 -> ready 121.
#   cycle 118  vld v2 || vld v3 -> ready 122.
#   cycles 119, 120: empty.
#   cycles 121..124  vfma v4..v7 = vi * vi + vi, one per cycle on the single
#              multiplier array (v2, v3 ready at 122 <= their issue at 123, 124):
#              latency 5 -> ready 126, 127, 128, 129.
#   cycle 125  empty.
#   cycle 126  vrelu v4 (latency 1 -> 127).
#   cycle 127  vrelu v5 || vst y0 <- v4 (vst latency l1.latency = 2 -> 129).
#   cycle 128  vrelu v6 || vst y1 <- v5 (-> 130).
#   cycle 129  vrelu v7 || vst y2 <- v6 (-> 131).
#   cycle 130  vst y3 <- v7 -> L1 [0x100, 0x200) all written at 132.
#   cycle 131  empty.
#   cycle 132  dma_l1_dram_f32 y, 256 B: latency 116 -> dsem1 at 248.
#   cycle 248  wait dsem1.
#   cycle 249  halt.
#   total = max(last issue + 1, last completion) = max(250, 248) = 250.

.input  x dram @0x0    f32 [4, 16]
.output y dram @0x1000 f32 [4, 16]

dma_dram_l1_f32 dsem0, 4, 16, 16, @0x0, @0x0
wait dsem0
vld v0, @0x0 || vld v1, @0x40
vld v2, @0x80 || vld v3, @0xc0
{}
{}
vfma v4, v0, v0, v0
vfma v5, v1, v1, v1
vfma v6, v2, v2, v2
vfma v7, v3, v3, v3
{}
vrelu v4, v4
vrelu v5, v5 || vst @0x100, v4
vrelu v6, v6 || vst @0x140, v5
vrelu v7, v7 || vst @0x180, v6
vst @0x1c0, v7
{}
dma_l1_dram_f32 dsem1, 4, 16, 16, @0x100, @0x1000
wait dsem1
halt
