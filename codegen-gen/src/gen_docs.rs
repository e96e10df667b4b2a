//! The ISA manual generator (Markdown and HTML via handlebars).
