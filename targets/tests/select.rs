//! Selection by semantics: for every instruction of every shipped target, the
//! tile operation its own semantics describe (on the tensors of a legal
//! instance) selects that very instance; changed operations do not.

mod common;

use common::{Rng, instance};
use isa_specs::Machine;
use isa_specs::eval::{self, WithOperands};
use isa_specs::model::*;
use isa_specs::select::{self, TileAccess, TileExpr, TileOp, TilePlace, TileTensor};
use isa_specs::target::{MInst, OpValue};

fn env<'a>(params: &'a [i64], imms: &'a [Option<i64>]) -> WithOperands<'a> {
    WithOperands {
        params,
        operands: imms,
    }
}

/// The tile operation an instruction instance performs, with tensor `i` standing for operand `i`.
fn tile_op(m: &Machine, inst: &MInst) -> Option<TileOp> {
    let def = &m.instructions[inst.inst.index()];
    let (target, op, value) = def.semantics.stmts.iter().find_map(|s| match s {
        Stmt::Assign { target, op, value } => Some((target, *op, value)),
        Stmt::Action(_) => None,
    })?;
    let params: Vec<i64> = m.params.iter().map(|p| p.value).collect();
    let imms: Vec<Option<i64>> = inst.operands.iter().map(|v| v.as_int()).collect();
    let e = env(&params, &imms);
    let dims = |d: &[Expr]| {
        d.iter()
            .map(|x| eval::eval_int(x, &e).expect("shape evaluates"))
            .collect::<Vec<i64>>()
    };
    let tensors = def
        .operands
        .iter()
        .zip(&inst.operands)
        .map(|(o, v)| match (&o.kind, v) {
            (OperandKind::Reg { file, shape }, OpValue::Reg(r)) => TileTensor {
                dtype: m.regfiles[file.index()].dtype,
                shape: dims(shape),
                place: TilePlace::Reg {
                    file: *file,
                    reg: *r,
                },
            },
            (
                OperandKind::Mem {
                    mem,
                    shape,
                    dtype,
                    stride,
                    ..
                },
                OpValue::Addr(a),
            ) => {
                let shape = dims(shape);
                let strides = stride
                    .as_ref()
                    .map_or_else(|| select::dense(&shape), |s| dims(s));
                TileTensor {
                    dtype: *dtype,
                    shape,
                    place: TilePlace::Mem {
                        mem: *mem,
                        addr: *a,
                        strides,
                    },
                }
            }
            (_, OpValue::Imm(v)) => TileTensor {
                dtype: DType::I32,
                shape: vec![],
                place: TilePlace::Imm(*v),
            },
            (_, OpValue::Real(x)) => TileTensor {
                dtype: DType::F32,
                shape: vec![],
                place: TilePlace::Real(*x),
            },
            _ => TileTensor {
                dtype: DType::I32,
                shape: vec![],
                place: TilePlace::Imm(0),
            },
        })
        .collect();
    let extents = def
        .semantics
        .indices
        .iter()
        .map(|ix| eval::eval_int(&ix.extent, &e).expect("extent evaluates"))
        .collect();
    // Immediate offsets in the pattern become the instance's constants in the operation.
    let access = |a: &Access| TileAccess {
        tensor: a.operand.index(),
        indices: a
            .indices
            .iter()
            .map(|ix| Affine {
                terms: ix.terms.clone(),
                constant: ix.constant
                    + ix.offsets
                        .iter()
                        .map(|(o, k)| k * imms[o.index()].unwrap_or(0))
                        .sum::<i64>(),
                offsets: Vec::new(),
            })
            .collect(),
    };
    fn expr(x: &SemExpr, e: &WithOperands<'_>, access: &dyn Fn(&Access) -> TileAccess) -> TileExpr {
        match x {
            SemExpr::Access(a) => TileExpr::Access(access(a)),
            SemExpr::Index(i) => TileExpr::Index(*i),
            SemExpr::Const(c) => {
                TileExpr::Const(eval::eval(c, e).expect("constant evaluates").as_f64())
            }
            SemExpr::Neg(a) => TileExpr::Neg(Box::new(expr(a, e, access))),
            SemExpr::Binary(op, a, b) => TileExpr::Binary(
                *op,
                Box::new(expr(a, e, access)),
                Box::new(expr(b, e, access)),
            ),
            SemExpr::Call(f, args) => {
                TileExpr::Call(*f, args.iter().map(|a| expr(a, e, access)).collect())
            }
            SemExpr::Cast(d, a) => TileExpr::Cast(*d, Box::new(expr(a, e, access))),
            SemExpr::Reduce(op, ids, body) => {
                TileExpr::Reduce(*op, ids.clone(), Box::new(expr(body, e, access)))
            }
        }
    }
    Some(TileOp {
        tensors,
        extents,
        target: access(target),
        op,
        value: expr(value, &e, &access),
    })
}

