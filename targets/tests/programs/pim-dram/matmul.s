# pim-dram matmul (matrix-vector product in the DRAM banks):
# c[512x1] f32 = a[512x1024] bf16 x b[1024x1] bf16, i.e. y = W x with the
# weights W = a resident in the banks: row i of W is DRAM row 0 of bank i
# (stripe row 0 at address 0: bank i holds bytes [i * 2 KiB, (i + 1) * 2 KiB)),
# which is exactly the dense row-major [512, 1024] layout.
# DMA x into the controller buffer (dmald), broadcast it into the per-channel
# global buffers (wrgb), clear the bank accumulators (clracc), one all-bank
# mac over all 64 columns of 32 bytes, read the 512 accumulators out (rdacc),
# DMA them back to the DRAM (dmast32).
# cycles: 345
#
# Derivation (pim-dram.isa defaults: NB = 512 banks, BANKS_PER_CH = 16,
# CH_BW = 32; T_RCD = 18, T_STAGGER = 8, T_CCD = 1, T_RP = 18, T_DRAIN = 4,
# T_WR = 8, T_RD = 24; pim: latency 60, bandwidth 1024 B/cycle; gbuf: 256
# B/cycle; interlocked; `bank_mac` is one non-pipelined unit, so it is busy
# max(occupancy, latency) after each command):
#   cycle   0  dmald x: rows 1, cols 1024 bf16 (ld 64: 16 * 64 >= 1024):
#              latency pim.latency + ceil(1 * align_up(2048, 32) / min(1024, 256))
#              = 60 + 8 = 68 -> dsem0 at 68.
#   cycle   1  clracc macc0: latency 2 (bank_mac busy until 3).
#   cycle  68  wait dsem0.
#   cycle  69  wrgb ncol=64: latency T_WR + ceil(64 * 32 / CH_BW) = 8 + 64 = 72
#              -> xgb0 ready, bank_mac free at 141.
#   cycle 141  mac ncol=64: interlocked on xgb0 (141); occupancy
#              T_RCD + T_STAGGER + 64 * T_CCD + T_RP = 18 + 8 + 64 + 18 = 108,
#              latency 18 + 8 + 64 + T_DRAIN = 94 -> macc0 ready at 235, but
#              bank_mac busy until 141 + 108 = 249 (precharge).
#   cycle 249  rdacc: bank_mac free at 249; latency T_RD + ceil(16 * 4 / 32)
#              = 24 + 2 = 26 -> gbuf [0x1000, 0x1800) written at 275.
#   cycle 275  dmast32 y: rows 1, cols 512 f32 (ld 64: 8 * 64 >= 512),
#              interlocked on the gbuf region until 275; latency
#              60 + ceil(align_up(2048, 32) / 256) = 68 -> dsem1 at 343.
#   cycle 343  wait dsem1.
#   cycle 344  halt.
#   total = max(last issue + 1, last completion) = max(345, 343) = 345.

.input  a pim @0x0      bf16 [512, 1024]
.input  b pim @0x100000 bf16 [1024, 1]
.output c pim @0x100800 f32  [512, 1]

dmald dsem0, 1, 1024, 64, @0x100000, @0x0
clracc macc0
wait dsem0
wrgb 64, xgb0, @0x0
mac macc0, 64, xgb0, @0x0
rdacc @0x1000, macc0
dmast32 dsem1, 1, 512, 64, @0x100800, @0x1000
wait dsem1
halt
