//! Every Rust snippet of the README compiles: `src/readme.rs` holds each as a doctest (built by
//! `cargo test --doc`), and this test checks that the doctest's visible lines are exactly the
//! README's block, in order, so neither can change without the other. The README stays the
//! crates.io page of a few screens, and every guide under `src/_guide/` is a module of
//! `_guide` whose examples are all compiled.

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
    assert!(!readme.is_empty(), "found no README snippet");
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

/// The README is the crates.io page: what, one example, the two commands, the feature table and
/// links, in a few screens (issue 56: at most 250 lines). Guides go to `src/_guide/`.
#[test]
fn the_readme_stays_a_few_screens() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: move the new text into its guide (src/_guide/)"
    );
}

/// Each guide file is a module of `_guide` (a file no module includes would never render nor
/// run), no guide example is left out of the doctests (`ignore`: make it run, or `no_run` and
/// name the test that runs it), and the guides hold at least one compiled example each on
/// average (a fence with only rustdoc's attributes is Rust; `sql`, `sh`, `toml`, `text` are not).
#[test]
fn every_guide_is_a_module_and_its_examples_are_compiled() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/_guide");
    let modules = std::fs::read_to_string(dir.join("mod.rs")).expect("src/_guide/mod.rs");
    let mut guides = 0;
    let mut rust_blocks = 0;
    for entry in std::fs::read_dir(&dir).expect("src/_guide") {
        let path = entry.expect("a guide").path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        guides += 1;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a file name");
        assert!(
            modules.contains(&format!("include_str!(\"{name}\")")),
            "src/_guide/{name} is not included by a module of src/_guide/mod.rs"
        );
        let text = std::fs::read_to_string(&path).expect("a guide");
        let mut open = false;
        for (n, line) in text.lines().enumerate() {
            let Some(fence) = line.trim_start().strip_prefix("```") else {
                continue;
            };
            if open {
                open = false;
                continue;
            }
            open = true;
            assert!(
                !fence.split(',').any(|attr| attr.trim() == "ignore"),
                "src/_guide/{name}:{}: an `ignore`d example is never compiled; make it run, or `no_run` with the test that runs it",
                n + 1
            );
            // rustdoc compiles a fence whose every attribute is one of its own.
            let rustdoc_attrs = [
                "rust",
                "no_run",
                "should_panic",
                "compile_fail",
                "edition2021",
            ];
            if fence
                .split(',')
                .map(str::trim)
                .all(|attr| attr.is_empty() || rustdoc_attrs.contains(&attr))
            {
                rust_blocks += 1;
            }
        }
        assert!(!open, "src/_guide/{name}: a code fence is not closed");
    }
    assert!(guides >= 13, "found {guides} guides in src/_guide/");
    assert!(
        rust_blocks >= 13,
        "found {rust_blocks} Rust examples in the guides"
    );
}
