//! Assembly printer and parser, with the operand syntax of `isa_specs::target::asm`.

use crate::Ctx;
use crate::emit::{bind_field, bind_ident, field_ident, variant_idents};
use isa_specs::model::*;
use proc_macro2::TokenStream;
use quote::quote;

fn emit_print_arm(m: &Machine, inst: &Instruction, variant: &proc_macro2::Ident) -> TokenStream {
    let fields: Vec<_> = inst.operands.iter().map(|o| bind_field(&o.name)).collect();
    let binds: Vec<_> = inst.operands.iter().map(|o| bind_ident(&o.name)).collect();
    let mut fmt = inst.name.clone();
    let mut args = Vec::new();
    for (i, o) in inst.operands.iter().enumerate() {
        fmt.push_str(if i == 0 { " " } else { ", " });
        let f = &binds[i];
        match &o.kind {
            OperandKind::Reg { file, .. } => {
                fmt.push_str(&format!("{}{{}}", m.regfiles[file.index()].name));
                args.push(quote!(#f));
            }
            OperandKind::Sem { bank } => {
                fmt.push_str(&format!("{}{{}}", m.semaphores[bank.index()].name));
                args.push(quote!(#f));
            }
            OperandKind::Mem { .. } => {
                fmt.push_str("@{:#x}");
                args.push(quote!(#f));
            }
            OperandKind::Imm { .. } => {
                fmt.push_str("{}");
                args.push(quote!(#f));
            }
            OperandKind::ImmReal { .. } => {
                fmt.push_str("{}");
                args.push(quote!(asm::real_text(*#f)));
            }
        }
    }
    quote!(Inst::#variant { #(#fields),* } => format!(#fmt, #(#args),*))
}

fn emit_parse_arm(m: &Machine, inst: &Instruction, variant: &proc_macro2::Ident) -> TokenStream {
    let name = inst.name.as_str();
    let n = inst.operands.len();
    let fields = inst.operands.iter().enumerate().map(|(i, o)| {
        let f = field_ident(&o.name);
        let value = match &o.kind {
            OperandKind::Reg { file, .. } => {
                let rf = m.regfiles[file.index()].name.as_str();
                quote!(asm::reg(args[#i], #rf)?)
            }
            OperandKind::Sem { bank } => {
                let b = m.semaphores[bank.index()].name.as_str();
                quote!(asm::sem(args[#i], #b)?)
            }
            OperandKind::Mem { .. } => quote!(asm::addr(args[#i])?),
            OperandKind::Imm { .. } => quote!(asm::imm(args[#i])?),
            OperandKind::ImmReal { .. } => quote!(asm::real(args[#i])?),
        };
        quote!(#f: #value)
    });
    quote!(#name => {
        asm::arity(#name, &args, #n)?;
        Ok(Inst::#variant { #(#fields),* })
    })
}

/// `Machine -> syn::File` for `<target>_asm.rs`.
pub fn generate(ctx: &Ctx) -> syn::File {
    let m = ctx.machine;
    let variants = variant_idents(m);
    let prints = m
        .instructions
        .iter()
        .zip(&variants)
        .map(|(i, v)| emit_print_arm(m, i, v));
    let parses = m
        .instructions
        .iter()
        .zip(&variants)
        .map(|(i, v)| emit_parse_arm(m, i, v));
    syn::parse_quote! {
        use super::inst::{Inst, MNEMONICS};
        use isa_specs::target::asm::{self, AsmError};

        /// Assembly text of an instruction.
        pub fn print(inst: &Inst) -> String {
            match inst { #(#prints,)* }
        }

        /// Parses the assembly text of one instruction.
        pub fn parse(text: &str) -> Result<Inst, AsmError> {
            let (mnemonic, args) = asm::split(text);
            match mnemonic {
                #(#parses)*
                _ => Err(AsmError(asm::unknown_mnemonic(mnemonic, &MNEMONICS))),
            }
        }
    }
}
