//! Exact element-type conversions shared by the encoder (real immediates) and
//! the simulators: round to nearest even everywhere, saturation into integers
//! and into fp8 E4M3 (which has no infinity), infinity for the other floats.

use crate::model::DType;

/// Rounds half to even.
pub fn round_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        2.0 * (x / 2.0).round()
    } else {
        r
    }
}

/// An IEEE-style binary float with `exp_bits` exponent and `man_bits` mantissa bits.
#[derive(Clone, Copy)]
struct MiniFloat {
    exp_bits: u32,
    man_bits: u32,
    /// E4M3 has no infinities: the all-ones exponent holds numbers, only all-ones mantissa there is NaN.
    ieee_specials: bool,
}

impl MiniFloat {
    fn bias(self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }

    fn max_finite(self) -> f64 {
        let max_exp = if self.ieee_specials {
            (1 << self.exp_bits) - 2
        } else {
            (1 << self.exp_bits) - 1
        };
        let max_man = if self.ieee_specials {
            (1u64 << self.man_bits) - 1
        } else {
            (1u64 << self.man_bits) - 2
        };
        (1.0 + max_man as f64 / f64::from(1u32 << self.man_bits)) * 2f64.powi(max_exp - self.bias())
    }

    fn nan(self) -> u64 {
        let e = (1u64 << self.exp_bits) - 1;
        let m = if self.ieee_specials {
            1u64 << (self.man_bits - 1)
        } else {
            (1u64 << self.man_bits) - 1
        };
        (e << self.man_bits) | m
    }

    fn encode(self, x: f32) -> u64 {
        let sign = u64::from(x.is_sign_negative()) << (self.exp_bits + self.man_bits);
        if x.is_nan() {
            return sign | self.nan();
        }
        let a = f64::from(x.abs());
        let min_normal_exp = 1 - self.bias();
        let e = if a == 0.0 {
            min_normal_exp
        } else {
            (a.log2().floor() as i32).max(min_normal_exp)
        };
        let quantum = 2f64.powi(e - self.man_bits as i32);
        let r = round_even(a / quantum) * quantum;
        if r > self.max_finite() || a.is_infinite() {
            return sign
                | if self.ieee_specials {
                    ((1u64 << self.exp_bits) - 1) << self.man_bits
                } else {
                    self.encode(self.max_finite() as f32) & !(1 << (self.exp_bits + self.man_bits))
                };
        }
        if r < 2f64.powi(min_normal_exp) {
            return sign | (r / 2f64.powi(min_normal_exp - self.man_bits as i32)) as u64;
        }
        let re = r.log2().floor() as i32;
        let m = ((r / 2f64.powi(re) - 1.0) * f64::from(1u32 << self.man_bits)) as u64;
        sign | ((u64::try_from(re + self.bias()).unwrap_or(0)) << self.man_bits) | m
    }

    fn decode(self, bits: u64) -> f32 {
        let sign = if (bits >> (self.exp_bits + self.man_bits)) & 1 == 1 {
            -1.0
        } else {
            1.0
        };
        let e = ((bits >> self.man_bits) & ((1 << self.exp_bits) - 1)) as i32;
        let m = bits & ((1 << self.man_bits) - 1);
        let all_ones = (1 << self.exp_bits) - 1;
        let frac = m as f64 / f64::from(1u32 << self.man_bits);
        let v = if e == 0 {
            frac * 2f64.powi(1 - self.bias())
        } else if e == all_ones && self.ieee_specials {
            if m == 0 { f64::INFINITY } else { f64::NAN }
        } else if e == all_ones && m == (1 << self.man_bits) - 1 {
            f64::NAN
        } else {
            (1.0 + frac) * 2f64.powi(e - self.bias())
        };
        (sign * v) as f32
    }
}

const E4M3: MiniFloat = MiniFloat {
    exp_bits: 4,
    man_bits: 3,
    ieee_specials: false,
};
const E5M2: MiniFloat = MiniFloat {
    exp_bits: 5,
    man_bits: 2,
    ieee_specials: true,
};

/// The raw bits of `x` converted to a floating-point `dtype` (f32 for integer types).
pub fn encode_real(dtype: DType, x: f32) -> u64 {
    match dtype {
        DType::F32 | DType::I8 | DType::U8 | DType::I16 | DType::I32 => u64::from(x.to_bits()),
        DType::Bf16 => u64::from(half::bf16::from_f32(x).to_bits()),
        DType::F16 => u64::from(half::f16::from_f32(x).to_bits()),
        DType::Fp8E4M3 => E4M3.encode(x),
        DType::Fp8E5M2 => E5M2.encode(x),
    }
}

