//! Small `emit_*` helpers shared by the generators: names, operand types, and
//! model expressions as Rust expressions.

use isa_specs::model::*;
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

/// `vmax_r` -> `VmaxR`.
pub fn variant_name(mnemonic: &str) -> String {
    mnemonic
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut cs = p.chars();
            cs.next()
                .map(|c| c.to_ascii_uppercase().to_string() + cs.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Variant identifiers of every instruction, made unique if two mnemonics camel-case alike.
pub fn variant_idents(m: &Machine) -> Vec<Ident> {
    let mut seen = std::collections::HashSet::new();
    m.instructions
        .iter()
        .enumerate()
        .map(|(i, inst)| {
            let mut name = variant_name(&inst.name);
            if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
                name = format!("I{name}");
            }
            if !seen.insert(name.clone()) {
                name = format!("{name}{i}");
                seen.insert(name.clone());
            }
            Ident::new(&name, Span::call_site())
        })
        .collect()
}

const RESERVED: &[&str] = &["self", "Self", "super", "crate", "_"];
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "do", "dyn", "else", "enum",
    "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "macro",
    "match", "mod", "move", "mut", "override", "priv", "pub", "ref", "return", "static", "struct",
    "trait", "true", "try", "type", "typeof", "unsafe", "unsized", "use", "virtual", "where",
    "while", "yield", "abstract", "become",
];

/// A field identifier for an operand name (raw for keywords).
pub fn field_ident(name: &str) -> Ident {
    if RESERVED.contains(&name) {
        format_ident!("op_{}", name)
    } else if KEYWORDS.contains(&name) {
        Ident::new_raw(name, Span::call_site())
    } else {
        Ident::new(name, Span::call_site())
    }
}

/// The local variable an operand field is bound to in generated code (`f_<name>`),
/// so operand names never shadow the generated code's own variables.
pub fn bind_ident(name: &str) -> Ident {
    format_ident!("f_{}", name)
}

