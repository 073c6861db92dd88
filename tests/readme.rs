//! The README's quickstart is the compiled example, word for word.

#![allow(clippy::unwrap_used)]

#[test]
fn the_readme_quickstart_is_the_compiled_example() {
    let readme = std::fs::read_to_string("README.md").unwrap();
    let example = std::fs::read_to_string("examples/quickstart/src/lib.rs").unwrap();
    assert!(
        readme.contains(&format!("```rust\n{example}```")),
        "README.md's quickstart differs from examples/quickstart/src/lib.rs: copy the file into it"
    );
}
