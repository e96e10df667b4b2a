//! The loader: read files, follow includes, parse, check.

use crate::ast::Item;
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::model::Machine;
use crate::source::{SourceMap, Span};
use crate::spans::SpanTable;
use std::path::{Path, PathBuf};

/// Largest file the loader reads.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// Deepest chain of includes.
const MAX_INCLUDE_DEPTH: usize = 32;

/// A successfully checked machine.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The model.
    pub machine: Machine,
    /// Where each part was written.
    pub spans: SpanTable,
    /// Every file read (the top file first), for diagnostics and `rerun-if-changed`.
    pub sources: SourceMap,
    /// Warnings (never errors).
    pub warnings: Diagnostics,
}

/// A description with errors.
#[derive(Debug, Clone)]
pub struct Failed {
    /// Every file read.
    pub sources: SourceMap,
    /// Errors and warnings, sorted by place.
    pub diagnostics: Diagnostics,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.diagnostics.render_plain(&self.sources))
    }
}

impl std::error::Error for Failed {}

/// Parameter values that replace the defaults (`--set NAME=VALUE`).
pub type Overrides = [(String, i64)];

/// Loads and checks a description file and everything it includes.
pub fn load_file(path: impl AsRef<Path>, overrides: &Overrides) -> Result<Loaded, Failed> {
    let path = path.as_ref();
    with_big_stack(|| {
        let mut st = State::default();
        st.file(path, path.display().to_string(), None);
        st.finish(overrides)
    })
}

/// Loads and checks a description given as text; includes are resolved relative to `name`'s folder.
pub fn load_source(name: &str, text: &str, overrides: &Overrides) -> Result<Loaded, Failed> {
    with_big_stack(|| {
        let mut st = State::default();
        let canonical = std::fs::canonicalize(name).unwrap_or_else(|_| PathBuf::from(name));
        st.text(canonical, name.to_owned(), text.to_owned());
        st.finish(overrides)
    })
}

/// Loads and checks a description from in-memory files (`(name, text)`, the
/// top file first); includes are looked up among them by path relative to the
/// including file, never on disk. Used to re-check an embedded description
/// with other parameter values.
pub fn load_sources(files: &[(String, String)], overrides: &Overrides) -> Result<Loaded, Failed> {
    with_big_stack(|| {
        let mut st = State {
            virtual_files: Some(files.iter().cloned().collect()),
            ..State::default()
        };
        if let Some((name, _)) = files.first() {
            st.file(Path::new(name), name.clone(), None);
        }
        st.finish(overrides)
    })
}

/// Stack for parsing and checking: the parser and the tree walks recurse as deep
/// as the (bounded) nesting of the input, which can exceed a 2 MiB thread stack
/// in debug builds. Only touched pages are committed.
const LOADER_STACK_BYTES: usize = 256 << 20;

/// Runs `f` on a thread with a large stack (or here, if no thread can be made).
fn with_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let mut f = Some(f);
    let result = std::thread::scope(|scope| {
        let job = f.take().map(|f| {
            std::thread::Builder::new()
                .name("isa-loader".into())
                .stack_size(LOADER_STACK_BYTES)
                .spawn_scoped(scope, f)
        });
        match job {
            Some(Ok(handle)) => Some(
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            ),
            _ => None,
        }
    });
    match (result, f) {
        (Some(r), _) => r,
        (None, Some(f)) => f(),
        // The closure was moved into a thread that could not be spawned: the builder consumed it.
        (None, None) => unreachable!("spawn failure returns before the closure is taken"),
    }
}

#[derive(Default)]
struct State {
    sources: SourceMap,
    diags: Diagnostics,
    items: Vec<Item>,
    /// Canonical paths of files being read (for cycles) and already read (for diamonds).
    active: Vec<PathBuf>,
    /// Display names of `active`, for messages.
    active_names: Vec<String>,
    done: Vec<PathBuf>,
    /// In-memory files by name, instead of the file system.
    virtual_files: Option<std::collections::HashMap<String, String>>,
}

impl State {
    fn report(&mut self, at: Option<Span>, code: Code, msg: String, label: &str, help: &str) {
        let d = match at {
            Some(s) => Diagnostic::new(code, s, msg).label(label),
            None => Diagnostic::unlocated(code, msg),
        };
        self.diags.push(d.help(help));
    }

