//! Located diagnostics: collected, never fatal, rendered for people and as JSON.
//!
//! Every problem with a description file is a [`Diagnostic`] with a stable
//! [`Code`], a primary span, optional secondary spans (the other party of a
//! conflict), and a `help:` line. Checks return them; nothing stops at the
//! first one.

use crate::source::{SourceMap, Span};
use codespan_reporting::diagnostic as cs;
use codespan_reporting::term;
use serde::{Deserialize, Serialize};

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The description is still usable.
    Warning,
    /// The description cannot be used.
    Error,
}

macro_rules! codes {
    ($($(#[$doc:meta])* $name:ident = $code:literal, $sev:ident, $summary:literal;)*) => {
        /// The stable code of every diagnostic the loader can report.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum Code {
            $($(#[$doc])* #[serde(rename = $code)] $name,)*
        }

        impl Code {
            /// Every code, in order.
            pub const ALL: &'static [Code] = &[$(Code::$name,)*];

            /// The code as printed, e.g. `E0101`.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$name => $code,)* }
            }

            /// Whether diagnostics with this code are errors or warnings.
            pub fn severity(self) -> Severity {
                match self { $(Code::$name => Severity::$sev,)* }
            }

            /// A one-line summary of what the code means.
            pub fn summary(self) -> &'static str {
                match self { $(Code::$name => $summary,)* }
            }
        }
    };
}

codes! {
    /// The text does not follow the grammar.
    Syntax = "E0001", Error, "syntax error";
    /// A file (or include) cannot be read.
    Unreadable = "E0002", Error, "file cannot be read";
    /// A file includes itself, directly or through others.
    IncludeCycle = "E0003", Error, "include cycle";
    /// A file is not UTF-8 text.
    NotText = "E0004", Error, "file is not UTF-8 text";
    /// A file is larger than the loader accepts.
    TooLarge = "E0005", Error, "file too large";
    /// Expressions or brackets nested deeper than the loader accepts.
    TooDeep = "E0006", Error, "nesting too deep";
    /// A number literal that does not fit 64 bits.
    BadNumber = "E0007", Error, "number out of range";
    /// A name used but never defined.
    Undefined = "E0101", Error, "undefined name";
    /// A name defined twice in the same namespace.
    Duplicate = "E0102", Error, "duplicate definition";
    /// A property the item does not take.
    UnknownProperty = "E0103", Error, "unknown property";
    /// A property the item needs is absent.
    MissingProperty = "E0104", Error, "missing property";
    /// A property value of the wrong kind (list for a number, ...).
    WrongValue = "E0105", Error, "wrong kind of value";
    /// The same property given twice.
    DuplicateProperty = "E0106", Error, "property given twice";
    /// A name of one kind used where another kind is needed.
    WrongKind = "E0107", Error, "name of the wrong kind";
    /// No `machine` header, or more than one.
    MachineHeader = "E0108", Error, "missing or repeated machine header";
    /// Parameters defined in terms of each other.
    CyclicParam = "E0201", Error, "cyclic parameter definition";
    /// Division by zero, overflow or another arithmetic failure.
    Arithmetic = "E0202", Error, "arithmetic error";
    /// A real number where an integer is required.
    NotInteger = "E0203", Error, "integer required";
    /// A value outside the range the property allows.
    OutOfRange = "E0204", Error, "value out of range";
    /// An unknown function in an expression.
    UnknownFunction = "E0205", Error, "unknown function";
    /// A function called with the wrong number of arguments.
    Arity = "E0206", Error, "wrong number of arguments";
    /// A `--set` override names no parameter.
    UnknownOverride = "E0207", Error, "override of an unknown parameter";
    /// An index that appears only on the right of `=` and is not reduced.
    UnboundIndex = "E0301", Error, "index on one side only";
    /// A reduction over an index that its operand does not use, or that is also on the left.
    ReductionIndex = "E0302", Error, "reduction index not reduced";
    /// A tensor accessed with the wrong number of indices.
    Rank = "E0303", Error, "wrong rank";
    /// Operands of different element types combined without a cast.
    DtypeMismatch = "E0304", Error, "dtype mismatch";
    /// One index used for dimensions of different extents.
    ExtentMismatch = "E0305", Error, "shape mismatch";
    /// Assignment to something that cannot be written.
    NotWritable = "E0306", Error, "not writable";
    /// An index expression that is not affine in the index names.
    NonAffineIndex = "E0307", Error, "index is not affine";
    /// An instruction without semantics, or with empty ones.
    NoSemantics = "E0308", Error, "missing semantics";
    /// A semantic action with the wrong operands.
    BadAction = "E0309", Error, "bad action";
    /// A field that does not fit the format's word.
    FieldOutsideWord = "E0401", Error, "field outside the word";
    /// Two fields of one format share bits.
    OverlappingFields = "E0402", Error, "overlapping fields";
    /// A constant too wide for its field.
    FieldOverflow = "E0403", Error, "value does not fit its field";
    /// Two instructions no decoder can tell apart.
    OpcodeCollision = "E0404", Error, "opcode collision";
    /// An immediate whose range needs more bits than its field has.
    ImmediateTooWide = "E0405", Error, "immediate range wider than its field";
    /// A memory larger than an address field can reach.
    AddressReach = "E0406", Error, "memory beyond the reach of the address field";
    /// More registers than a register field can name.
    RegisterReach = "E0407", Error, "register file beyond the reach of its field";
    /// An operand not placed in any field.
    UnencodedOperand = "E0408", Error, "operand not encoded";
    /// A field assigned twice, or a field value that names nothing encodable.
    BadFieldValue = "E0409", Error, "bad field assignment";
    /// A format whose width does not match its slot or the machine word.
    FormatWidth = "E0410", Error, "format width mismatch";
    /// A field whose high bit is below its low bit.
    FieldOrder = "E0411", Error, "field bits reversed";
    /// An instruction whose encoding can be the all-zero nop word.
    NopCollision = "E0412", Error, "encoding collides with nop";
    /// A unit or slot that is not defined.
    UnknownUnit = "E0501", Error, "unknown unit or slot";
    /// A slot that does not feed the instruction's unit.
    SlotUnit = "E0502", Error, "slot does not feed unit";
    /// A latency that can be zero or negative.
    NonPositiveLatency = "E0503", Error, "latency can be non-positive";
    /// An issue occupancy that can be zero or negative.
    NonPositiveOccupancy = "E0504", Error, "occupancy can be non-positive";
    /// An instruction on an asynchronous unit that signals no semaphore.
    AsyncWithoutToken = "W0505", Warning, "asynchronous instruction signals nothing";
    /// A constraint that no operand value satisfies.
    Unsatisfiable = "E0506", Error, "constraint never holds";
    /// Memory geometry that does not add up (banks, ports, sizes).
    MemoryGeometry = "E0601", Error, "inconsistent memory geometry";
    /// An element type the loader does not know.
    UnknownDtype = "E0602", Error, "unknown element type";
    /// No instruction does matrix multiply-accumulate.
    NoMatmul = "W0701", Warning, "no matrix multiply";
    /// No instruction computes `exp`.
    NoExp = "W0702", Warning, "no exp";
    /// No instruction computes a max reduction.
    NoMaxReduce = "W0703", Warning, "no max reduction";
    /// No instruction computes a sum reduction.
    NoSumReduce = "W0704", Warning, "no sum reduction";
    /// A cast the compiler needs is missing.
    NoCast = "W0705", Warning, "missing cast";
    /// Two memory levels with no instruction that copies between them.
    NoCopy = "W0706", Warning, "no copy between memory levels";
    /// No instruction computes `tanh` or `erf` (needed by GELU).
    NoTanh = "W0707", Warning, "no tanh or erf";
}

/// A span with a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Label {
    /// Where.
    pub span: Span,
    /// What about it (may be empty).
    pub message: String,
}

