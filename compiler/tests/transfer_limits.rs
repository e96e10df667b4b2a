//! Every transfer instruction of every shipped target at the limits of its
//! width: a tensor whose rows are exactly as wide as one transfer takes,
//! one element narrower, and one wider (which must go in pieces, not be
//! refused for the instruction's range), moved to chip and back by a
//! `Relu`, matches the reference interpreter. A 1025-column row once
//! failed on pim-dram ("1025 is outside 1..=1024").

mod onnx_util;

use compiler::ir::{ElemType, Graph, Op, TensorType};
use isa_specs::model::{DType, Expr, OperandKind};

/// The widths (in f32 elements) at which some f32 transfer between the
/// home memory and chip stops taking a row in one piece: the upper bound
/// of an immediate that is a transfer's row length.
fn transfer_widths(m: &isa_specs::Machine) -> Vec<i64> {
    let info = compiler::lower::machine::Info::new(m).expect("the machine");
    let mut widths = Vec::new();
    for c in &info.copies {
        let home = |l: &compiler::lower::machine::Loc| {
            l.place == compiler::lower::machine::Place::Mem(info.home)
        };
        if !(home(&c.from) || home(&c.to)) || c.from.dtype != DType::F32 {
            continue;
        }
        let def = &m.instructions[c.inst.index()];
        let OperandKind::Mem { shape, .. } = &def.operands[c.src].kind else {
            continue;
        };
        if let Some(Expr::Operand(o)) = shape.last()
            && let OperandKind::Imm { hi, .. } = def.operands[o.index()].kind
            && hi <= 1 << 16
        {
            widths.push(hi);
        }
    }
    widths.sort_unstable();
    widths.dedup();
    widths
}

fn relu_of(rows: usize, cols: usize) -> Graph {
    let mut g = Graph::default();
    let ty = TensorType {
        elem: ElemType::F32,
        shape: vec![rows, cols],
    };
    let x = g.add_value("x", ty);
    g.inputs.push(x);
    let y = g.add_node("relu", Op::Relu, vec![x]).expect("typed")[0];
    g.outputs.push(y);
    g
}

#[test]
fn rows_as_wide_as_a_transfer_and_one_element_either_side() {
    let mut seen = 0;
    for t in targets::all() {
        let m = t.machine();
        for hi in transfer_widths(m) {
            for cols in [hi - 1, hi, hi + 1] {
                let g = relu_of(3, cols as usize);
                let inputs = compiler::run::random_inputs(&g, 2);
                let r = compiler::run::run(t, m, &g, &inputs, None).unwrap_or_else(|e| {
                    panic!("{}: rows of {cols} (a transfer takes {hi}): {e}", t.name())
                });
                assert!(
                    r.checks.iter().all(|c| c.ok),
                    "{}: rows of {cols}: {:?}",
                    t.name(),
                    r.checks
                );
                seen += 1;
            }
        }
    }
    assert!(seen > 0, "no transfer with a width limit was found");
}

/// A product of one row with two run-time operands (attention's context
/// against a cache of 1025 tokens): B is `[1025, 64]`, more than a
/// quarter of pim-dram's buffer, and was staged whole there (refused:
/// "address 0x40000 is outside `gbuf`").
#[test]
fn a_row_times_a_long_run_time_matrix() {
    let mut g = Graph::default();
    let ty = |shape: Vec<usize>| TensorType {
        elem: ElemType::F32,
        shape,
    };
    let a = g.add_value("a", ty(vec![1, 1025]));
    let b = g.add_value("b", ty(vec![1025, 64]));
    g.inputs.extend([a, b]);
    let y = g
        .add_node("context", Op::MatMul, vec![a, b])
        .expect("typed")[0];
    g.outputs.push(y);
    let ran = onnx_util::run_everywhere(&g, 4, "context", &[]);
    assert_eq!(ran.len(), targets::all().len());
}
