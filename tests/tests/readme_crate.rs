//! The README's `[dependencies]` block and complete program, built and run as a user's crate
//! is: a new crate whose manifest holds exactly that block, with the program as its
//! `src/main.rs`. The README is also a doctest of this package (`tests/src/lib.rs`), but there
//! it borrows this package's dev-dependencies; here it has only what the README lists, so a
//! crate the program uses and the block leaves out fails the build.
//!
//! The block's path dependency is rewritten to this workspace's crate of the same name. The
//! build is offline, with this workspace's `Cargo.lock` (the same versions) and a target
//! directory of its own under `target/`, kept between runs so that only the first one
//! compiles the dependencies.
//!
//! Run it with `cargo test -p tests --test readme_crate`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The body of the first fenced block opened by exactly `fence` after the heading `heading`.
fn block_after(text: &str, heading: &str, fence: &str) -> String {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("the README has no heading `{heading}`"));
    let mut lines = text[start..].lines();
    lines
        .by_ref()
        .find(|line| *line == fence)
        .unwrap_or_else(|| panic!("no `{fence}` block after `{heading}`"));
    let body: Vec<&str> = lines.take_while(|line| *line != "```").collect();
    body.join("\n") + "\n"
}

/// The README's dependency block with each `path = ".."` pointed at this workspace's crate of
/// the same name (the block names the clone beside the user's project).
fn dependencies_for_this_workspace(block: &str, root: &Path) -> String {
    let mut out = String::new();
    for line in block.lines() {
        if let Some(at) = line.find("path = \"") {
            let value_start = at + "path = \"".len();
            let value_end = value_start
                + line[value_start..]
                    .find('"')
                    .unwrap_or_else(|| panic!("an unterminated path in `{line}`"));
            let written = &line[value_start..value_end];
            let name = Path::new(written)
                .file_name()
                .unwrap_or_else(|| panic!("the path `{written}` names no crate"));
            let local = root.join(name);
            assert!(
                local.join("Cargo.toml").is_file(),
                "the README's path `{written}` names no crate of this workspace"
            );
            let local = local.to_string_lossy().replace('\\', "/");
            out.push_str(&line[..value_start]);
            out.push_str(&local);
            out.push_str(&line[value_end..]);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Writes the crate: a manifest with `dependencies`, the program, this workspace's lock file.
fn write_crate(dir: &Path, dependencies: &str, program: &str, root: &Path) {
    let manifest = format!(
        "[package]\nname = \"readme-program\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\
         publish = false\n\n[workspace]\n\n{dependencies}"
    );
    fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(dir.join("src/main.rs"), program).unwrap();
    fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
}

/// `cargo <verb> --offline` in `dir`, into the shared target directory.
fn cargo(dir: &Path, verb: &str, root: &Path) -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    Command::new(cargo)
        .arg(verb)
        .args(["--offline", "--quiet"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", root.join("target").join("readme-crate"))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_readme_program_builds_and_runs_with_only_the_dependencies_the_readme_lists() {
    let root = repo_root();
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    let block = block_after(&readme, "## Add it to your project", "```toml");
    assert!(
        block.starts_with("[dependencies]\n"),
        "the README's block is not a `[dependencies]` table:\n{block}"
    );
    let program = block_after(&readme, "## A complete program", "```rust");
    assert!(program.contains("fn main()"), "no program:\n{program}");
    let dependencies = dependencies_for_this_workspace(&block, &root);

    let dir = tempfile::tempdir().unwrap();
    write_crate(dir.path(), &dependencies, &program, &root);
    let run = cargo(dir.path(), "run", &root);
    assert!(
        run.status.success(),
        "the README's program does not build or run with its own [dependencies]:\n{dependencies}\n{}",
        text(&run.stderr)
    );
    let stdout = text(&run.stdout);
    assert!(
        stdout.contains("resumed 1") && stdout.contains("stateDiagram"),
        "the program printed:\n{stdout}"
    );

    // The check can fail: without any one of the crates the block lists, the build fails.
    for left_out in dependencies.lines().filter(|line| line.contains(" = ")) {
        let fewer: String = dependencies
            .lines()
            .filter(|line| *line != left_out)
            .map(|line| format!("{line}\n"))
            .collect();
        write_crate(dir.path(), &fewer, &program, &root);
        let build = cargo(dir.path(), "build", &root);
        assert!(
            !build.status.success(),
            "the program builds without `{left_out}`: the README lists a crate it does not use"
        );
    }
}
