# simd-dsp matmul: c[4x16] f32 = a[4x8] bf16 x b[8x16] bf16.
# DMA a and b into L1. b's rows k, k+1 are 64 consecutive bytes: exactly the
# packed 2 x 16 bf16 panel vmpah takes (vldh vh_p, p = k / 2). a[m, k:k+2] is
# one 32-bit word, loaded into rh registers (ldh2). C row m accumulates in
# v_m: vzero, then four vmpah steps v_m += a[m, 2p:2p+2] . panel p.
# Store the four rows, DMA c back.
# cycles: 268
#
# Derivation (defaults: VLANES = 16; dram latency 100, 16 B/cycle, l1 latency 2,
# 128 B/cycle; hazards EXPOSED; lsu x2, valu x2, vmac x1, one dma/ctl slot;
# everything pipelined, occupancy 1):
#   cycle   0  dma_dram_l1_bf16 a, 4x8 bf16 = 64 B: latency 100 + ceil(64/16)
#              = 104 -> dsem0 at 104; books dram until 0 + 4 = 4.
#   cycle   1  dma_dram_l1_bf16 b, 8x16 bf16 = 256 B (second channel): dram is
#              booked until 4, so it starts at 4; latency 100 + 16 = 116
#              -> dsem1 at 120.
#   cycle 104  wait dsem0.
#   cycle 120  wait dsem1.
#   cycle 121  vldh vh0 (latency l1.latency + 2 = 4 -> 125) || ldh2 rh0 (a[0,0:2],
#              latency l1.latency + 1 = 3 -> 124) || vzero v0 || vzero v1 (latency 1).
#   cycle 122  ldh2 rh1, rh2 (a[1,0:2], a[2,0:2]) -> 125 || vzero v2, v3.
#   cycle 123  ldh2 rh3 (a[3,0:2]) -> 126 || vldh vh1 -> 127.
#   cycle 124  ldh2 rh4, rh5 (a[0,2:4], a[1,2:4]) -> 127.
#   cycle 125  ldh2 rh6, rh7 -> 128 || vmpah v0 += rh0 . vh0 (latency 5 -> 130).
#   cycle 126  vldh vh2 -> 130 || ldh2 rh8 -> 129 || vmpah v1 += rh1 . vh0 (-> 131).
#   cycle 127  ldh2 rh9, rh10 -> 130 || vmpah v2 += rh2 . vh0 (-> 132).
#   cycle 128  ldh2 rh11 -> 131 || vldh vh3 -> 132 || vmpah v3 += rh3 . vh0 (-> 133).
#   cycle 129  ldh2 rh12, rh13 -> 132.
#   cycle 130  ldh2 rh14, rh15 -> 133 || vmpah v0 += rh4 . vh1 (v0 ready 130).
#   cycles 131..133  vmpah v1, v2, v3 with rh5..rh7 and vh1.
#   cycle 134  empty (v0 is ready again only at 135).
#   cycles 135..138  vmpah v0..v3 with rh8..rh11 and vh2.
#   cycle 139  empty.
#   cycles 140..143  vmpah v0..v3 with rh12..rh15 and vh3 -> ready 145..148.
#   cycle 144  empty.
#   cycles 145..148  vst c row m <- v_m (each as its v_m becomes ready; latency
#              l1.latency = 2) -> L1 [0x200, 0x300) all written at 150.
#   cycle 149  empty.
#   cycle 150  dma_l1_dram_f32 c, 4x16 f32 = 256 B: latency 100 + 16 = 116
#              (dram booked only until 20) -> dsem2 at 266.
#   cycle 266  wait dsem2.
#   cycle 267  halt.
#   total = max(last issue + 1, last completion) = max(268, 266) = 268.
# L1 layout: a at 0x0 (a[m, k] at 16 m + 2 k), b at 0x100 (panel p at
# 0x100 + 64 p), c at 0x200.

.input  a dram @0x0    bf16 [4, 8]
.input  b dram @0x1000 bf16 [8, 16]
.output c dram @0x2000 f32  [4, 16]

dma_dram_l1_bf16 dsem0, 4, 8, 8, @0x0, @0x0
dma_dram_l1_bf16 dsem1, 8, 16, 16, @0x1000, @0x100
wait dsem0
wait dsem1
vldh vh0, @0x100 || ldh2 rh0, @0x0 || vzero v0 || vzero v1
ldh2 rh1, @0x10 || ldh2 rh2, @0x20 || vzero v2 || vzero v3
ldh2 rh3, @0x30 || vldh vh1, @0x140
ldh2 rh4, @0x4 || ldh2 rh5, @0x14
ldh2 rh6, @0x24 || ldh2 rh7, @0x34 || vmpah v0, rh0, vh0
vldh vh2, @0x180 || ldh2 rh8, @0x8 || vmpah v1, rh1, vh0
ldh2 rh9, @0x18 || ldh2 rh10, @0x28 || vmpah v2, rh2, vh0
ldh2 rh11, @0x38 || vldh vh3, @0x1c0 || vmpah v3, rh3, vh0
ldh2 rh12, @0xc || ldh2 rh13, @0x1c
ldh2 rh14, @0x2c || ldh2 rh15, @0x3c || vmpah v0, rh4, vh1
vmpah v1, rh5, vh1
vmpah v2, rh6, vh1
vmpah v3, rh7, vh1
{}
vmpah v0, rh8, vh2
vmpah v1, rh9, vh2
vmpah v2, rh10, vh2
vmpah v3, rh11, vh2
{}
vmpah v0, rh12, vh3
vmpah v1, rh13, vh3
vmpah v2, rh14, vh3
vmpah v3, rh15, vh3
{}
vst @0x200, v0
vst @0x240, v1
vst @0x280, v2
vst @0x2c0, v3
{}
dma_l1_dram_f32 dsem2, 4, 16, 16, @0x200, @0x2000
wait dsem2
halt
