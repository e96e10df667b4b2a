//! The docs' table of optimisation flags is made from the options table.

use std::path::Path;

const BEGIN: &str = "<!-- options:begin -->\n";
const END: &str = "<!-- options:end -->";

#[test]
fn the_docs_flag_table_is_the_options_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/compiler.md");
    let text = std::fs::read_to_string(&path).expect("docs/compiler.md is readable");
    let (Some(a), Some(b)) = (text.find(BEGIN), text.find(END)) else {
        panic!("docs/compiler.md has no `{BEGIN}` … `{END}` markers");
    };
    let table = compiler::lower::options::markdown_table();
    let now = &text[a + BEGIN.len()..b];
    if now != table && std::env::var_os("TESSERA_BLESS_DOCS").is_some() {
        let new = format!("{}{table}{}", &text[..a + BEGIN.len()], &text[b..]);
        std::fs::write(&path, new).expect("docs/compiler.md is writable");
        return;
    }
    assert_eq!(
        now, table,
        "docs/compiler.md's flag table is out of date: TESSERA_BLESS_DOCS=1 writes it"
    );
}

#[test]
fn the_docs_measured_effects_name_every_flag_once() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/compiler.md");
    let text = std::fs::read_to_string(&path).expect("docs/compiler.md is readable");
    let effects = &text[text.find(END).expect("markers")..];
    for i in compiler::lower::OPTIONS {
        let row = format!("| `--{}` |", i.flag);
        assert_eq!(
            effects.matches(&row).count(),
            1,
            "docs/compiler.md's table of measured effects has no single row for `--{}`",
            i.flag
        );
    }
}