/// The value of raw `dtype` bits (see [`encode_real`]).
pub fn decode_real(dtype: DType, bits: u64) -> f32 {
    match dtype {
        DType::F32 | DType::I8 | DType::U8 | DType::I16 | DType::I32 => f32::from_bits(bits as u32),
        DType::Bf16 => half::bf16::from_bits(bits as u16).to_f32(),
        DType::F16 => half::f16::from_bits(bits as u16).to_f32(),
        DType::Fp8E4M3 => E4M3.decode(bits),
        DType::Fp8E5M2 => E5M2.decode(bits),
    }
}

/// `x` as f32, rounded to odd: exact values stay, inexact ones are cut toward
/// zero with the last significand bit set (infinite ones become the largest
/// finite). Rounding that to nearest even in a type with at least two fewer
/// significand bits and no wider exponent range (bf16, f16) rounds `x`
/// correctly: the odd bit keeps what the first step dropped from looking
/// like a tie. (`half`'s own `from_f64` misrounds some values, e.g. the f32
/// just above the bf16 tie 365.)
fn f32_round_odd(x: f64) -> f32 {
    let f = x as f32;
    if f64::from(f) == x || x.is_nan() {
        return f;
    }
    let cut = if f64::from(f).abs() > x.abs() {
        f32::from_bits(f.to_bits() - 1)
    } else {
        f
    };
    f32::from_bits(cut.to_bits() | 1)
}

/// `x` rounded to nearest even bf16.
pub fn bf16_from_f64(x: f64) -> half::bf16 {
    bf16_from_f32(f32_round_odd(x))
}

/// `f` rounded to nearest even bf16.
pub fn bf16_from_f32(f: f32) -> half::bf16 {
    half::bf16::from_bits(bf16_bits(f.to_bits()))
}

