//! Coverage warnings: semantic operations the compiler will need that no instruction provides.

use super::Checker;
use crate::diag::{Code, Diagnostic};
use crate::model::*;
use crate::semantic_ops::{SemOp, classify};
use crate::source::Span;

pub(crate) fn check_coverage(c: &mut Checker, insts: &[Instruction], header: Span) {
    let ops: Vec<SemOp> = insts
        .iter()
        .flat_map(|i| classify(i, &c.regfiles))
        .collect();
    let has = |f: &dyn Fn(&SemOp) -> bool| ops.iter().any(f);
    let mut warn = |code: Code, msg: String, help: &str| {
        c.diags.push(
            Diagnostic::new(code, header, msg)
                .label("in this machine")
                .help(help),
        );
    };
    if !has(&|o| matches!(o, SemOp::MatMul { .. })) {
        warn(
            Code::NoMatmul,
            "no instruction computes a matrix multiply-accumulate".into(),
            "MatMul, Gemm, attention and convolutions will be decomposed into element-wise multiply and sum reductions, or cannot be compiled",
        );
    }
    if !has(&|o| matches!(o, SemOp::Func(Func::Exp))) {
        warn(
            Code::NoExp,
            "no instruction computes `exp`".into(),
            "softmax, sigmoid and GELU cannot be compiled for this machine",
        );
    }
    if !has(&|o| matches!(o, SemOp::Func(Func::Tanh | Func::Erf))) {
        warn(
            Code::NoTanh,
            "no instruction computes `tanh` or `erf`".into(),
            "GELU will be decomposed through `exp`, or cannot be compiled",
        );
    }
    if !has(&|o| matches!(o, SemOp::Reduce(ReduceOp::Max))) {
        warn(
            Code::NoMaxReduce,
            "no instruction computes a max reduction".into(),
            "softmax and max pooling cannot be compiled for this machine",
        );
    }
    if !has(&|o| matches!(o, SemOp::Reduce(ReduceOp::Sum))) {
        warn(
            Code::NoSumReduce,
            "no instruction computes a sum reduction".into(),
            "softmax and layer normalisation will use the matrix unit with a ones vector, or cannot be compiled",
        );
    }
    let cast = |from: &dyn Fn(DType) -> bool, to: &dyn Fn(DType) -> bool| {
        ops.iter()
            .any(|o| matches!(o, SemOp::Cast { from: f, to: t } if from(*f) && to(*t)))
    };
    let narrow_float = |d: DType| d.is_float() && d != DType::F32;
    let int8 = |d: DType| matches!(d, DType::I8 | DType::U8);
    let needed: [(&str, bool, &str); 4] = [
        (
            "f32 to a narrower float (bf16/f16/fp8)",
            cast(&|d| d == DType::F32, &narrow_float),
            "f32 model tensors cannot be fed to narrower arithmetic on chip",
        ),
        (
            "a narrower float to f32",
            cast(&narrow_float, &|d| d == DType::F32),
            "narrow results cannot be widened back to f32",
        ),
        (
            "a float to int8 (quantize)",
            cast(&DType::is_float, &int8),
            "QuantizeLinear cannot be compiled",
        ),
        (
            "an integer to a float (dequantize)",
            cast(&|d| !d.is_float(), &DType::is_float),
            "DequantizeLinear and integer matmul outputs cannot be compiled",
        ),
    ];
    let any_narrow = insts
        .iter()
        .any(|i| uses_dtype(i, &c.regfiles, &narrow_float));
    for (i, (what, present, consequence)) in needed.into_iter().enumerate() {
        // Float width conversions only matter when the machine computes in a narrow float at all.
        if !present && (i >= 2 || any_narrow) {
            warn(
                Code::NoCast,
                format!("no instruction casts {what}"),
                consequence,
            );
        }
    }
    for (ai, a) in c.memories.iter().enumerate() {
        for (bi, b) in c.memories.iter().enumerate() {
            if ai == bi || a.kind.off_chip() == b.kind.off_chip() {
                continue;
            }
            let (from, to) = (MemId::from_index(ai), MemId::from_index(bi));
            if !has(&|o| matches!(o, SemOp::Copy { from: f, to: t } if *f == from && *t == to)) {
                let msg = format!("no instruction copies from `{}` to `{}`", a.name, b.name);
                let help = "tensors cannot move between these memory levels; add a DMA instruction such as `dst[i, j] = src[i, j]`";
                warn(Code::NoCopy, msg, help);
            }
        }
    }
}

fn uses_dtype(inst: &Instruction, regfiles: &[RegFile], pred: &dyn Fn(DType) -> bool) -> bool {
    inst.operands.iter().any(|o| match &o.kind {
        OperandKind::Mem { dtype, .. } => pred(*dtype),
        OperandKind::Reg { file, .. } => regfiles.get(file.index()).is_some_and(|r| pred(r.dtype)),
        _ => false,
    })
}
