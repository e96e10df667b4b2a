//! Contraction instructions found by their semantics (`d = Σ a · b`, with
//! casts), the roles of their indices, and the tile operations they compute.

use super::*;

/// What an index of a contraction instruction stands for in `C[m, n] = Σ_k A[m, k] B[k, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A row of the result.
    M,
    /// A column of the result.
    N,
    /// The reduction.
    K,
}

/// A contraction instruction: `T (=|+=) [sum(k)] cast(X) * cast(Y)` with its roles.
#[derive(Clone, Debug, PartialEq)]
pub struct Contraction {
    /// The instruction.
    pub inst: InstId,
    /// Whether it overwrites the result (`=`) or accumulates (`+=`).
    pub set: bool,
    /// Operands of the result, `A` and `B`.
    pub t: usize,
    /// Operand playing `A`.
    pub a: usize,
    /// Operand playing `B`.
    pub b: usize,
    /// The role of each pattern index.
    pub roles: Vec<Role>,
    /// Dimension roles of the result, `A` and `B`, in access order.
    pub t_dims: Vec<Role>,
    /// `A`'s.
    pub a_dims: Vec<Role>,
    /// `B`'s.
    pub b_dims: Vec<Role>,
}

pub fn cast_access(e: &SemExpr) -> Option<&isa_specs::model::Access> {
    match e {
        SemExpr::Access(a) => Some(a),
        SemExpr::Cast(_, inner) => cast_access(inner),
        _ => None,
    }
}

pub fn plain(a: &isa_specs::model::Access) -> Option<Vec<usize>> {
    a.indices
        .iter()
        .map(
            |x| match (x.terms.as_slice(), x.constant, x.offsets.is_empty()) {
                ([(i, 1)], 0, true) => Some(i.index()),
                _ => None,
            },
        )
        .collect()
}

/// Strides a memory operand requires when they depend on parameters only.
pub fn fixed_strides(e: &Emitter, stride: Option<&[isa_specs::model::Expr]>) -> Option<Vec<i64>> {
    let params: Vec<i64> = e.m.params.iter().map(|q| q.value).collect();
    stride?
        .iter()
        .map(|x| isa_specs::eval::eval_int(x, &isa_specs::eval::Params(&params)).ok())
        .collect()
}

/// Every floating-point contraction instruction of the machine, with its roles.
pub fn contractions(e: &Emitter) -> Vec<Contraction> {
    let mut out = Vec::new();
    for (ii, def) in e.m.instructions.iter().enumerate() {
        let id = InstId(ii as u32);
        let Some((target, op, value)) = crate::lower::emit::single_assign(e.m, id) else {
            continue;
        };
        let float = [target.operand.index()]
            .iter()
            .chain(
                def.operands
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| {
                        matches!(o.kind, OperandKind::Reg { .. } | OperandKind::Mem { .. })
                    })
                    .map(|(i, _)| i)
                    .collect::<Vec<_>>()
                    .iter(),
            )
            .all(|&oi| operand_loc(e.m, id, oi).is_none_or(|l| l.dtype.is_float()));
        if !float {
            continue;
        }
        let (body, reduced) = match value {
            SemExpr::Reduce(ReduceOp::Sum, ks, body) => {
                (body.as_ref(), ks.iter().map(|k| k.index()).collect())
            }
            other => (other, Vec::new()),
        };
        let set = match op {
            AssignOp::Set if !reduced.is_empty() => true,
            AssignOp::Add => false,
            _ => continue,
        };
        let SemExpr::Binary(BinOp::Mul, x, y) = body else {
            continue;
        };
        let (Some(xa), Some(ya)) = (cast_access(x), cast_access(y)) else {
            continue;
        };
        let (Some(tl), Some(xl), Some(yl)) = (plain(target), plain(xa), plain(ya)) else {
            continue;
        };
        let ks: Vec<usize> = xl
            .iter()
            .copied()
            .filter(|i| yl.contains(i) && !tl.contains(i))
            .collect();
        let [k] = ks.as_slice() else { continue };
        if !reduced.is_empty() && reduced != vec![*k] {
            continue;
        }
        for (a_op, al, b_op, bl) in [(xa, &xl, ya, &yl), (ya, &yl, xa, &xl)] {
            let n_idx = def.semantics.indices.len();
            let mut roles = vec![None; n_idx];
            roles[*k] = Some(Role::K);
            let mut ok = true;
            for &i in al.iter().filter(|i| **i != *k) {
                ok &= roles[i].is_none() && tl.contains(&i);
                roles[i] = Some(Role::M);
            }
            for &i in bl.iter().filter(|i| **i != *k) {
                ok &= roles[i].is_none() && tl.contains(&i);
                roles[i] = Some(Role::N);
            }
            ok &= tl.iter().all(|i| roles[*i].is_some())
                && al.len() <= 2
                && bl.len() <= 2
                && tl.len() <= 2;
            let Some(roles) = roles
                .into_iter()
                .collect::<Option<Vec<Role>>>()
                .filter(|_| ok)
            else {
                continue;
            };
            let dims = |l: &[usize]| l.iter().map(|i| roles[*i]).collect::<Vec<_>>();
            let t_dims = dims(&tl);
            if t_dims == [Role::N, Role::M] {
                continue;
            }
            out.push(Contraction {
                inst: id,
                set,
                t: target.operand.index(),
                a: a_op.operand.index(),
                b: b_op.operand.index(),
                t_dims,
                a_dims: dims(al),
                b_dims: dims(bl),
                roles,
            });
        }
    }
    out
}