    fn file(&mut self, path: &Path, display: String, included_at: Option<Span>) {
        let display = if self.virtual_files.is_some() {
            normalize(&display)
        } else {
            display
        };
        let canonical = match &self.virtual_files {
            Some(_) => PathBuf::from(&display),
            None => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        };
        if let Some(pos) = self.active.iter().position(|p| *p == canonical) {
            let mut chain: Vec<String> = self.active_names[pos..]
                .iter()
                .map(|n| format!("`{n}`"))
                .collect();
            chain.push(format!("`{display}`"));
            let msg = format!("include cycle: {}", chain.join(" -> "));
            self.report(
                included_at,
                Code::IncludeCycle,
                msg,
                "include cycle",
                "remove one of the includes in the cycle",
            );
            return;
        }
        if self.done.contains(&canonical) {
            return;
        }
        if self.active.len() >= MAX_INCLUDE_DEPTH {
            let msg = format!("includes nested more than {MAX_INCLUDE_DEPTH} deep");
            self.report(
                included_at,
                Code::TooDeep,
                msg,
                "too deep",
                "flatten the include structure",
            );
            return;
        }
        if let Some(files) = &self.virtual_files {
            match files.get(&display).cloned() {
                Some(text) => self.text(canonical, display, text),
                None => {
                    let msg = format!("cannot read `{display}`: not among the embedded files");
                    self.report(
                        included_at,
                        Code::Unreadable,
                        msg,
                        "cannot be read",
                        "include paths are relative to the including file",
                    );
                }
            }
            return;
        }
        let too_large = |this: &mut Self, what: String| {
            let msg = format!("`{display}` {what} a description may have");
            this.report(
                included_at,
                Code::TooLarge,
                msg,
                "too large",
                "split the description with `include`",
            );
        };
        let size = std::fs::metadata(path).map(|m| m.len());
        let bytes = match size {
            Ok(n) if n > MAX_FILE_BYTES => {
                too_large(
                    self,
                    format!("is {n} bytes, more than the {MAX_FILE_BYTES}"),
                );
                return;
            }
            Ok(_) if path.is_dir() => Err(std::io::Error::other("it is a folder")),
            Ok(_) => read_at_most(path, MAX_FILE_BYTES),
            Err(e) => Err(e),
        };
        let bytes = match bytes {
            Ok(b) if b.len() as u64 > MAX_FILE_BYTES => {
                too_large(self, format!("is more than the {MAX_FILE_BYTES} bytes"));
                return;
            }
            other => other,
        };
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                let msg = format!("cannot read `{display}`: {}", io_words(&e));
                let help = if included_at.is_some() {
                    "include paths are relative to the including file"
                } else {
                    "check the path"
                };
                self.report(included_at, Code::Unreadable, msg, "cannot be read", help);
                return;
            }
        };
        match String::from_utf8(bytes) {
            Ok(text) => self.text(canonical, display, text),
            Err(e) => {
                let valid = e.utf8_error().valid_up_to();
                let lossy = String::from_utf8_lossy(e.as_bytes()).into_owned();
                let prefix_chars = String::from_utf8_lossy(&e.as_bytes()[..valid]).len();
                let file = self.sources.add(display.clone(), lossy);
                let span = Span::new(file, prefix_chars, prefix_chars + 1);
                let msg = format!("`{display}` is not UTF-8 text (invalid byte at offset {valid})");
                self.report(
                    Some(span),
                    Code::NotText,
                    msg,
                    "invalid byte",
                    "descriptions are UTF-8 text files; is this a binary file?",
                );
            }
        }
    }

    fn text(&mut self, canonical: PathBuf, display: String, text: String) {
        let file = self.sources.add(display.clone(), text);
        let parsed = crate::syntax::parse(file, &self.sources.file(file).text);
        let items = match parsed {
            Ok(items) => items,
            Err(d) => {
                self.diags.push(d);
                return;
            }
        };
        self.active.push(canonical.clone());
        self.active_names.push(display.clone());
        for item in items {
            if let Item::Include { path, span } = &item {
                let base = Path::new(&display).parent().unwrap_or(Path::new(""));
                let real_base = canonical.parent().unwrap_or(Path::new(""));
                let shown = base.join(path).display().to_string();
                self.file(&real_base.join(path), shown, Some(*span));
            } else {
                self.items.push(item);
            }
        }
        self.active.pop();
        self.active_names.pop();
        self.done.push(canonical);
    }

    fn finish(mut self, overrides: &Overrides) -> Result<Loaded, Failed> {
        if self.diags.has_errors() {
            self.diags.sort();
            return Err(Failed {
                sources: self.sources,
                diagnostics: self.diags,
            });
        }
        let (machine, spans, diags) = crate::check::check(&self.items, overrides);
        self.diags.extend(diags);
        match machine {
            Some(machine) if !self.diags.has_errors() => Ok(Loaded {
                machine,
                spans,
                sources: self.sources,
                warnings: self.diags,
            }),
            _ => Err(Failed {
                sources: self.sources,
                diagnostics: self.diags,
            }),
        }
    }
}

/// `a/./b/../c` -> `a/c`, with `/` separators.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split(['/', '\\']) {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

/// Reads up to `limit + 1` bytes, so device files and growing files cannot exhaust memory.
fn read_at_most(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn io_words(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => e.to_string().to_lowercase(),
    }
}

/// Parses `NAME=VALUE` as given to `--set` (VALUE: decimal, `0x` hex, or with a KiB/MiB/GiB suffix).
pub fn parse_override(s: &str) -> Result<(String, i64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE"))?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("`{name}` is not a parameter name"));
    }
    let v = value.trim().replace('_', "");
    let (digits, shift) = [("KiB", 10), ("MiB", 20), ("GiB", 30), ("TiB", 40)]
        .iter()
        .find_map(|(suf, sh)| v.strip_suffix(suf).map(|d| (d.trim().to_owned(), *sh)))
        .unwrap_or((v.clone(), 0));
    let parsed = match digits.strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16),
        None => digits.parse::<i64>(),
    };
    let n = parsed.map_err(|_| format!("`{value}` is not an integer"))?;
    let n = n
        .checked_mul(1i64 << shift)
        .ok_or_else(|| format!("`{value}` does not fit in 64 bits"))?;
    Ok((name.to_owned(), n))
}
