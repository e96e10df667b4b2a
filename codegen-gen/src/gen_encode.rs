//! Encoder and decoder: instructions to slot bits and back, bit-exact per the formats.

use crate::Ctx;
use crate::emit::{bind_field, bind_ident, field_ident, variant_idents};
use isa_specs::model::*;
use isa_specs::target::bits;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

/// The field holding operand `index` of an instruction.
fn operand_field<'a>(format: &'a Format, enc: &Encoding, index: usize) -> Option<&'a FieldDef> {
    enc.fields
        .iter()
        .find(|f| f.source == FieldSource::Operand(OperandId::from_index(index)))
        .and_then(|f| format.fields.get(f.field))
}

/// `(word, mask, value)` of the fixed bits of an encoding.
fn fixed_words(format: &Format, enc: &Encoding) -> Vec<(usize, u64, u64)> {
    let n = bits::words(format.width);
    let (mut mask, mut value) = (vec![0u64; n], vec![0u64; n]);
    for fv in &enc.fields {
        if let (FieldSource::Const(v), Some(f)) = (&fv.source, format.fields.get(fv.field)) {
            bits::put(&mut mask, f.lo, f.width(), u64::MAX);
            bits::put(&mut value, f.lo, f.width(), *v);
        }
    }
    (0..n)
        .filter(|i| mask[*i] != 0)
        .map(|i| (i, mask[i], value[i]))
        .collect()
}

fn emit_encode_arm(m: &Machine, i: usize, variant: &proc_macro2::Ident) -> TokenStream {
    let inst = &m.instructions[i];
    let format = &m.formats[inst.encoding.format.index()];
    let fields: Vec<_> = inst.operands.iter().map(|o| bind_field(&o.name)).collect();
    let consts = inst.encoding.fields.iter().filter_map(|fv| {
        let FieldSource::Const(v) = fv.source else {
            return None;
        };
        let f = format.fields.get(fv.field)?;
        let (lo, w) = (f.lo, f.width());
        Some(quote!(bits::put(w, #lo, #w, #v);))
    });
    let ops = inst.operands.iter().enumerate().filter_map(|(oi, o)| {
        let f = operand_field(format, &inst.encoding, oi)?;
        let (lo, w) = (f.lo, f.width());
        let value = crate::emit::op_value(&o.kind, &bind_ident(&o.name));
        Some(quote!(bits::put(w, #lo, #w, fit(def, #oi, operand_to_field(m, def, #oi, #value)?, #w)?);))
    });
    let def = (!inst.operands.is_empty()).then(|| quote!(let def = &m.instructions[#i];));
    quote! {
        Inst::#variant { #(#fields),* } => {
            #def
            #(#consts)*
            #(#ops)*
        }
    }
}

fn emit_decoder(m: &Machine, i: usize, variant: &proc_macro2::Ident) -> TokenStream {
    let inst = &m.instructions[i];
    let format = &m.formats[inst.encoding.format.index()];
    let name = format_ident!("decode_{}", i);
    let doc = format!("Decodes `{}` from its slot bits.", inst.name);
    let fields = inst.operands.iter().enumerate().map(|(oi, o)| {
        let id = field_ident(&o.name);
        let Some(f) = operand_field(format, &inst.encoding, oi) else {
            return quote!(#id: Default::default());
        };
        let (lo, w) = (f.lo, f.width());
        let getter = match o.kind {
            OperandKind::Reg { .. } => quote!(field::reg),
            OperandKind::Mem { .. } => quote!(field::addr),
            OperandKind::Imm { .. } => quote!(field::imm),
            OperandKind::ImmReal { .. } => quote!(field::real),
            OperandKind::Sem { .. } => quote!(field::sem),
        };
        quote!(#id: #getter(m, def, #oi, bits::get(w, #lo, #w), #w)?)
    });
    let (def, params) = if inst.operands.is_empty() {
        (None, quote!(_m: &Machine, _w: &[u64]))
    } else {
        (
            Some(quote!(let def = &m.instructions[#i];)),
            quote!(m: &Machine, w: &[u64]),
        )
    };
    quote! {
        #[doc = #doc]
        fn #name(#params) -> Result<Inst, DecodeError> {
            #def
            Ok(Inst::#variant { #(#fields),* })
        }
    }
}

fn emit_slot_arm(m: &Machine, slot: usize) -> TokenStream {
    let sid = u32::try_from(slot).unwrap_or(u32::MAX);
    let tries = m
        .instructions
        .iter()
        .enumerate()
        .filter(|(_, inst)| inst.timing.slots.contains(&SlotId(sid)))
        .map(|(i, inst)| {
            let format = &m.formats[inst.encoding.format.index()];
            let conds: Vec<TokenStream> = fixed_words(format, &inst.encoding)
                .into_iter()
                .map(|(wi, mask, value)| quote!(w.get(#wi).map_or(0, |x| x & #mask) == #value))
                .collect();
            let dec = format_ident!("decode_{}", i);
            let cond = if conds.is_empty() {
                quote!(true)
            } else {
                quote!(#(#conds)&&*)
            };
            quote! { if #cond { return #dec(m, w).map(Some); } }
        });
    quote!(#sid => { #(#tries)* })
}

/// `Machine -> syn::File` for `<target>_encode.rs`.
pub fn generate(ctx: &Ctx) -> syn::File {
    let m = ctx.machine;
    let variants = variant_idents(m);
    let enc_arms = (0..m.instructions.len()).map(|i| emit_encode_arm(m, i, &variants[i]));
    let decoders = (0..m.instructions.len()).map(|i| emit_decoder(m, i, &variants[i]));
    let slot_arms = (0..m.slots.len()).map(|s| emit_slot_arm(m, s));
    let widths = m.slots.iter().map(Slot::width);
    let nslots = m.slots.len();
    syn::parse_quote! {
        use super::inst::Inst;
        use isa_specs::Machine;
        use isa_specs::model::SlotId;
        use isa_specs::target::{bits, field, fit, operand_to_field, DecodeError, EncodeError, OpValue};

        /// Width of each slot in bits, by slot id.
        pub const SLOT_WIDTHS: [u32; #nslots] = [#(#widths),*];

        /// Encodes one instruction into its slot bits (`w` holds the slot's width, bit 0 first).
        pub fn encode(m: &Machine, inst: &Inst, w: &mut [u64]) -> Result<(), EncodeError> {
            match inst { #(#enc_arms)* }
            Ok(())
        }

        /// Decodes a slot's bits: `None` for the empty slot, an error for bits no instruction of the slot has.
        pub fn decode(m: &Machine, slot: SlotId, w: &[u64]) -> Result<Option<Inst>, DecodeError> {
            if bits::is_zero(w) {
                return Ok(None);
            }
            match slot.0 {
                #(#slot_arms)*
                _ => {}
            }
            let width = SLOT_WIDTHS.get(slot.index()).copied().unwrap_or(64);
            Err(DecodeError::Illegal {
                slot: m.slots.get(slot.index()).map_or_else(|| format!("#{}", slot.0), |s| s.name.clone()),
                bits: bits::hex(w, width),
            })
        }

        #(#decoders)*
    }
}