/// The bits of the bf16 nearest (ties to even) the f32 of bits `b`; a NaN
/// stays a NaN (made quiet) with its sign and top payload bits. Without
/// branches, so loops over whole tensors vectorise.
pub fn bf16_bits(b: u32) -> u16 {
    // Nearest even on the bits: add just under half the dropped unit, plus
    // one when the kept part is odd (the carry rounds up into the exponent,
    // up to infinity, as it should).
    let rounded = (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16;
    let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
    if nan {
        (b >> 16) as u16 | 0x0040
    } else {
        rounded
    }
}

/// `x` rounded to nearest even f16.
pub fn f16_from_f64(x: f64) -> half::f16 {
    half::f16::from_f32(f32_round_odd(x))
}

/// Rounds an f64 to the value `dtype` holds: floats round to nearest even;
/// integers round to nearest even and saturate; NaN becomes 0 in integers.
pub fn quantize(dtype: DType, x: f64) -> f64 {
    let sat = |lo: f64, hi: f64| {
        if x.is_nan() {
            0.0
        } else {
            round_even(x).clamp(lo, hi)
        }
    };
    match dtype {
        DType::F32 => f64::from(x as f32),
        DType::Bf16 => f64::from(bf16_from_f64(x).to_f32()),
        DType::F16 => f64::from(f16_from_f64(x).to_f32()),
        DType::Fp8E4M3 | DType::Fp8E5M2 => {
            f64::from(decode_real(dtype, encode_real(dtype, x as f32)))
        }
        DType::I8 => sat(-128.0, 127.0),
        DType::U8 => sat(0.0, 255.0),
        DType::I16 => sat(-32768.0, 32767.0),
        DType::I32 => sat(-2_147_483_648.0, 2_147_483_647.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_e4m3_known_values() {
        assert_eq!(E4M3.encode(1.0), 0x38);
        assert_eq!(E4M3.encode(448.0), 0x7e);
        assert_eq!(E4M3.encode(1000.0), 0x7e, "saturates");
        assert_eq!(E4M3.encode(-2.0), 0xc0);
        assert_eq!(E4M3.decode(0x01), 2f32.powi(-9), "smallest subnormal");
        assert!(E4M3.decode(0x7f).is_nan());
        for b in 0..=0xffu64 {
            let v = E4M3.decode(b);
            if !v.is_nan() && v != 0.0 {
                assert_eq!(E4M3.encode(v), b, "E4M3 {b:#x} = {v}");
            }
        }
    }

    #[test]
    fn fp8_e5m2_known_values() {
        assert_eq!(E5M2.encode(1.0), 0x3c);
        assert_eq!(E5M2.encode(57344.0), 0x7b);
        assert_eq!(E5M2.encode(1e6), 0x7c, "overflow is infinity");
        for b in 0..=0xffu64 {
            let v = E5M2.decode(b);
            if !v.is_nan() && v != 0.0 {
                assert_eq!(E5M2.encode(v), b, "E5M2 {b:#x} = {v}");
            }
        }
    }

    /// Direct conversions from f64 round once: the f32 just above a bf16
    /// tie rounds up (`half::bf16::from_f64` gives 0x43b6), values between
    /// f32s round by their exact value, and the ties themselves go to even.
    #[test]
    fn f64_to_bf16_and_f16_round_once() {
        let above_tie = f64::from(f32::from_bits(0x43b6_8007)); // 365.0002
        assert_eq!(bf16_from_f64(above_tie).to_bits(), 0x43b7);
        assert_eq!(bf16_from_f64(365.0).to_bits(), 0x43b6, "tie to even");
        assert_eq!(bf16_from_f64(367.0).to_bits(), 0x43b8, "tie to even");
        // Between two f32s, both rounding to the bf16 tie: the f64's side wins.
        let tie = 365.0f64;
        assert_eq!(bf16_from_f64(tie + 1e-12).to_bits(), 0x43b7);
        assert_eq!(bf16_from_f64(tie - 1e-12).to_bits(), 0x43b6);
        assert_eq!(bf16_from_f64(-(tie + 1e-12)).to_bits(), 0xc3b7);
        // f16: 1 + 2^-11 is a tie; a hair above rounds up.
        assert_eq!(f16_from_f64(1.0 + 2f64.powi(-11)).to_bits(), 0x3c00);
        assert_eq!(f16_from_f64(1.0 + 2f64.powi(-11) + 1e-15).to_bits(), 0x3c01);
        // Overflow, tiny values and NaN.
        assert!(bf16_from_f64(1e300).is_infinite());
        assert_eq!(bf16_from_f64(1e-300).to_bits(), 0);
        assert_eq!(bf16_from_f64(-1e-300).to_bits(), 0x8000);
        assert!(bf16_from_f64(f64::NAN).is_nan());
        assert!(f16_from_f64(70000.0).is_infinite());
        // Agrees with `half`'s f32 conversion on a spread of f32 bit patterns.
        let edges = [
            0x7f7f_ffff,
            0xff7f_ffff,
            0x0000_8000,
            0x0001_8000,
            0x3f80_8000,
            0x3f81_8000,
        ];
        for bits in (0..=u32::MAX).step_by(65_521).chain(edges) {
            let f = f32::from_bits(bits);
            let want = half::bf16::from_f32(f);
            let got = bf16_from_f64(f64::from(f));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{bits:#x}"
            );
        }
    }

    /// The branch-free conversion packing uses gives `half`'s bits exactly,
    /// NaN payloads and signs included.
    #[test]
    fn bf16_bits_match_half() {
        let nans = [
            0x7f80_0001,
            0x7fc0_0000,
            0xffff_ffff,
            0x7fbf_0000,
            0xff80_1234,
        ];
        let specials = [0, 0x8000_0000, 0x7f80_0000, 0xff80_0000, 0x7f7f_ffff];
        for bits in (0..=u32::MAX).step_by(7_919).chain(nans).chain(specials) {
            let want = half::bf16::from_f32(f32::from_bits(bits)).to_bits();
            assert_eq!(bf16_bits(bits), want, "{bits:#x}");
        }
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        // 1 + 2^-8 is halfway between two bf16 values; the even one is 1.0.
        assert_eq!(quantize(DType::Bf16, 1.0 + 2f64.powi(-8)), 1.0);
        assert_eq!(quantize(DType::I8, 2.5), 2.0);
        assert_eq!(quantize(DType::I8, 3.5), 4.0);
        assert_eq!(quantize(DType::I8, 300.0), 127.0);
        assert_eq!(quantize(DType::I8, f64::NAN), 0.0);
        assert_eq!(E4M3.encode(1.0625), 0x38, "halfway rounds to even mantissa");
    }
}
