//! The typed instruction enum: one variant per instruction, one field per operand.

use crate::Ctx;
use crate::emit::{
    bind_field, bind_ident, field_ident, field_type, op_pattern, op_value, variant_idents,
};
use isa_specs::SpanKey;
use isa_specs::model::InstId;
use quote::quote;

/// `Machine -> syn::File` for `<target>_inst.rs`.
pub fn generate(ctx: &Ctx) -> syn::File {
    let m = ctx.machine;
    let variants = variant_idents(m);
    let count = m.instructions.len();
    let defs = m.instructions.iter().enumerate().map(|(i, inst)| {
        let v = &variants[i];
        let cite = ctx.cite(SpanKey::Inst(InstId::from_index(i)));
        let doc = if inst.doc.is_empty() {
            format!("`{}` ({cite})", inst.name)
        } else {
            format!(
                "`{}`: {} ({cite})",
                inst.name,
                crate::emit::doc_text(&inst.doc)
            )
        };
        let fields = inst.operands.iter().map(|o| {
            let (f, t) = (field_ident(&o.name), field_type(&o.kind));
            quote!(#f: #t)
        });
        quote! { #[doc = #doc] #v { #(#fields),* } }
    });
    let bind = |i: usize| {
        let fields: Vec<_> = m.instructions[i]
            .operands
            .iter()
            .map(|o| bind_field(&o.name))
            .collect();
        let v = &variants[i];
        quote!(Inst::#v { #(#fields),* })
    };
    let id_arms = (0..count).map(|i| {
        let v = &variants[i];
        let id = u32::try_from(i).unwrap_or(u32::MAX);
        quote!(Inst::#v { .. } => InstId(#id))
    });
    let names = m.instructions.iter().map(|i| i.name.as_str());
    let to_arms = (0..count).map(|i| {
        let pat = bind(i);
        let id = u32::try_from(i).unwrap_or(u32::MAX);
        let vals = m.instructions[i]
            .operands
            .iter()
            .map(|o| op_value(&o.kind, &bind_ident(&o.name)));
        quote!(#pat => MInst { inst: InstId(#id), operands: vec![#(#vals),*] })
    });
    let from_arms = (0..count).map(|i| {
        let id = u32::try_from(i).unwrap_or(u32::MAX);
        let ops = &m.instructions[i].operands;
        let pats = ops
            .iter()
            .map(|o| op_pattern(&o.kind, &bind_ident(&o.name)));
        let v = &variants[i];
        let fields = ops.iter().map(|o| {
            let (f, b) = (field_ident(&o.name), bind_ident(&o.name));
            quote!(#f: *#b)
        });
        quote!((#id, [#(#pats),*]) => Some(Inst::#v { #(#fields),* }))
    });
    let doc = format!("The {count} instructions of `{}`.", m.name);
    syn::parse_quote! {
        use isa_specs::model::InstId;
        use isa_specs::target::{MInst, OpValue};

        #[doc = #doc]
        #[derive(Clone, Debug, PartialEq)]
        pub enum Inst {
            #(#defs,)*
        }

        /// Mnemonics, indexed by instruction id.
        pub const MNEMONICS: [&str; #count] = [#(#names),*];

        impl Inst {
            /// The instruction's id in the machine model.
            pub fn id(&self) -> InstId {
                match self { #(#id_arms,)* }
            }

            /// The mnemonic.
            pub fn mnemonic(&self) -> &'static str {
                MNEMONICS[self.id().index()]
            }

            /// The target-independent form.
            pub fn to_minst(&self) -> MInst {
                match self { #(#to_arms,)* }
            }

            /// From the target-independent form; `None` if the operands do not fit the instruction.
            pub fn from_minst(m: &MInst) -> Option<Inst> {
                match (m.inst.0, m.operands.as_slice()) {
                    #(#from_arms,)*
                    _ => None,
                }
            }
        }
    }
}