impl Contraction {
    /// Extent of a role in a tile of `(m, n, k)`.
    fn extent(r: Role, (m, n, k): (i64, i64, i64)) -> i64 {
        match r {
            Role::M => m,
            Role::N => n,
            Role::K => k,
        }
    }

    /// Shape of an operand with dimension roles `dims`.
    pub fn shape(dims: &[Role], mnk: (i64, i64, i64)) -> Vec<i64> {
        dims.iter().map(|r| Self::extent(*r, mnk)).collect()
    }

    /// Whether the instruction has an M (resp. N) index: otherwise its tile has one row (column).
    pub fn has(&self, r: Role) -> bool {
        self.roles.contains(&r)
    }

    /// The tile operation for tensors `[T, A, B]` of tile size `mnk`.
    pub fn op(
        &self,
        e: &Emitter,
        tensors: Vec<TileTensor>,
        mnk: (i64, i64, i64),
    ) -> Option<TileOp> {
        let (target, op, value) = crate::lower::emit::single_assign(e.m, self.inst)?;
        let map = |o: usize| {
            if o == self.t {
                Some(0)
            } else if o == self.a {
                Some(1)
            } else if o == self.b {
                Some(2)
            } else {
                None
            }
        };
        let acc = |a: &isa_specs::model::Access| -> Option<TileAccess> {
            Some(TileAccess {
                tensor: map(a.operand.index())?,
                indices: a.indices.clone(),
            })
        };
        let params: Vec<i64> = e.m.params.iter().map(|p| p.value).collect();
        fn tr(
            e: &SemExpr,
            acc: &dyn Fn(&isa_specs::model::Access) -> Option<TileAccess>,
            params: &[i64],
        ) -> Option<TileExpr> {
            Some(match e {
                SemExpr::Access(a) => TileExpr::Access(acc(a)?),
                SemExpr::Const(c) => TileExpr::Const(
                    isa_specs::eval::eval(c, &isa_specs::eval::Params(params))
                        .ok()?
                        .as_f64(),
                ),
                SemExpr::Cast(dt, x) => TileExpr::Cast(*dt, Box::new(tr(x, acc, params)?)),
                SemExpr::Binary(o, a, b) => TileExpr::Binary(
                    *o,
                    Box::new(tr(a, acc, params)?),
                    Box::new(tr(b, acc, params)?),
                ),
                SemExpr::Reduce(r, ks, b) => {
                    TileExpr::Reduce(*r, ks.clone(), Box::new(tr(b, acc, params)?))
                }
                _ => return None,
            })
        }
        Some(TileOp {
            tensors,
            extents: self.roles.iter().map(|r| Self::extent(*r, mnk)).collect(),
            target: acc(target)?,
            op,
            value: tr(value, &acc, &params)?,
        })
    }

    /// Where the result, `A` and `B` must be.
    pub fn locs(&self, e: &Emitter) -> Option<[Loc; 3]> {
        Some([
            operand_loc(e.m, self.inst, self.t)?,
            operand_loc(e.m, self.inst, self.a)?,
            operand_loc(e.m, self.inst, self.b)?,
        ])
    }

    /// Placeholder tensors at the operands' places, for trying tile sizes.
    pub fn probe(&self, e: &Emitter, mnk: (i64, i64, i64)) -> Option<TileOp> {
        let locs = self.locs(e)?;
        let dims = [&self.t_dims, &self.a_dims, &self.b_dims];
        let ops = [self.t, self.a, self.b];
        let tensors = (0..3)
            .map(|i| {
                let shape = Self::shape(dims[i], mnk);
                let place = match (
                    &e.m.instructions[self.inst.index()].operands[ops[i]].kind,
                    locs[i].place,
                ) {
                    (OperandKind::Mem { stride, .. }, Place::Mem(mem)) => TilePlace::Mem {
                        mem,
                        addr: 0,
                        strides: fixed_strides(e, stride.as_deref())
                            .unwrap_or_else(|| isa_specs::select::dense(&shape)),
                    },
                    (_, Place::Reg(file)) => TilePlace::Reg { file, reg: 0 },
                    _ => TilePlace::Imm(0),
                };
                TileTensor {
                    dtype: locs[i].dtype,
                    shape,
                    place,
                }
            })
            .collect();
        self.op(e, tensors, mnk)
    }
}