/// One problem found in a description.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// Stable code.
    pub code: Code,
    /// What is wrong, lowercase, no trailing period.
    pub message: String,
    /// Where it is wrong, if it has a place (a `--set` override has none).
    pub primary: Option<Label>,
    /// Other places involved, e.g. the other instruction of a collision.
    pub secondary: Vec<Label>,
    /// What to do about it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic with a primary span whose label is empty.
    pub fn new(code: Code, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            message: message.into(),
            primary: Some(Label {
                span,
                message: String::new(),
            }),
            secondary: Vec::new(),
            help: None,
        }
    }

    /// A diagnostic about no place in particular.
    pub fn unlocated(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            message: message.into(),
            primary: None,
            secondary: Vec::new(),
            help: None,
        }
    }

    /// Sets the primary label's text.
    pub fn label(mut self, text: impl Into<String>) -> Diagnostic {
        if let Some(primary) = &mut self.primary {
            primary.message = text.into();
        }
        self
    }

    /// Adds a secondary span.
    pub fn with_secondary(mut self, span: Span, text: impl Into<String>) -> Diagnostic {
        self.secondary.push(Label {
            span,
            message: text.into(),
        });
        self
    }

    /// Sets the help line.
    pub fn help(mut self, text: impl Into<String>) -> Diagnostic {
        self.help = Some(text.into());
        self
    }

    /// Error or warning, from the code.
    pub fn severity(&self) -> Severity {
        self.code.severity()
    }

    fn to_codespan(&self) -> cs::Diagnostic<crate::source::FileId> {
        let mut labels = Vec::new();
        if let Some(p) = &self.primary {
            labels.push(cs::Label::primary(p.span.file, p.span.range()).with_message(&p.message));
        }
        for s in &self.secondary {
            labels.push(cs::Label::secondary(s.span.file, s.span.range()).with_message(&s.message));
        }
        let base = match self.severity() {
            Severity::Error => cs::Diagnostic::error(),
            Severity::Warning => cs::Diagnostic::warning(),
        };
        let notes = self.help.iter().map(|h| format!("help: {h}")).collect();
        base.with_code(self.code.as_str())
            .with_message(&self.message)
            .with_labels(labels)
            .with_notes(notes)
    }

    /// The JSON form: the diagnostic with every span resolved to file, line and column.
    pub fn to_json(&self, sources: &SourceMap) -> serde_json::Value {
        let place = |label: &Label| {
            let file = sources.file(label.span.file);
            let (line, column) = file.line_col(label.span.start as usize);
            let (end_line, end_column) = file.line_col(label.span.end as usize);
            serde_json::json!({
                "file": file.name, "line": line, "column": column,
                "end_line": end_line, "end_column": end_column, "message": label.message,
            })
        };
        serde_json::json!({
            "severity": self.severity(),
            "code": self.code.as_str(),
            "message": self.message,
            "primary": self.primary.as_ref().map(place),
            "secondary": self.secondary.iter().map(place).collect::<Vec<_>>(),
            "help": self.help,
        })
    }
}