fn assignments(inst: &Instruction) -> usize {
    inst.semantics
        .stmts
        .iter()
        .filter(|s| matches!(s, Stmt::Assign { .. }))
        .count()
}

/// The operation with the strides of unit dimensions (which address nothing)
/// set to 0, and without the immediates that describe shapes and strides.
fn unit_strides_cleared(op: &select::TileOp) -> select::TileOp {
    let mut op = op.clone();
    for t in &mut op.tensors {
        if let select::TilePlace::Imm(v) = &mut t.place {
            *v = 0;
        }
        if let select::TilePlace::Mem { strides, .. } = &mut t.place {
            for (s, n) in strides.iter_mut().zip(&t.shape) {
                if *n == 1 {
                    *s = 0;
                }
            }
        }
    }
    op
}

/// Semaphores are allocated by the caller of `select`: compare without them.
fn without_sems(mut i: MInst) -> MInst {
    for v in &mut i.operands {
        if let OpValue::Sem(_) = v {
            *v = OpValue::Sem(0);
        }
    }
    i
}

/// Calls `f` with every shipped target, each of its instructions with one
/// assignment, a legal instance of it (from a generator seeded with `seed`
/// plus the instruction's index) and the tile operation that instance
/// performs. Returns how many it called `f` with.
fn for_each_own_operation(
    seed: u64,
    mut f: impl FnMut(&targets::Target, usize, &Instruction, MInst, TileOp),
) -> usize {
    let mut called = 0;
    for t in targets::all() {
        let m = t.machine();
        for (i, def) in m.instructions.iter().enumerate() {
            if assignments(def) != 1 {
                continue;
            }
            let Some(inst) = instance(&mut Rng(seed + i as u64), m, InstId::from_index(i)) else {
                continue;
            };
            let op = tile_op(m, &inst).expect("one assignment");
            f(t, i, def, inst, op);
            called += 1;
        }
    }
    called
}

#[test]
fn every_instruction_selects_itself() {
    let checked = for_each_own_operation(0x5E1EC7, |t, _, def, inst, op| {
        let (m, isa) = (t.machine(), t.isa());
        let found = select::select(isa, m, &op);
        let want = without_sems(inst);
        // An immediate that only sets the stride of a dimension of extent 1
        // is free: any instance computing the same operation will do.
        let same = |s: &select::Selected| {
            s.inst == want
                || (s.inst.inst == want.inst
                    && tile_op(m, &s.inst).map(|o| unit_strides_cleared(&o))
                        == Some(unit_strides_cleared(&op)))
        };
        assert!(
            found.iter().any(same),
            "{}: `{}` does not select itself for {op:?}; found {:?}",
            t.name(),
            def.name,
            found
                .iter()
                .map(|s| m.instructions[s.inst.inst.index()].name.as_str())
                .collect::<Vec<_>>()
        );
    });
    assert!(checked > 150, "only {checked} instructions checked");
}

