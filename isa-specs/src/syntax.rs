//! Text to syntax tree: the pest parser and the tree builder.
//!
//! Only this module knows pest. Parse errors are turned into diagnostics that
//! name what was expected in words (`rule_words`), never grammar rule names.

use crate::ast::*;
use crate::diag::{Code, Diagnostic};
use crate::source::{FileId, Span};
use pest::Parser as _;
use pest::iterators::Pair;

#[derive(pest_derive::Parser)]
#[grammar = "grammar.pest"]
struct AdlParser;

/// Deepest bracket nesting the builder accepts.
const MAX_DEPTH: usize = 64;
/// Tallest expression tree the builder accepts (long operator chains are tall trees).
const MAX_HEIGHT: usize = 256;
/// Most parser steps one file may take (bounds backtracking on hostile input).
const CALL_LIMIT: usize = 20_000_000;

/// Parses one file's text into items.
pub fn parse(file: FileId, text: &str) -> Result<Vec<Item>, Diagnostic> {
    let mut pairs = run(Rule::file, file, text)?;
    let builder = Builder { file };
    let Some(root) = pairs.next() else {
        return Ok(Vec::new());
    };
    root.into_inner()
        .filter(|p| p.as_rule() != Rule::EOI)
        .map(|p| builder.item(p))
        .collect()
}

/// Runs the parser from `rule`; a failure becomes a located diagnostic.
fn run(
    rule: Rule,
    file: FileId,
    text: &str,
) -> Result<pest::iterators::Pairs<'_, Rule>, Diagnostic> {
    pest::set_call_limit(std::num::NonZeroUsize::new(CALL_LIMIT));
    // Tracking parse attempts doubles the parse time: only re-parse with it to explain an error.
    pest::set_error_detail(false);
    AdlParser::parse(rule, text).map_err(|_| {
        pest::set_error_detail(true);
        let detailed = AdlParser::parse(rule, text).err();
        pest::set_error_detail(false);
        detailed.map_or_else(
            || internal(Span::new(file, 0, 0)),
            |e| syntax_error(file, text, &e),
        )
    })
}

/// The file id of the spans of [`parse_expr`] and [`parse_constraint`]:
/// their spans are byte offsets into the text given.
pub(crate) const STANDALONE: FileId = FileId(0);

/// Parses one expression written alone, outside a description (the whole
/// text: anything after the expression is an error). Its language is that of
/// descriptions' expressions: integers and reals, names, `+ - * / %`, unary
/// `-`, parentheses, function calls. Spans are byte offsets into `text` (in
/// file 0 of no source map: place the text first in a [`crate::SourceMap`] to
/// render an error with its excerpt).
pub fn parse_expr(text: &str) -> Result<Expr, Diagnostic> {
    let root = standalone(Rule::expr_only, text, "expression")?;
    Builder { file: STANDALONE }.expr(root, 0)
}

/// Parses one constraint written alone, `expr CMP expr` as in an
/// instruction's `constraints` section (`SA_ROWS * MXUS <= 256`); see
/// [`parse_expr`].
pub fn parse_constraint(text: &str) -> Result<Constraint, Diagnostic> {
    let root = standalone(Rule::constraint_only, text, "constraint")?;
    Builder { file: STANDALONE }.constraint(root)
}

/// The one tree inside `rule` (`expr_only` or `constraint_only`); errors say
/// "the end of the `what`" rather than of a file.
fn standalone<'a>(rule: Rule, text: &'a str, what: &str) -> Result<Pair<'a, Rule>, Diagnostic> {
    let end = format!("the end of the {what}");
    let mut pairs = run(rule, STANDALONE, text).map_err(|mut d| {
        d.message = d.message.replace("the end of the file", &end);
        if let Some(p) = &mut d.primary {
            p.message = p.message.replace("the end of the file", &end);
        }
        d
    })?;
    let span = Span::new(STANDALONE, 0, text.len());
    pairs
        .next()
        .and_then(|root| root.into_inner().next())
        .ok_or_else(|| internal(span))
}

