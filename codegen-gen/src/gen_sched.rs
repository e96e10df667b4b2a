//! Scheduling tables: each instruction's unit, slots, occupancy, latency and
//! energy, as functions of its operands and the parameters in force.

use crate::Ctx;
use crate::emit::{bind_field, expr, is_real, variant_idents};
use isa_specs::model::*;
use proc_macro2::TokenStream;
use quote::quote;

/// Operands an expression reads.
fn operands_in(e: &Expr, out: &mut Vec<OperandId>) {
    match e {
        Expr::Operand(o) => {
            if !out.contains(o) {
                out.push(*o);
            }
        }
        Expr::Neg(a) => operands_in(a, out),
        Expr::Binary(_, a, b) => {
            operands_in(a, out);
            operands_in(b, out);
        }
        Expr::Call(_, args) => args.iter().for_each(|a| operands_in(a, out)),
        Expr::Int(_) | Expr::Real(_) | Expr::Param(_) => {}
    }
}

/// A match arm binding just the operands `e` reads, then evaluating it as `i64` or `f64`.
fn emit_arm(inst: &Instruction, variant: &proc_macro2::Ident, e: &Expr, real: bool) -> TokenStream {
    let mut used = Vec::new();
    operands_in(e, &mut used);
    let fields = used
        .iter()
        .map(|o| bind_field(&inst.operands[o.index()].name));
    let body = expr(e, Some(inst));
    let body = match (real, is_real(e)) {
        (true, false) => quote!((#body) as f64),
        _ => body,
    };
    quote!(Inst::#variant { #(#fields,)* .. } => #body)
}

/// `Machine -> syn::File` for `<target>_sched.rs`.
pub fn generate(ctx: &Ctx) -> syn::File {
    let m = ctx.machine;
    let variants = variant_idents(m);
    let n = m.instructions.len();
    let units = m.instructions.iter().map(|i| {
        let u = i.timing.unit.0;
        quote!(UnitId(#u))
    });
    let slots = m.instructions.iter().map(|i| {
        let s = i.timing.slots.iter().map(|s| {
            let s = s.0;
            quote!(SlotId(#s))
        });
        quote!(&[#(#s),*])
    });
    let arms = |f: &dyn Fn(&Instruction) -> &Expr, real: bool| -> Vec<TokenStream> {
        m.instructions
            .iter()
            .zip(&variants)
            .map(|(i, v)| emit_arm(i, v, f(i), real))
            .collect()
    };
    let lat = arms(&|i| &i.timing.latency, false);
    let occ = arms(&|i| &i.timing.occupancy, false);
    let zero = Expr::Int(0);
    let acc: Vec<TokenStream> = m
        .instructions
        .iter()
        .zip(&variants)
        .map(|(i, v)| emit_arm(i, v, i.timing.accumulate.as_ref().unwrap_or(&zero), false))
        .collect();
    let energy = arms(&|i| &i.energy, true);
    syn::parse_quote! {
        use super::inst::Inst;
        use isa_specs::Machine;
        use isa_specs::model::{SlotId, UnitId};
        use isa_specs::target::rt;

        /// The unit each instruction occupies, by instruction id.
        pub const UNIT: [UnitId; #n] = [#(#units),*];

        /// The slots each instruction may issue from, by instruction id.
        pub const SLOTS: [&[SlotId]; #n] = [#(#slots),*];

        /// Cycles from issue until the results are visible (for asynchronous units: until completion).
        pub fn latency(m: &Machine, inst: &Inst) -> i64 {
            match inst { #(#lat,)* }
        }

        /// Cycles the unit is busy before it accepts the next operation.
        pub fn occupancy(m: &Machine, inst: &Inst) -> i64 {
            match inst { #(#occ,)* }
        }

        /// Cycles after issue from which another accumulating instruction
        /// may accumulate into the register this one writes (0: no forwarding).
        pub fn accumulate(m: &Machine, inst: &Inst) -> i64 {
            match inst { #(#acc,)* }
        }

        /// Dynamic energy of one execution, in pJ.
        pub fn energy(m: &Machine, inst: &Inst) -> f64 {
            match inst { #(#energy,)* }
        }

        /// What an instruction reserves: its unit, for `occupancy` cycles.
        pub fn reservation(m: &Machine, inst: &Inst) -> (UnitId, i64) {
            (UNIT[inst.id().index()], occupancy(m, inst))
        }
    }
}
