# simd-dsp reduce: y[4] f32 = row-wise max of x[4x16] f32 in DRAM.
# DMA x into L1; each row is one 16-lane vector: vld, vrmax (the maximum of
# all lanes, broadcast to every lane), vst; the four maxima are gathered into
# consecutive words by scalar ldw/stw (32-bit moves through the i32 scalar
# registers, bit-exact); DMA y back to DRAM.
# cycles: 238
#
# Derivation (defaults: VLANES = 16; dram latency 100, 16 B/cycle; l1 latency 2;
# hazards EXPOSED; lsu x2, valu x2, one dma/ctl slot):
#   cycle   0  dma_dram_l1_f32 x, 256 B: latency 100 + 16 = 116 -> dsem0 at 116.
#   cycle 116  wait dsem0.
#   cycle 117  vld v0 || vld v1: latency 4 -> 121.
#   cycle 118  vld v2 || vld v3 -> 122.
#   cycles 119, 120: empty.
#   cycle 121  vrmax v4 <- v0 || vrmax v5 <- v1: latency 2 + log2(16) = 6 -> 127.
#   cycle 122  vrmax v6 <- v2 || vrmax v7 <- v3 -> 128.
#   cycles 123..126: empty.
#   cycle 127  vst v4 -> 0x100 || vst v5 -> 0x140: latency 2 -> written 129.
#   cycle 128  vst v6 -> 0x180 || vst v7 -> 0x1c0 -> written 130.
#   cycle 129  ldw r0 <- 0x100 || ldw r1 <- 0x140: latency l1.latency + 1 = 3 -> 132.
#   cycle 130  ldw r2 <- 0x180 || ldw r3 <- 0x1c0 -> 133.
#   cycle 131  empty.
#   cycle 132  stw 0x200 <- r0 || stw 0x204 <- r1: latency 2 -> written 134.
#   cycle 133  stw 0x208 <- r2 || stw 0x20c <- r3 -> written 135.
#   cycle 134  empty.
#   cycle 135  dma_l1_dram_f32 y, 1x4 f32 = 16 B: latency 100 + ceil(16/16) = 101
#              -> dsem1 at 236.
#   cycle 236  wait dsem1.
#   cycle 237  halt.
#   total = max(238, 236) = 238.

.input  x dram @0x0    f32 [4, 16]
.output y dram @0x1000 f32 [4]

dma_dram_l1_f32 dsem0, 4, 16, 16, @0x0, @0x0
wait dsem0
vld v0, @0x0 || vld v1, @0x40
vld v2, @0x80 || vld v3, @0xc0
{}
{}
vrmax v4, v0 || vrmax v5, v1
vrmax v6, v2 || vrmax v7, v3
{}
{}
{}
{}
vst @0x100, v4 || vst @0x140, v5
vst @0x180, v6 || vst @0x1c0, v7
ldw r0, @0x100 || ldw r1, @0x140
ldw r2, @0x180 || ldw r3, @0x1c0
{}
stw @0x200, r0 || stw @0x204, r1
stw @0x208, r2 || stw @0x20c, r3
{}
dma_l1_dram_f32 dsem1, 1, 4, 4, @0x200, @0x1000
wait dsem1
halt