fn syntax_error(file: FileId, text: &str, e: &pest::error::Error<Rule>) -> Diagnostic {
    use pest::error::{ErrorVariant, InputLocation};
    let pos = match e.location {
        InputLocation::Pos(p) => p,
        InputLocation::Span((s, _)) => s,
    }
    .min(text.len());
    let found = describe_found(text, pos);
    let end = pos + text[pos..].chars().next().map_or(0, char::len_utf8);
    let span = Span::new(file, pos, end);
    match &e.variant {
        ErrorVariant::CustomError { message }
            if message.contains("call limit") || message.contains("stack limit") =>
        {
            Diagnostic::new(Code::TooDeep, span, "the file is too complex to parse")
                .label("parsing gave up here")
                .help("split deeply nested expressions or very long items into smaller ones")
        }
        ErrorVariant::CustomError { message } => {
            Diagnostic::new(Code::Syntax, span, message.to_lowercase())
                .help("see docs/isa-language.md for the syntax")
        }
        ErrorVariant::ParsingError { positives, .. } => {
            let expected = expected_words(e, positives);
            located_syntax_error(file, text, pos, span, &found, &expected)
        }
    }
}

/// What the parser would have accepted at the error, in words: literal tokens first, then rule descriptions.
fn expected_words(e: &pest::error::Error<Rule>, positives: &[Rule]) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    if let Some(attempts) = e.parse_attempts() {
        for t in attempts.expected_tokens() {
            // `ParsingToken` is not nameable outside pest; its display is the literal, `a..z` for ranges.
            let token = t.to_string();
            // Only structural tokens: the others are the first characters of things the rule words describe.
            if STRUCTURAL_TOKENS.contains(&token.as_str()) {
                words.push(format!("`{token}`"));
            }
        }
    }
    words.extend(
        positives
            .iter()
            .filter(|r| !matches!(r, Rule::WHITESPACE | Rule::COMMENT))
            .map(|r| rule_words(*r).to_owned()),
    );
    let mut seen = std::collections::HashSet::new();
    words.retain(|w| seen.insert(w.clone()));
    words
}

/// Literal tokens worth naming in "expected ..." messages.
const STRUCTURAL_TOKENS: [&str; 9] = [";", "}", "{", "]", ")", "=", ":", ",", "..="];

const KEYWORDS: [&str; 10] = [
    "include",
    "param",
    "machine",
    "memory",
    "regfile",
    "unit",
    "slot",
    "semaphore",
    "format",
    "inst",
];

