//! The quickstarts of the README and of the guides are the compiled
//! examples, word for word, and the README stays a five-minute read.

#![allow(clippy::unwrap_used)]

#[test]
fn the_quickstarts_are_the_compiled_examples() {
    for (document, example) in [
        ("README.md", "examples/quickstart/src/lib.rs"),
        (
            "docs/durable-objects.md",
            "examples/quickstart-durable/src/lib.rs",
        ),
        (
            "docs/postgres.md",
            "examples/quickstart-postgres/src/main.rs",
        ),
        (
            "docs/postgres.md",
            "examples/quickstart-hyperdrive/src/lib.rs",
        ),
    ] {
        let text = std::fs::read_to_string(document).unwrap();
        let code = std::fs::read_to_string(example).unwrap();
        assert!(
            text.contains(&format!("```rust\n{code}```")),
            "{document}'s quickstart differs from {example}: copy the file into it"
        );
    }
}

#[test]
fn the_readme_is_at_most_250_lines() {
    let lines = std::fs::read_to_string("README.md")
        .unwrap()
        .lines()
        .count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: move reference material into docs/ or the rustdoc"
    );
}
