//! Selector patterns: each instruction's semantics as generated matching
//! code. `match_<id>` compares a tile operation with the instruction's one
//! assignment node by node, binding indices and operands through
//! `isa_specs::select::Binder`; `match_all` tries every instruction whose
//! assignment kind and outermost value node agree with the operation (a
//! cheap test before a binder is set up).
//! Deriving operand values and checking them is `isa_specs::select::finish`.

use crate::Ctx;
use crate::emit::{expr, is_real};
use isa_specs::SpanKey;
use isa_specs::model::*;
use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};

fn variant<T: std::fmt::Debug>(path: TokenStream, v: T) -> TokenStream {
    let name = format_ident!("{}", format!("{v:?}"));
    quote!(#path::#name)
}

struct Emitter<'a> {
    inst: &'a Instruction,
    next: usize,
}

impl Emitter<'_> {
    fn fresh(&mut self) -> Ident {
        self.next += 1;
        format_ident!("e{}", self.next)
    }

    fn dims(a: &Access) -> TokenStream {
        let dims = a.indices.iter().map(|ix| {
            let terms = ix.terms.iter().map(|(i, k)| {
                let i = i.index();
                quote!((#i, #k))
            });
            let offsets = ix.offsets.iter().map(|(o, k)| {
                let o = o.index();
                quote!((#o, #k))
            });
            let c = ix.constant;
            quote!((&[#(#terms),*], &[#(#offsets),*], #c))
        });
        quote!(&[#(#dims),*])
    }

    /// Statements that return `false` unless `var` (a `&TileExpr`) matches `e`.
    fn expr(&mut self, e: &SemExpr, var: &Ident) -> TokenStream {
        match e {
            SemExpr::Access(a) => {
                let x = self.fresh();
                let (op, dims) = (a.operand.index(), Self::dims(a));
                quote! {
                    let TileExpr::Access(#x) = #var else { return false };
                    if !b.access(#op, #dims, #x) { return false; }
                }
            }
            SemExpr::Index(i) => {
                let x = self.fresh();
                let i = i.index();
                quote! {
                    let TileExpr::Index(#x) = #var else { return false };
                    if !b.bind_index(#i, *#x) { return false; }
                }
            }
            SemExpr::Const(c) => {
                let x = self.fresh();
                let value = expr(c, Some(self.inst));
                let value = if is_real(c) {
                    value
                } else {
                    quote!((#value as f64))
                };
                quote! {
                    let TileExpr::Const(#x) = #var else { return false };
                    if !same_constant(*#x, #value) { return false; }
                }
            }
            SemExpr::Neg(a) => {
                let x = self.fresh();
                let inner = self.expr(a, &x);
                quote! {
                    let TileExpr::Neg(#x) = #var else { return false };
                    let #x: &TileExpr = #x;
                    #inner
                }
            }
            SemExpr::Binary(op, l, r) => {
                let (x, y) = (self.fresh(), self.fresh());
                let opv = variant(quote!(BinOp), op);
                let (li, ri) = (self.expr(l, &x), self.expr(r, &y));
                quote! {
                    let TileExpr::Binary(#opv, #x, #y) = #var else { return false };
                    let (#x, #y): (&TileExpr, &TileExpr) = (#x, #y);
                    #li
                    #ri
                }
            }
            SemExpr::Call(f, args) => {
                let xs = self.fresh();
                let fv = variant(quote!(Func), f);
                let names: Vec<Ident> = args.iter().map(|_| self.fresh()).collect();
                let inner: Vec<TokenStream> = args
                    .iter()
                    .zip(&names)
                    .map(|(a, n)| self.expr(a, n))
                    .collect();
                quote! {
                    let TileExpr::Call(#fv, #xs) = #var else { return false };
                    let [#(#names),*] = #xs.as_slice() else { return false };
                    #(#inner)*
                }
            }
            SemExpr::Cast(d, a) => {
                let x = self.fresh();
                let dv = variant(quote!(DType), d);
                let inner = self.expr(a, &x);
                quote! {
                    let TileExpr::Cast(#dv, #x) = #var else { return false };
                    let #x: &TileExpr = #x;
                    #inner
                }
            }
            SemExpr::Reduce(op, ids, body) => {
                let (is, x) = (self.fresh(), self.fresh());
                let ov = variant(quote!(ReduceOp), op);
                let ids = ids.iter().map(|i| i.index());
                let inner = self.expr(body, &x);
                quote! {
                    let TileExpr::Reduce(#ov, #is, #x) = #var else { return false };
                    if !b.reduce(&[#(#ids),*], #is) { return false; }
                    let #x: &TileExpr = #x;
                    #inner
                }
            }
        }
    }
}

/// The one assignment of an instruction, if it has exactly one.
fn single_assign(inst: &Instruction) -> Option<(&Access, AssignOp, &SemExpr)> {
    let mut assigns = inst.semantics.stmts.iter().filter_map(|s| match s {
        Stmt::Assign { target, op, value } => Some((target, *op, value)),
        Stmt::Action(_) => None,
    });
    let first = assigns.next()?;
    assigns.next().is_none().then_some(first)
}

/// A cheap test `match_all` makes before setting up a binder: the
/// assignment kind and the outermost node of the value (most instructions
/// fail here).
fn quick_test(inst: &Instruction) -> Option<TokenStream> {
    let (_, op, value) = single_assign(inst)?;
    let opv = variant(quote!(AssignOp), op);
    let top = match value {
        SemExpr::Access(_) => quote!(TileExpr::Access(_)),
        SemExpr::Index(_) => quote!(TileExpr::Index(_)),
        SemExpr::Const(_) => quote!(TileExpr::Const(_)),
        SemExpr::Neg(_) => quote!(TileExpr::Neg(_)),
        SemExpr::Binary(b, _, _) => {
            let bv = variant(quote!(BinOp), b);
            quote!(TileExpr::Binary(#bv, _, _))
        }
        SemExpr::Call(f, _) => {
            let fv = variant(quote!(Func), f);
            quote!(TileExpr::Call(#fv, _))
        }
        SemExpr::Cast(d, _) => {
            let dv = variant(quote!(DType), d);
            quote!(TileExpr::Cast(#dv, _))
        }
        SemExpr::Reduce(r, _, _) => {
            let rv = variant(quote!(ReduceOp), r);
            quote!(TileExpr::Reduce(#rv, _, _))
        }
    };
    Some(quote!(op.op == #opv && matches!(&op.value, #top)))
}

fn emit_matcher(ctx: &Ctx, i: usize) -> Option<TokenStream> {
    let inst = &ctx.machine.instructions[i];
    let (target, op, value) = single_assign(inst)?;
    let name = format_ident!("match_{}", i);
    let doc = format!(
        "`{}`: {} ({})",
        inst.name,
        crate::emit::doc_text(&crate::gen_docs::semantics_text(ctx.machine, inst)),
        ctx.cite(SpanKey::Inst(InstId::from_index(i)))
    );
    let opv = variant(quote!(AssignOp), op);
    let (top, dims) = (target.operand.index(), Emitter::dims(target));
    let mut em = Emitter { inst, next: 0 };
    let root = format_ident!("e0");
    let body = em.expr(value, &root);
    Some(quote! {
        #[doc = #doc]
        fn #name(m: &Machine, op: &TileOp, b: &mut Binder) -> bool {
            if op.op != #opv || !b.access(#top, #dims, &op.target) { return false; }
            let #root: &TileExpr = &op.value;
            #body
            true
        }
    })
}

/// `Machine -> syn::File` for `<target>_select.rs`.
pub fn generate(ctx: &Ctx) -> syn::File {
    let m = ctx.machine;
    let matchers: Vec<(usize, TokenStream)> = (0..m.instructions.len())
        .filter_map(|i| emit_matcher(ctx, i).map(|t| (i, t)))
        .collect();
    let tries = matchers.iter().map(|(i, _)| {
        let (name, id) = (
            format_ident!("match_{}", i),
            u32::try_from(*i).unwrap_or(u32::MAX),
        );
        let quick = quick_test(&m.instructions[*i]).unwrap_or(quote!(true));
        quote! {
            if #quick {
                let mut b = Binder::new(&m.instructions[#i]);
                if #name(m, op, &mut b) { out.push((InstId(#id), b)); }
            }
        }
    });
    let ones = matchers.iter().map(|(i, _)| {
        let name = format_ident!("match_{}", i);
        let quick = quick_test(&m.instructions[*i]).unwrap_or(quote!(true));
        quote! {
            #i => {
                let mut b = Binder::new(&m.instructions[#i]);
                (#quick && #name(m, op, &mut b)).then_some(b)
            }
        }
    });
    let fns = matchers.iter().map(|(_, t)| t);
    let count = matchers.len();
    let doc = format!(
        "Instructions of `{}` whose semantics match `op` ({count} of {} instructions have a pattern).",
        m.name,
        m.instructions.len()
    );
    syn::parse_quote! {
        use isa_specs::Machine;
        use isa_specs::model::{AssignOp, BinOp, DType, Func, InstId, ReduceOp};
        use isa_specs::select::{same_constant, Binder, TileExpr, TileOp};

        #[doc = #doc]
        pub fn match_all(m: &Machine, op: &TileOp) -> Vec<(InstId, Binder)> {
            let mut out = Vec::new();
            #(#tries)*
            out
        }

        /// Whether instruction `id`'s semantics match `op` (its bindings if so):
        /// [`match_all`] for one instruction.
        pub fn match_one(m: &Machine, id: InstId, op: &TileOp) -> Option<Binder> {
            match id.0 as usize {
                #(#ones)*
                _ => None,
            }
        }

        #(#fns)*
    }
}
