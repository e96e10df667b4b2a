//! Reading `key = value;` property blocks: unknown, repeated and missing keys.

use super::Checker;
use crate::ast::{self, ExprKind, Prop, Value};
use crate::diag::{Code, Diagnostic};
use crate::model::{IntQ, RealQ};
use crate::source::Span;

/// The properties of one block, with the keys it accepts.
pub(crate) struct Props<'a> {
    props: &'a [Prop],
    owner: String,
    span: Span,
    /// Keys that unknown keys were probably meant to be: not reported as missing too.
    misspelt: Vec<String>,
}

impl<'a> Props<'a> {
    /// Reports unknown and repeated keys right away.
    pub fn new(
        c: &mut Checker,
        props: &'a [Prop],
        owner: String,
        span: Span,
        allowed: &[&str],
    ) -> Props<'a> {
        let mut misspelt = Vec::new();
        for (i, p) in props.iter().enumerate() {
            if !allowed.contains(&p.key.name.as_str()) {
                let mut d = Diagnostic::new(
                    Code::UnknownProperty,
                    p.key.span,
                    format!("{owner} has no property `{}`", p.key.name),
                )
                .label("unknown property");
                d = match super::suggest(&p.key.name, allowed.iter().copied()) {
                    Some(s) => {
                        let help = format!("did you mean `{s}`?");
                        misspelt.push(s);
                        d.help(help)
                    }
                    None => d.help(format!("the properties are {}", allowed.join(", "))),
                };
                c.error(d);
            } else if let Some(first) = props[..i].iter().find(|q| q.key.name == p.key.name) {
                c.error(
                    Diagnostic::new(
                        Code::DuplicateProperty,
                        p.key.span,
                        format!("property `{}` given twice", p.key.name),
                    )
                    .label("given again here")
                    .with_secondary(first.key.span, "first given here")
                    .help("remove one of them"),
                );
            }
        }
        Props {
            props,
            owner,
            span,
            misspelt,
        }
    }

    /// The first property with this key.
    pub fn get(&self, key: &str) -> Option<&'a Prop> {
        self.props.iter().find(|p| p.key.name == key)
    }

    fn missing(&self, c: &mut Checker, key: &str, example: &str) {
        if self.misspelt.iter().any(|m| m == key) {
            return;
        }
        c.error(
            Diagnostic::new(
                Code::MissingProperty,
                self.span,
                format!("{} needs property `{key}`", self.owner),
            )
            .label(format!("`{key}` missing"))
            .help(format!("add `{key} = {example};`")),
        );
    }

    fn wrong(&self, c: &mut Checker, key: &str, v: &Value, expected: &str) {
        c.error(
            Diagnostic::new(
                Code::WrongValue,
                v.span(),
                format!("property `{key}` of {} must be {expected}", self.owner),
            )
            .label(format!("expected {expected}"))
            .help(format!("write `{key} = <{expected}>;`")),
        );
    }

    /// The expression of a property, or `None` after reporting a wrong kind of value.
    fn expr(&self, c: &mut Checker, key: &str, expected: &str) -> Option<&'a ast::Expr> {
        let p = self.get(key)?;
        match &p.value {
            Value::Expr(e) => Some(e),
            v => {
                self.wrong(c, key, v, expected);
                None
            }
        }
    }

    /// An integer property; `default` when absent (an error if there is none).
    pub fn int(&self, c: &mut Checker, key: &str, default: Option<i64>, min: i64) -> Option<IntQ> {
        match self.get(key) {
            None => match default {
                Some(v) => Some(IntQ {
                    value: v,
                    expr: crate::model::Expr::Int(v),
                }),
                None => {
                    self.missing(c, key, &min.max(1).to_string());
                    None
                }
            },
            Some(_) => {
                let e = self.expr(c, key, "an integer")?;
                c.global_int(e, min, &format!("`{key}`"))
            }
        }
    }

    /// A non-negative real property; `default` when absent (an error if there is none).
    pub fn real(&self, c: &mut Checker, key: &str, default: Option<f64>) -> Option<RealQ> {
        match self.get(key) {
            None => match default {
                Some(v) => Some(RealQ {
                    value: v,
                    expr: crate::model::Expr::Real(v),
                }),
                None => {
                    self.missing(c, key, "0.0");
                    None
                }
            },
            Some(_) => {
                let e = self.expr(c, key, "a number")?;
                c.global_real(e, &format!("`{key}`"))
            }
        }
    }

    /// A property whose value is one word from `choices`.
    pub fn word(
        &self,
        c: &mut Checker,
        key: &str,
        choices: &[&str],
        default: Option<&str>,
    ) -> Option<String> {
        let Some(p) = self.get(key) else {
            if default.is_none() {
                self.missing(c, key, choices.first().copied().unwrap_or("..."));
            }
            return default.map(str::to_owned);
        };
        let word = match &p.value {
            Value::Expr(ast::Expr {
                kind: ExprKind::Name(n),
                ..
            }) => n.clone(),
            v => {
                self.wrong(c, key, v, &format!("one of {}", choices.join(", ")));
                return None;
            }
        };
        if choices.contains(&word.as_str()) {
            return Some(word);
        }
        let mut d = Diagnostic::new(
            Code::WrongValue,
            p.value.span(),
            format!("`{word}` is not a valid `{key}`"),
        )
        .label(format!("expected one of {}", choices.join(", ")));
        d = match super::suggest(&word, choices.iter().copied()) {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => d.help(format!("`{key}` is one of {}", choices.join(", "))),
        };
        c.error(d);
        None
    }

    /// An element type property; an unknown type is E0602 as in operands.
    pub fn dtype(&self, c: &mut Checker, key: &str) -> Option<crate::model::DType> {
        let Some(p) = self.get(key) else {
            self.missing(c, key, "f32");
            return None;
        };
        match &p.value {
            Value::Expr(ast::Expr {
                kind: ExprKind::Name(n),
                span,
            }) => super::inst::dtype_of(
                c,
                &ast::Ident {
                    name: n.clone(),
                    span: *span,
                },
            ),
            v => {
                self.wrong(c, key, v, "an element type such as f32");
                None
            }
        }
    }

    /// A `true`/`false` property.
    pub fn bool(&self, c: &mut Checker, key: &str, default: bool) -> bool {
        self.word(
            c,
            key,
            &["true", "false"],
            Some(if default { "true" } else { "false" }),
        )
        .is_some_and(|w| w == "true")
    }

    /// A string property.
    pub fn string(&self, c: &mut Checker, key: &str) -> Option<String> {
        let p = self.get(key)?;
        match &p.value {
            Value::Str(s, _) => Some(s.clone()),
            v => {
                self.wrong(c, key, v, "a string");
                None
            }
        }
    }

    /// A property whose value is a name or a list of names.
    pub fn names(&self, c: &mut Checker, key: &str) -> Option<Vec<ast::Ident>> {
        let p = self.get(key)?;
        let as_name = |v: &Value| match v {
            Value::Expr(ast::Expr {
                kind: ExprKind::Name(n),
                span,
            }) => Some(ast::Ident {
                name: n.clone(),
                span: *span,
            }),
            _ => None,
        };
        let out = match &p.value {
            Value::List(items, _) => items.iter().map(as_name).collect::<Option<Vec<_>>>(),
            v => as_name(v).map(|n| vec![n]),
        };
        if out.is_none() {
            self.wrong(c, key, &p.value, "a name or a list of names");
        }
        out
    }

    /// A property whose value is a list of expressions (a shape, a bit range).
    pub fn exprs(&self, c: &mut Checker, key: &str) -> Option<Vec<&'a ast::Expr>> {
        let p = self.get(key)?;
        let out = match &p.value {
            Value::List(items, _) => items
                .iter()
                .map(|v| match v {
                    Value::Expr(e) => Some(e),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>(),
            _ => None,
        };
        if out.is_none() {
            self.wrong(c, key, &p.value, "a list of numbers `[a, b, ...]`");
        }
        out
    }
}