/// A collection of diagnostics, in the order found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Adds one.
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }

    /// Adds all of another collection.
    pub fn extend(&mut self, other: impl IntoIterator<Item = Diagnostic>) {
        self.0.extend(other);
    }

    /// Whether any is an error.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|d| d.severity() == Severity::Error)
    }

    /// Number of errors.
    pub fn error_count(&self) -> usize {
        self.0
            .iter()
            .filter(|d| d.severity() == Severity::Error)
            .count()
    }

    /// Number of warnings.
    pub fn warning_count(&self) -> usize {
        self.0.len() - self.error_count()
    }

    /// Sorts by file and position (errors before warnings at the same place), keeping the order stable otherwise.
    pub fn sort(&mut self) {
        self.0.sort_by_key(|d| {
            let pos = d.primary.as_ref().map(|p| (p.span.file, p.span.start));
            (pos, std::cmp::Reverse(d.severity()))
        });
    }

    /// Renders for people, without colour.
    pub fn render_plain(&self, sources: &SourceMap) -> String {
        let config = term::Config::default();
        let mut out = String::new();
        for d in &self.0 {
            if term::emit_to_string(&mut out, &config, sources, &d.to_codespan()).is_err() {
                out.push_str(&format!(
                    "{}[{}]: {}\n",
                    sev_word(d.severity()),
                    d.code.as_str(),
                    d.message
                ));
            }
        }
        out
    }

    /// Renders for people to a terminal writer (colours if the writer has them).
    pub fn render_to(&self, sources: &SourceMap, out: &mut dyn term::termcolor::WriteColor) {
        let config = term::Config::default();
        for d in &self.0 {
            // Rendering only fails on I/O errors of `out` or spans outside their file, which loader spans never are.
            if term::emit_to_write_style(out, &config, sources, &d.to_codespan()).is_err() {
                let _ = std::io::Write::write_fmt(
                    out,
                    format_args!(
                        "{}[{}]: {}\n",
                        sev_word(d.severity()),
                        d.code.as_str(),
                        d.message
                    ),
                );
            }
        }
    }

    /// The JSON form: a list of diagnostics.
    pub fn to_json(&self, sources: &SourceMap) -> serde_json::Value {
        serde_json::Value::Array(self.0.iter().map(|d| d.to_json(sources)).collect())
    }
}

fn sev_word(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