#[test]
fn changed_operations_do_not_select_the_instruction() {
    let t = targets::by_name("vliw-systolic").expect("target");
    let (m, isa) = (t.machine(), t.isa());
    let id = m.instruction("vexp").expect("vliw-systolic has vexp");
    let inst = instance(&mut Rng(3), m, id).expect("instance");
    let op = tile_op(m, &inst).expect("op");
    assert!(
        select::select(isa, m, &op)
            .iter()
            .any(|s| s.inst.inst == id)
    );
    // tanh instead of exp: another instruction (vtanh) or none, never vexp.
    let mut tanh = op.clone();
    if let TileExpr::Call(f, _) = &mut tanh.value {
        *f = Func::Tanh;
    }
    assert!(
        select::select(isa, m, &tanh)
            .iter()
            .all(|s| s.inst.inst != id)
    );
    // A tensor in the wrong register file: no match.
    let mut wrong = op;
    if let TilePlace::Reg { file, .. } = &mut wrong.tensors[0].place {
        *file = RegFileId(file.0 + 1);
    }
    assert!(
        select::select(isa, m, &wrong)
            .iter()
            .all(|s| s.inst.inst != id)
    );
    // A matrix multiply of the MXU's shape selects an MXU instruction, cheapest first.
    let mm = m.instruction("mmul").expect("mmul");
    let mm_inst = instance(&mut Rng(5), m, mm).expect("instance");
    let mm_op = tile_op(m, &mm_inst).expect("op");
    let sel = select::select(isa, m, &mm_op);
    assert!(sel.iter().any(|s| s.inst.inst == mm), "{sel:?}");
    assert!(
        sel.windows(2)
            .all(|w| (w[0].occupancy, w[0].latency) <= (w[1].occupancy, w[1].latency))
    );
}

/// Matching one instruction (the generated `match_one`) finds exactly what
/// matching them all finds for that instruction, on every instruction's own
/// operation.
#[test]
fn matching_one_instruction_agrees_with_matching_all() {
    let mut checked = 0;
    for_each_own_operation(0xA11, |t, i, def, _, op| {
        let (m, isa) = (t.machine(), t.isa());
        let all = isa.match_op(m, &op);
        assert!(all.iter().any(|(id, _)| id.index() == i));
        for j in 0..m.instructions.len() {
            let id = InstId::from_index(j);
            let one = isa.match_inst(m, id, &op).map(|b| format!("{b:?}"));
            let want = all
                .iter()
                .find(|(k, _)| *k == id)
                .map(|(_, b)| format!("{b:?}"));
            assert_eq!(
                one,
                want,
                "{}: `{}` on `{}`'s operation",
                t.name(),
                m.instructions[j].name,
                def.name
            );
            checked += 1;
        }
    });
    assert!(checked > 1000, "only {checked} pairs checked");
}

/// Finishing through a [`select::FinishCache`] gives what [`select::finish`]
/// gives, on every instruction's own operation and on variants of it that
/// the cache keys alike (other registers and addresses, which may not fit)
/// or apart (another register file), with one cache per target serving all.
#[test]
fn finishing_through_the_cache_agrees_with_finishing_afresh() {
    let mut caches: std::collections::HashMap<String, select::FinishCache> = Default::default();
    let mut checked = 0;
    for seed in [0xF1, 0xF2] {
        for_each_own_operation(seed, |t, _, _, _, op| {
            let (m, isa) = (t.machine(), t.isa());
            let cache = caches.entry(t.name().to_owned()).or_default();
            let moved = |dreg: u32, daddr: u64, dfile: u32| {
                let mut o = op.clone();
                for tensor in &mut o.tensors {
                    match &mut tensor.place {
                        TilePlace::Reg { file, reg } => {
                            *reg += dreg;
                            file.0 += dfile;
                        }
                        TilePlace::Mem { addr, .. } => *addr += daddr,
                        _ => {}
                    }
                }
                o
            };
            for variant in [
                op.clone(),
                moved(1, 64, 0),
                moved(1000, 3, 0),
                moved(0, 0, 1),
            ] {
                for (id, b) in isa.match_op(m, &variant) {
                    assert_eq!(
                        cache.finish(m, id, &b, &variant),
                        select::finish(m, id, &b, &variant),
                        "{}: `{}` on {variant:?}",
                        t.name(),
                        m.instructions[id.index()].name
                    );
                    checked += 1;
                }
            }
        });
    }
    assert!(checked > 1000, "only {checked} finishes checked");
}