/// `field: binding` for a struct pattern.
pub fn bind_field(name: &str) -> TokenStream {
    let (f, b) = (field_ident(name), bind_ident(name));
    quote!(#f: #b)
}

/// The Rust type of an operand field.
pub fn field_type(kind: &OperandKind) -> TokenStream {
    match kind {
        OperandKind::Reg { .. } | OperandKind::Sem { .. } => quote!(u32),
        OperandKind::Mem { .. } => quote!(u64),
        OperandKind::Imm { .. } => quote!(i64),
        OperandKind::ImmReal { .. } => quote!(f32),
    }
}

/// `OpValue::Reg(*d)` and friends, for a bound field `name`.
pub fn op_value(kind: &OperandKind, name: &Ident) -> TokenStream {
    match kind {
        OperandKind::Reg { .. } => quote!(OpValue::Reg(*#name)),
        OperandKind::Mem { .. } => quote!(OpValue::Addr(*#name)),
        OperandKind::Imm { .. } => quote!(OpValue::Imm(*#name)),
        OperandKind::ImmReal { .. } => quote!(OpValue::Real(*#name)),
        OperandKind::Sem { .. } => quote!(OpValue::Sem(*#name)),
    }
}

/// The pattern `OpValue::Reg(d)` matching an operand value.
pub fn op_pattern(kind: &OperandKind, name: &Ident) -> TokenStream {
    match kind {
        OperandKind::Reg { .. } => quote!(OpValue::Reg(#name)),
        OperandKind::Mem { .. } => quote!(OpValue::Addr(#name)),
        OperandKind::Imm { .. } => quote!(OpValue::Imm(#name)),
        OperandKind::ImmReal { .. } => quote!(OpValue::Real(#name)),
        OperandKind::Sem { .. } => quote!(OpValue::Sem(#name)),
    }
}

/// Whether an expression evaluates to a real (any real literal makes the operation it is in real).
pub fn is_real(e: &Expr) -> bool {
    match e {
        Expr::Real(_) => true,
        Expr::Int(_) | Expr::Param(_) | Expr::Operand(_) => false,
        Expr::Neg(a) => is_real(a),
        Expr::Binary(_, a, b) => is_real(a) || is_real(b),
        Expr::Call(_, args) => args.iter().any(is_real),
    }
}

/// A model expression as Rust. Parameters read `m.params[i].value` (so
/// parameters stay run-time values); immediates read the bound field of the
/// same name. The result is `i64`, or `f64` when [`is_real`].
pub fn expr(e: &Expr, inst: Option<&Instruction>) -> TokenStream {
    match e {
        Expr::Int(v) => quote!(#v),
        Expr::Real(v) => {
            let lit = proc_macro2::Literal::f64_suffixed(*v);
            quote!(#lit)
        }
        Expr::Param(p) => {
            let i = p.index();
            quote!(m.params[#i].value)
        }
        Expr::Operand(o) => {
            let name = inst
                .and_then(|i| i.operands.get(o.index()))
                .map_or_else(|| "missing".to_owned(), |op| op.name.clone());
            let id = bind_ident(&name);
            quote!((*#id))
        }
        Expr::Neg(a) => {
            let x = expr(a, inst);
            if is_real(a) {
                quote!((-#x))
            } else {
                quote!(#x.wrapping_neg())
            }
        }
        Expr::Binary(op, a, b) => binary(*op, a, b, inst),
        Expr::Call(f, args) => call(*f, args, inst),
    }
}

fn as_real(e: &Expr, inst: Option<&Instruction>) -> TokenStream {
    let x = expr(e, inst);
    if is_real(e) { x } else { quote!((#x as f64)) }
}

fn binary(op: BinOp, a: &Expr, b: &Expr, inst: Option<&Instruction>) -> TokenStream {
    if is_real(a) || is_real(b) {
        let (x, y) = (as_real(a, inst), as_real(b, inst));
        return match op {
            BinOp::Add => quote!((#x + #y)),
            BinOp::Sub => quote!((#x - #y)),
            BinOp::Mul => quote!((#x * #y)),
            BinOp::Div => quote!(rt::fdiv(#x, #y)),
            BinOp::Rem => quote!(rt::frem(#x, #y)),
        };
    }
    let (x, y) = (expr(a, inst), expr(b, inst));
    match op {
        BinOp::Add => quote!(#x.wrapping_add(#y)),
        BinOp::Sub => quote!(#x.wrapping_sub(#y)),
        BinOp::Mul => quote!(#x.wrapping_mul(#y)),
        BinOp::Div => quote!(rt::div(#x, #y)),
        BinOp::Rem => quote!(rt::rem(#x, #y)),
    }
}

fn call(f: Builtin, args: &[Expr], inst: Option<&Instruction>) -> TokenStream {
    let real = args.iter().any(is_real);
    let a: Vec<TokenStream> = if real {
        args.iter().map(|x| as_real(x, inst)).collect()
    } else {
        args.iter().map(|x| expr(x, inst)).collect()
    };
    match f {
        Builtin::Min if real => fold(&a, quote!(f64::min)),
        Builtin::Max if real => fold(&a, quote!(f64::max)),
        Builtin::Min => fold(&a, quote!(i64::min)),
        Builtin::Max => fold(&a, quote!(i64::max)),
        Builtin::CeilDiv => {
            let (x, y) = (&a[0], &a[1]);
            quote!(rt::ceil_div(#x, #y))
        }
        Builtin::AlignUp => {
            let (x, y) = (&a[0], &a[1]);
            quote!(rt::align_up(#x, #y))
        }
        Builtin::Log2 => {
            let x = &a[0];
            quote!(rt::log2(#x))
        }
        Builtin::Pow2 => {
            let x = &a[0];
            quote!(rt::pow2(#x))
        }
        Builtin::Pick => {
            // The index is always an integer; the choices follow the call's type.
            let i = expr(&args[0], inst);
            let choices: Vec<TokenStream> = args[1..]
                .iter()
                .map(|x| {
                    if real {
                        as_real(x, inst)
                    } else {
                        expr(x, inst)
                    }
                })
                .collect();
            quote!(rt::pick(#i, &[#(#choices),*]))
        }
    }
}

fn fold(args: &[TokenStream], f: TokenStream) -> TokenStream {
    let mut it = args.iter();
    let Some(first) = it.next() else {
        return quote!(0);
    };
    it.fold(first.clone(), |acc, x| quote!(#f(#acc, #x)))
}

/// Text from a description made safe for a rustdoc comment: brackets (index
/// notation such as `acc[i]`) would otherwise be read as intra-doc links.
pub fn doc_text(text: &str) -> String {
    text.replace('[', "\\[").replace(']', "\\]")
}

/// Prints a generated file: the `@generated` stamp, then the formatted items.
pub fn print_file(ctx: &crate::Ctx, artifact: &str, file: &syn::File) -> String {
    format!(
        "// @generated from {} by codegen-gen ({artifact}); do not edit.\n{}",
        ctx.spec_path,
        prettyplease::unparse(file)
    )
}
