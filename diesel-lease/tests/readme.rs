//! Every Rust snippet of the README compiles: `src/readme.rs` holds each as a doctest (built by
//! `cargo test --doc`), and this test checks that the doctest's visible lines are exactly the
//! README's block, in order, so neither can change without the other.

use std::path::Path;

/// The ```rust blocks of the README, in order.
fn readme_blocks(readme: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in readme.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```rust") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), _) => block.push(line.to_owned()),
            (None, _) => {}
        }
    }
    blocks
}

/// The visible lines of each doctest in `src/readme.rs`, in order.
fn doctest_blocks(source: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in source.lines() {
        let Some(doc) = line.strip_prefix("///") else {
            continue;
        };
        let doc = doc.strip_prefix(' ').unwrap_or(doc);
        match (&mut current, doc.trim_end()) {
            (None, fence) if fence.starts_with("```") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(_), hidden) if hidden == "#" || hidden.starts_with("# ") => {}
            (Some(block), _) => block.push(doc.to_owned()),
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn every_readme_snippet_is_a_compiled_doctest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../README.md")).expect("README.md");
    let source = std::fs::read_to_string(root.join("src/readme.rs")).expect("src/readme.rs");
    let (readme, doctests) = (readme_blocks(&readme), doctest_blocks(&source));
    assert!(
        readme.len() >= 10,
        "found only {} README snippets",
        readme.len()
    );
    assert_eq!(
        readme.len(),
        doctests.len(),
        "each ```rust block of the README needs its doctest in src/readme.rs"
    );
    for (i, (shown, compiled)) in readme.iter().zip(&doctests).enumerate() {
        assert_eq!(
            shown,
            compiled,
            "README snippet {} differs from its doctest in src/readme.rs",
            i + 1
        );
    }
}