fn located_syntax_error(
    file: FileId,
    text: &str,
    pos: usize,
    span: Span,
    found: &str,
    expected: &[String],
) -> Diagnostic {
    let has = |w: &str| expected.iter().any(|x| x == w);
    // An opening quote with no closing one on its line.
    if text[pos..].starts_with('"') && !text[pos + 1..].lines().next().unwrap_or("").contains('"') {
        return Diagnostic::new(Code::Syntax, span, "unterminated string")
            .label("this string is never closed")
            .help("close the string with `\"` on the same line");
    }
    // A missing `;`: point just after the previous token, where the `;` belongs.
    if has("`;`") {
        let before = text[..pos].trim_end_matches(|c: char| c.is_whitespace());
        let prev: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || "_)]\"".contains(*c))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let at = Span::new(file, before.len(), before.len());
        let after = if prev.is_empty() {
            String::new()
        } else {
            format!(" after `{prev}`")
        };
        let help = "every property, operand, statement and field ends with `;`";
        return Diagnostic::new(
            Code::Syntax,
            at,
            format!("expected `;`{after}, found {found}"),
        )
        .label("`;` missing here")
        .help(help);
    }
    let word: String = text[pos..]
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let at_item = has("`include`") && has("`inst`");
    let in_block = has("`}`")
        || expected.iter().any(|w| {
            [
                "a property",
                "a field",
                "an operand",
                "a statement",
                "an instruction section",
                "a constraint",
            ]
            .iter()
            .any(|p| w.starts_with(p))
        });
    if in_block && !at_item && KEYWORDS.contains(&word.as_str()) {
        return Diagnostic::new(Code::Syntax, span, format!("expected `}}` before `{word}`"))
            .label("a new item starts here")
            .help("a block opened above is not closed: add `}`");
    }
    if at_item && word.is_empty() {
        return Diagnostic::new(
            Code::Syntax,
            span,
            format!("expected an item or the end of the file, found {found}"),
        )
        .label("not the start of an item")
        .help(syntax_help(&["`inst`"]));
    }
    if at_item && !KEYWORDS.contains(&word.as_str()) {
        let help = match crate::check::suggest(&word, KEYWORDS.iter().copied()) {
            Some(k) => format!("did you mean `{k}`?"),
            None => format!(
                "a file holds the items {}",
                KEYWORDS.map(|k| format!("`{k}`")).join(", ")
            ),
        };
        return Diagnostic::new(
            Code::Syntax,
            Span::new(file, pos, pos + word.len()),
            format!("`{word}` does not start an item"),
        )
        .label("not an item keyword")
        .help(help);
    }
    let list: Vec<&str> = expected.iter().map(String::as_str).collect();
    let expected_text = join_alternatives(&list);
    Diagnostic::new(
        Code::Syntax,
        span,
        format!("expected {expected_text}, found {found}"),
    )
    .label(if list.len() > 4 {
        "unexpected here".to_owned()
    } else {
        format!("expected {expected_text}")
    })
    .help(syntax_help(&list))
}

fn describe_found(text: &str, pos: usize) -> String {
    let rest = text.get(pos..).unwrap_or("");
    let word: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .take(24)
        .collect();
    match rest.chars().next() {
        None => "the end of the file".to_owned(),
        Some(_) if !word.is_empty() => format!("`{word}`"),
        Some(c) if c.is_control() || !c.is_ascii() => format!("the character {c:?}"),
        Some(c) => format!("`{c}`"),
    }
}

