//! The ISA reference manual: Markdown and HTML, rendered with handlebars.
//!
//! The manual is laid out by two templates, `templates/manual.md.hbs` and
//! `templates/manual.html.hbs`, embedded with `include_str!` and rendered in
//! strict mode (a missing field is an error, never an empty string). Neither
//! template computes anything: this module builds a `Manual` view — plain
//! serde data, in model order, every text already written out — and the
//! templates only place it. Both formats render the same view, so they always
//! say the same things.
//!
//! [`expr_text`] and [`semantics_text`] write model expressions and
//! instruction semantics back as an architect would type them; other
//! generators use them for comments.

mod text;
mod view;

pub use text::{expr_text, semantics_text};

use crate::Ctx;
use handlebars::Handlebars;
use view::{Manual, manual};

const MARKDOWN_TEMPLATE: &str = include_str!("../../templates/manual.md.hbs");
const HTML_TEMPLATE: &str = include_str!("../../templates/manual.html.hbs");

/// Errors rendering the manual (a template bug, always a bug in this crate).
#[derive(Debug)]
pub struct DocError(pub String);

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot render the ISA manual (a bug in codegen-gen): {}",
            self.0
        )
    }
}

impl std::error::Error for DocError {}

/// The manual as GitHub-flavoured Markdown.
pub fn manual_markdown(ctx: &Ctx) -> Result<String, DocError> {
    render(MARKDOWN_TEMPLATE, markdown_escape, &manual(ctx))
}

/// The manual as one self-contained HTML page.
pub fn manual_html(ctx: &Ctx) -> Result<String, DocError> {
    render(HTML_TEMPLATE, html_escape, &manual(ctx))
}

fn render(template: &str, escape: fn(&str) -> String, view: &Manual) -> Result<String, DocError> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(escape);
    hb.register_template_string("manual", template)
        .map_err(|e| DocError(e.to_string()))?;
    hb.render("manual", view)
        .map_err(|e| DocError(e.to_string()))
}

/// Keeps text inside one cell of a GitHub table.
fn markdown_escape(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::text::{fmt_bytes, fmt_real};
    use super::view::segments;

    #[test]
    fn reals_read_well() {
        assert_eq!(fmt_real(4.915200000000001), "4.9152");
        assert_eq!(fmt_real(20.0), "20");
        assert_eq!(fmt_real(0.0003), "0.0003");
        assert_eq!(fmt_real(1142.857142), "1142.86");
    }

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(fmt_bytes(65536), "64 KiB");
        assert_eq!(fmt_bytes(32 << 30), "32 GiB");
        assert_eq!(fmt_bytes(1000), "1000 B");
    }

    #[test]
    fn doc_code_spans_split() {
        let s = segments("signals `s` on completion");
        let parts: Vec<(&str, bool)> = s.iter().map(|x| (x.text.as_str(), x.code)).collect();
        assert_eq!(
            parts,
            [("signals ", false), ("s", true), (" on completion", false)]
        );
    }
}
