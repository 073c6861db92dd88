//! The README's quickstarts are the compiled examples, word for word.

#![allow(clippy::unwrap_used)]

#[test]
fn the_readme_quickstarts_are_the_compiled_examples() {
    let readme = std::fs::read_to_string("README.md").unwrap();
    for example in [
        "examples/quickstart/src/lib.rs",
        "examples/quickstart-durable/src/lib.rs",
        "examples/quickstart-postgres/src/main.rs",
        "examples/quickstart-hyperdrive/src/lib.rs",
    ] {
        let code = std::fs::read_to_string(example).unwrap();
        assert!(
            readme.contains(&format!("```rust\n{code}```")),
            "README.md's quickstart differs from {example}: copy the file into it"
        );
    }
}