fn join_alternatives(words: &[&str]) -> String {
    match words {
        [] => "something else".to_owned(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

fn syntax_help(words: &[&str]) -> String {
    if words
        .iter()
        .any(|w| w.contains("an item") || *w == "`inst`")
    {
        format!(
            "a file holds the items {}",
            KEYWORDS.map(|k| format!("`{k}`")).join(", ")
        )
    } else {
        "see docs/isa-language.md for the syntax".to_owned()
    }
}

/// Names grammar rules in words, for error messages.
pub fn rule_words(rule: Rule) -> &'static str {
    match rule {
        Rule::EOI => "the end of the file",
        Rule::file | Rule::item => "an item (`param`, `memory`, `inst`, ...)",
        Rule::expr_only => "an expression",
        Rule::constraint_only => "a constraint (`a <= b`)",
        Rule::include => "`include`",
        Rule::param => "`param`",
        Rule::machine => "`machine`",
        Rule::memory => "`memory`",
        Rule::regfile => "`regfile`",
        Rule::unit => "`unit`",
        Rule::slot => "`slot`",
        Rule::semaphore => "`semaphore`",
        Rule::props => "a `{` property block",
        Rule::prop => "a property (`name = value;`)",
        Rule::value => "a value",
        Rule::list => "a list `[...]`",
        Rule::format => "`format`",
        Rule::field => "a field (`name [hi:lo];`)",
        Rule::bit_range => "a bit range `[hi:lo]`",
        Rule::inst => "`inst`",
        Rule::inst_part => {
            "an instruction section (`operands`, `semantics`, `timing`, `encoding`, `constraints`) or property"
        }
        Rule::operands => "`operands`",
        Rule::operand => "an operand (`name : kind;`)",
        Rule::operand_kind => "an operand kind (`reg`, `mem`, `imm`, `sem`)",
        Rule::reg_operand => "`reg`",
        Rule::mem_operand => "`mem`",
        Rule::mem_option => "`align` or `stride`",
        Rule::align_option => "`align`",
        Rule::stride_option => "`stride`",
        Rule::imm_operand => "`imm`",
        Rule::imm_range => "an immediate range `LO..=HI`",
        Rule::sem_operand => "`sem`",
        Rule::shape => "a shape `[d0, d1, ...]`",
        Rule::semantics => "`semantics`",
        Rule::stmt => "a statement",
        Rule::assign => "an assignment",
        Rule::assign_op => "an assignment operator (`=`, `+=`, `max=`, `min=`)",
        Rule::action => "an action such as `signal(s)`",
        Rule::access => "an operand access `x[i, j]`",
        Rule::timing => "`timing`",
        Rule::encoding => "`encoding`",
        Rule::field_value => "a field assignment (`field = value;`)",
        Rule::constraints => "`constraints`",
        Rule::constraint => "a constraint (`a <= b`)",
        Rule::cmp_op => "a comparison (`<=`, `<`, `==`, `!=`, `>`, `>=`)",
        Rule::expr | Rule::term | Rule::unary | Rule::primary | Rule::paren => "an expression",
        Rule::add_op => "`+` or `-`",
        Rule::mul_op => "`*`, `/` or `%`",
        Rule::neg => "`-`",
        Rule::reduction => "a reduction `sum(k) ...`",
        Rule::reduce_op => "`sum`, `max` or `min`",
        Rule::call => "a call `f(...)`",
        Rule::member => "a property access `name.property`",
        Rule::number | Rule::decimal | Rule::hex | Rule::bin | Rule::int => "a number",
        Rule::exponent => "an exponent",
        Rule::size_suffix => "a size suffix (`KiB`, `MiB`, `GiB`, `TiB`)",
        Rule::ident | Rule::ident_char => "a name",
        Rule::string | Rule::string_inner => "a string",
        Rule::WHITESPACE | Rule::COMMENT => "a comment",
    }
}

struct Builder {
    file: FileId,
}

type Built<T> = Result<T, Diagnostic>;

impl Builder {
    fn span(&self, p: &Pair<'_, Rule>) -> Span {
        let s = p.as_span();
        Span::new(self.file, s.start(), s.end())
    }

    fn ident(&self, p: &Pair<'_, Rule>) -> Ident {
        Ident {
            name: p.as_str().to_owned(),
            span: self.span(p),
        }
    }

    fn item(&self, p: Pair<'_, Rule>) -> Built<Item> {
        let span = self.span(&p);
        let rule = p.as_rule();
        let mut inner = p.into_inner();
        let mut next = || inner.next().ok_or_else(|| internal(span));
        Ok(match rule {
            Rule::include => Item::Include {
                path: unescape(next()?.into_inner().as_str()),
                span,
            },
            Rule::param => {
                let name = self.ident(&next()?);
                Item::Param {
                    name,
                    value: self.expr(next()?, 0)?,
                }
            }
            Rule::format => {
                let name = self.ident(&next()?);
                let width = self.expr(next()?, 0)?;
                let fields = inner.map(|f| self.field(f)).collect::<Built<_>>()?;
                Item::Format(Format {
                    name,
                    width,
                    fields,
                    span,
                })
            }
            Rule::inst => {
                let name = self.ident(&next()?);
                self.inst(name, inner, span)?
            }
            _ => {
                let kind = match rule {
                    Rule::machine => BlockKind::Machine,
                    Rule::memory => BlockKind::Memory,
                    Rule::regfile => BlockKind::RegFile,
                    Rule::unit => BlockKind::Unit,
                    Rule::slot => BlockKind::Slot,
                    Rule::semaphore => BlockKind::Semaphore,
                    _ => return Err(internal(span)),
                };
                let name_pair = next()?;
                let name = if name_pair.as_rule() == Rule::string {
                    Ident {
                        name: unescape(name_pair.clone().into_inner().as_str()),
                        span: self.span(&name_pair),
                    }
                } else {
                    self.ident(&name_pair)
                };
                let props = self.props(next()?)?;
                Item::Block(Block {
                    kind,
                    name,
                    props,
                    span,
                })
            }
        })
    }

    fn props(&self, p: Pair<'_, Rule>) -> Built<Vec<Prop>> {
        p.into_inner().map(|prop| self.prop(prop)).collect()
    }

    fn prop(&self, p: Pair<'_, Rule>) -> Built<Prop> {
        let span = self.span(&p);
        let mut inner = p.into_inner();
        let key = self.ident(&inner.next().ok_or_else(|| internal(span))?);
        let value = self.value(inner.next().ok_or_else(|| internal(span))?, 0)?;
        Ok(Prop { key, value, span })
    }

    fn value(&self, p: Pair<'_, Rule>, depth: usize) -> Built<Value> {
        let span = self.span(&p);
        self.depth(depth, span)?;
        let inner = p.into_inner().next().ok_or_else(|| internal(span))?;
        Ok(match inner.as_rule() {
            Rule::string => Value::Str(unescape(inner.into_inner().as_str()), span),
            Rule::list => Value::List(
                inner
                    .into_inner()
                    .map(|v| self.value(v, depth + 1))
                    .collect::<Built<_>>()?,
                span,
            ),
            _ => Value::Expr(self.expr(inner, depth + 1)?),
        })
    }

    fn field(&self, p: Pair<'_, Rule>) -> Built<Field> {
        let span = self.span(&p);
        let mut inner = p.into_inner();
        let name = self.ident(&inner.next().ok_or_else(|| internal(span))?);
        let mut bits = inner.next().ok_or_else(|| internal(span))?.into_inner();
        let hi = self.expr(bits.next().ok_or_else(|| internal(span))?, 0)?;
        let lo = bits.next().map(|b| self.expr(b, 0)).transpose()?;
        Ok(Field { name, hi, lo, span })
    }

    fn inst(
        &self,
        name: Ident,
        parts: pest::iterators::Pairs<'_, Rule>,
        span: Span,
    ) -> Built<Item> {
        let mut inst = Inst {
            name,
            operands: Vec::new(),
            semantics: Vec::new(),
            timing: Vec::new(),
            encodings: Vec::new(),
            constraints: Vec::new(),
            props: Vec::new(),
            span,
        };
        for part in parts {
            let pspan = self.span(&part);
            match part.as_rule() {
                Rule::operands => {
                    let ops = part
                        .into_inner()
                        .map(|o| self.operand(o))
                        .collect::<Built<_>>()?;
                    inst.operands.push((ops, pspan));
                }
                Rule::semantics => {
                    let stmts = part
                        .into_inner()
                        .map(|s| self.stmt(s))
                        .collect::<Built<_>>()?;
                    inst.semantics.push((stmts, pspan));
                }
                Rule::timing => {
                    let props = part
                        .into_inner()
                        .next()
                        .map(|p| self.props(p))
                        .transpose()?;
                    inst.timing.push((props.unwrap_or_default(), pspan));
                }
                Rule::encoding => {
                    let mut inner = part.into_inner();
                    let format = self.ident(&inner.next().ok_or_else(|| internal(pspan))?);
                    let mut fields = Vec::new();
                    for fv in inner {
                        let fspan = self.span(&fv);
                        let mut f = fv.into_inner();
                        let name = self.ident(&f.next().ok_or_else(|| internal(fspan))?);
                        let value = self.expr(f.next().ok_or_else(|| internal(fspan))?, 0)?;
                        fields.push((name, value));
                    }
                    inst.encodings.push(Encoding {
                        format,
                        fields,
                        span: pspan,
                    });
                }
                Rule::constraints => {
                    for c in part.into_inner() {
                        inst.constraints.push(self.constraint(c)?);
                    }
                }
                Rule::prop => inst.props.push(self.prop(part)?),
                _ => return Err(internal(pspan)),
            }
        }
        Ok(Item::Inst(inst))
    }

    fn constraint(&self, c: Pair<'_, Rule>) -> Built<Constraint> {
        let span = self.span(&c);
        let mut inner = c.into_inner();
        let lhs = self.expr(inner.next().ok_or_else(|| internal(span))?, 0)?;
        let op = match inner.next().ok_or_else(|| internal(span))?.as_str() {
            "<=" => CmpOp::Le,
            ">=" => CmpOp::Ge,
            "==" => CmpOp::Eq,
            "!=" => CmpOp::Ne,
            "<" => CmpOp::Lt,
            _ => CmpOp::Gt,
        };
        let rhs = self.expr(inner.next().ok_or_else(|| internal(span))?, 0)?;
        Ok(Constraint { lhs, op, rhs, span })
    }

    fn operand(&self, p: Pair<'_, Rule>) -> Built<OperandDecl> {
        let span = self.span(&p);
        let mut inner = p.into_inner();
        let name = self.ident(&inner.next().ok_or_else(|| internal(span))?);
        let kind_pair = inner.next().ok_or_else(|| internal(span))?;
        let kspan = self.span(&kind_pair);
        let rule = kind_pair.as_rule();
        let mut k = kind_pair.into_inner();
        let kind = match rule {
            Rule::reg_operand => {
                let class = self.ident(&k.next().ok_or_else(|| internal(kspan))?);
                let shape = k.next().map(|s| self.shape(s)).transpose()?;
                OperandKindAst::Reg { class, shape }
            }
            Rule::mem_operand => {
                let mem = self.ident(&k.next().ok_or_else(|| internal(kspan))?);
                let shape = self.shape(k.next().ok_or_else(|| internal(kspan))?)?;
                let dtype = self.ident(&k.next().ok_or_else(|| internal(kspan))?);
                let (mut align, mut stride) = (None, None);
                for opt in k {
                    let o = opt.into_inner().next().ok_or_else(|| internal(kspan))?;
                    let is_align = o.as_rule() == Rule::align_option;
                    let v = o.into_inner().next().ok_or_else(|| internal(kspan))?;
                    if is_align {
                        align = Some(self.expr(v, 0)?);
                    } else {
                        stride = Some(self.shape(v)?);
                    }
                }
                OperandKindAst::Mem {
                    mem,
                    shape,
                    dtype,
                    align,
                    stride,
                }
            }
            Rule::imm_operand => {
                let v = k.next().ok_or_else(|| internal(kspan))?;
                if v.as_rule() == Rule::ident {
                    OperandKindAst::ImmTyped(self.ident(&v))
                } else {
                    let mut r = v.into_inner();
                    let lo = self.expr(r.next().ok_or_else(|| internal(kspan))?, 0)?;
                    let hi = self.expr(r.next().ok_or_else(|| internal(kspan))?, 0)?;
                    OperandKindAst::ImmRange { lo, hi }
                }
            }
            Rule::sem_operand => {
                OperandKindAst::Sem(self.ident(&k.next().ok_or_else(|| internal(kspan))?))
            }
            _ => return Err(internal(kspan)),
        };
        Ok(OperandDecl { name, kind, span })
    }

    fn shape(&self, p: Pair<'_, Rule>) -> Built<(Vec<Expr>, Span)> {
        let span = self.span(&p);
        Ok((
            p.into_inner()
                .map(|e| self.expr(e, 0))
                .collect::<Built<_>>()?,
            span,
        ))
    }

    fn stmt(&self, p: Pair<'_, Rule>) -> Built<Stmt> {
        let span = self.span(&p);
        let s = p.into_inner().next().ok_or_else(|| internal(span))?;
        let rule = s.as_rule();
        let mut inner = s.into_inner();
        if rule == Rule::assign {
            let (target, _) = self.access(inner.next().ok_or_else(|| internal(span))?, 0)?;
            let op = match inner.next().ok_or_else(|| internal(span))?.as_str() {
                "+=" => AssignOp::Add,
                "max=" => AssignOp::Max,
                "min=" => AssignOp::Min,
                _ => AssignOp::Set,
            };
            let value = self.expr(inner.next().ok_or_else(|| internal(span))?, 0)?;
            Ok(Stmt::Assign {
                target,
                op,
                value,
                span,
            })
        } else {
            let name = self.ident(&inner.next().ok_or_else(|| internal(span))?);
            let args = inner.map(|a| self.expr(a, 0)).collect::<Built<_>>()?;
            Ok(Stmt::Action { name, args, span })
        }
    }

    fn depth(&self, depth: usize, span: Span) -> Built<()> {
        if depth > MAX_DEPTH {
            let at = Span::new(self.file, span.start as usize, span.start as usize + 1);
            return Err(Diagnostic::new(
                Code::TooDeep,
                at,
                format!("brackets nested more than {MAX_DEPTH} levels deep"),
            )
            .label("too deep")
            .help("split the expression using parameters"));
        }
        Ok(())
    }

    /// Builds an expression; `depth` counts enclosing brackets.
    fn expr(&self, p: Pair<'_, Rule>, depth: usize) -> Built<Expr> {
        self.expr_h(p, depth).map(|(e, _)| e)
    }

    /// Builds an expression and returns its tree height, which is bounded so later passes can recurse safely.
    fn expr_h(&self, p: Pair<'_, Rule>, depth: usize) -> Built<(Expr, usize)> {
        let span = self.span(&p);
        self.depth(depth, span)?;
        let tall = |h: usize| -> Built<()> {
            if h > MAX_HEIGHT {
                let at = Span::new(self.file, span.start as usize, span.start as usize + 1);
                return Err(Diagnostic::new(
                    Code::TooDeep,
                    at,
                    format!("expression longer than {MAX_HEIGHT} operators in a chain"),
                )
                .label("too long")
                .help("split the expression using parameters"));
            }
            Ok(())
        };
        let leaf = |kind| Ok((Expr { kind, span }, 1));
        match p.as_rule() {
            Rule::expr | Rule::term => {
                let mut inner = p.into_inner();
                let (mut acc, mut h) =
                    self.expr_h(inner.next().ok_or_else(|| internal(span))?, depth)?;
                while let Some(op) = inner.next() {
                    let op = match op.as_str() {
                        "+" => BinOp::Add,
                        "-" => BinOp::Sub,
                        "*" => BinOp::Mul,
                        "/" => BinOp::Div,
                        _ => BinOp::Rem,
                    };
                    let (rhs, hr) =
                        self.expr_h(inner.next().ok_or_else(|| internal(span))?, depth)?;
                    h = h.max(hr) + 1;
                    tall(h)?;
                    let s = Span::new(self.file, acc.span.start as usize, rhs.span.end as usize);
                    acc = Expr {
                        kind: ExprKind::Binary(op, Box::new(acc), Box::new(rhs)),
                        span: s,
                    };
                }
                Ok((acc, h))
            }
            Rule::unary => {
                let mut negs = 0usize;
                let mut primary = None;
                for q in p.into_inner() {
                    if q.as_rule() == Rule::neg {
                        negs += 1;
                    } else {
                        primary = Some(q);
                    }
                }
                let (mut e, h) = self.expr_h(primary.ok_or_else(|| internal(span))?, depth)?;
                tall(h + negs)?;
                for _ in 0..negs {
                    e = Expr {
                        kind: ExprKind::Neg(Box::new(e)),
                        span,
                    };
                }
                Ok((e, h + negs))
            }
            Rule::paren => {
                let (mut e, h) = self.expr_h(
                    p.into_inner().next().ok_or_else(|| internal(span))?,
                    depth + 1,
                )?;
                // Underline the brackets too.
                e.span = span;
                Ok((e, h))
            }
            Rule::number => leaf(self.number(&p)?),
            Rule::member => {
                let mut inner = p.into_inner();
                let a = self.ident(&inner.next().ok_or_else(|| internal(span))?);
                let b = self.ident(&inner.next().ok_or_else(|| internal(span))?);
                leaf(ExprKind::Member(a, b))
            }
            Rule::access => self.access(p, depth),
            Rule::call => {
                let mut inner = p.into_inner();
                let f = self.ident(&inner.next().ok_or_else(|| internal(span))?);
                let mut h = 0;
                let mut args = Vec::new();
                for a in inner {
                    let (e, ha) = self.expr_h(a, depth + 1)?;
                    h = h.max(ha);
                    args.push(e);
                }
                tall(h + 1)?;
                Ok((
                    Expr {
                        kind: ExprKind::Call(f, args),
                        span,
                    },
                    h + 1,
                ))
            }
            Rule::reduction => {
                let mut inner = p.into_inner();
                let op = match inner.next().ok_or_else(|| internal(span))?.as_str() {
                    "sum" => ReduceOp::Sum,
                    "max" => ReduceOp::Max,
                    _ => ReduceOp::Min,
                };
                let mut idx = Vec::new();
                let mut body = None;
                for q in inner {
                    if q.as_rule() == Rule::ident {
                        idx.push(self.ident(&q));
                    } else {
                        body = Some(self.expr_h(q, depth + 1)?);
                    }
                }
                let (body, h) = body.ok_or_else(|| internal(span))?;
                tall(h + 1)?;
                Ok((
                    Expr {
                        kind: ExprKind::Reduce(op, idx, Box::new(body)),
                        span,
                    },
                    h + 1,
                ))
            }
            _ => Err(internal(span)),
        }
    }

    fn access(&self, p: Pair<'_, Rule>, depth: usize) -> Built<(Expr, usize)> {
        let span = self.span(&p);
        let text = p.as_str();
        let mut inner = p.into_inner();
        let name = self.ident(&inner.next().ok_or_else(|| internal(span))?);
        if !text.contains('[') {
            // The rule's span may include trailing spaces; the name's does not.
            return Ok((
                Expr {
                    kind: ExprKind::Name(name.name),
                    span: name.span,
                },
                1,
            ));
        }
        let mut h = 0;
        let mut idx = Vec::new();
        for i in inner {
            let (e, hi) = self.expr_h(i, depth + 1)?;
            h = h.max(hi);
            idx.push(e);
        }
        Ok((
            Expr {
                kind: ExprKind::Index(name, idx),
                span,
            },
            h + 1,
        ))
    }

    fn number(&self, p: &Pair<'_, Rule>) -> Built<ExprKind> {
        let span = self.span(p);
        let mut inner = p.clone().into_inner();
        let lit = inner.next().ok_or_else(|| internal(span))?;
        let shift = match inner
            .next()
            .map(|s| s.as_str().trim().to_owned())
            .as_deref()
        {
            Some("KiB") => 10,
            Some("MiB") => 20,
            Some("GiB") => 30,
            Some("TiB") => 40,
            _ => 0,
        };
        let digits: String = lit.as_str().chars().filter(|c| *c != '_').collect();
        let too_big = || {
            Diagnostic::new(
                Code::BadNumber,
                span,
                format!("`{}` does not fit in 64 bits", p.as_str()),
            )
            .label("too large")
            .help("numbers are signed 64-bit integers or 64-bit reals")
        };
        let int = match lit.as_rule() {
            Rule::decimal => {
                let v: f64 = digits.parse().map_err(|_| too_big())?;
                return Ok(ExprKind::Real(v * f64::from(shift).exp2()));
            }
            Rule::hex => i64::from_str_radix(&digits[2..], 16),
            Rule::bin => i64::from_str_radix(&digits[2..], 2),
            _ => digits.parse::<i64>(),
        }
        .map_err(|_| too_big())?;
        int.checked_mul(1i64 << shift)
            .map(ExprKind::Int)
            .ok_or_else(too_big)
    }
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A tree the grammar promised but the builder did not find: always a bug in this module.
fn internal(span: Span) -> Diagnostic {
    Diagnostic::new(
        Code::Syntax,
        span,
        "internal error: unexpected syntax tree shape",
    )
    .help("this is a bug in tessera's parser; please report it with the file")
}
