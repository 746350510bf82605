//! The repository stands alone: every rule id that a `.rs` or `.md` file cites (`ENG-28`,
//! `FC-V3`, `C-12`, ...) is defined in `docs/reference/`, and no file points at documents
//! outside the repository (a `.md` path that does not exist in it, a shared directory beside
//! the clone) or at issue numbers.
//!
//! Run it with `cargo test -p tests --test docs_reference`. When it fails, it names every
//! offending file and line: define the new rule in the right page of `docs/reference/` (one
//! list item, `- **ID Title.** what it guarantees`), or drop the citation.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The rule-id prefixes (`C` is the store conformance cases).
const PREFIXES: [&str; 11] = [
    "SM", "FC", "ACT", "ENG", "RT", "ST", "TM", "FLT", "DEF", "QU", "C",
];

fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Every `.rs` and `.md` file of the repository, outside build output and hidden directories.
fn source_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") || name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The rule ids in one line, as whole words: a known prefix, `-`, an optional capital letter,
/// digits.
fn rule_ids(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || chars.get(i - 1).is_none_or(|&c| !is_word(c));
        if !starts_word || !chars.get(i).is_some_and(char::is_ascii_uppercase) {
            i += 1;
            continue;
        }
        let mut j = i;
        while chars.get(j).is_some_and(char::is_ascii_uppercase) {
            j += 1;
        }
        let prefix: String = chars.get(i..j).unwrap_or_default().iter().collect();
        if !PREFIXES.contains(&prefix.as_str()) || chars.get(j) != Some(&'-') {
            i = j.max(i + 1);
            continue;
        }
        let mut k = j + 1;
        if chars.get(k).is_some_and(char::is_ascii_uppercase) {
            k += 1;
        }
        let digits_start = k;
        while chars.get(k).is_some_and(char::is_ascii_digit) {
            k += 1;
        }
        let ends_word = chars.get(k).is_none_or(|&c| !is_word(c));
        if k > digits_start && ends_word {
            found.push(chars.get(i..k).unwrap_or_default().iter().collect());
        }
        i = k.max(i + 1);
    }
    found
}

/// The rule ids `docs/reference/*.md` defines: those that open a list item or a heading
/// (`- **ENG-28 What is committed.** ...`), with where each is defined.
fn defined_ids(root: &Path) -> (BTreeMap<String, String>, Vec<String>) {
    let mut defined = BTreeMap::new();
    let mut duplicates = Vec::new();
    let reference = root.join("docs").join("reference");
    for path in source_files(&reference) {
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        let shown = display(root, &path);
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            let rest = if let Some(rest) = trimmed.strip_prefix("- **") {
                rest
            } else if trimmed.starts_with('#') {
                trimmed.trim_start_matches('#').trim_start()
            } else {
                continue;
            };
            let Some(id) = rule_ids(rest).into_iter().next() else {
                continue;
            };
            if !rest.starts_with(&id) {
                continue;
            }
            let at = format!("{shown}:{}", n + 1);
            if let Some(first) = defined.insert(id.clone(), at.clone()) {
                duplicates.push(format!("{id} is defined twice: {first} and {at}"));
            }
        }
    }
    (defined, duplicates)
}

fn display(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn every_cited_rule_id_is_defined_in_the_reference() {
    let root = repo_root();
    let (defined, duplicates) = defined_ids(&root);
    assert!(
        defined.len() > 250,
        "docs/reference defines only {} rule ids; is it there?",
        defined.len()
    );
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for path in source_files(&root) {
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            for id in rule_ids(line) {
                if !defined.contains_key(&id) {
                    missing.entry(id).or_default().push(format!(
                        "{}:{}",
                        display(&root, &path),
                        n + 1
                    ));
                }
            }
        }
    }
    let mut problems = duplicates;
    for (id, places) in &missing {
        problems.push(format!(
            "{id} is cited but not defined in docs/reference/ (at {})",
            places.join(", ")
        ));
    }
    assert!(
        problems.is_empty(),
        "{} problem(s) with rule ids; define each rule in docs/reference/ or drop the \
         citation:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The `.md` paths a line mentions (`docs/reference/engine.md`, `../docs/guide.md`,
/// `docs/reference/*.md`), URLs left out.
fn md_paths(line: &str) -> Vec<String> {
    let mut text = line.to_owned();
    for scheme in ["https://", "http://"] {
        while let Some(start) = text.find(scheme) {
            let end = text
                .get(start..)
                .and_then(|rest| rest.find(|c: char| c.is_whitespace() || ")>\"'`".contains(c)))
                .map_or(text.len(), |e| start + e);
            text.replace_range(start..end, " ");
        }
    }
    let path_char = |c: char| is_word(c) || "-./*".contains(c);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(pos) = rest.find(".md") {
        let (before, after) = rest.split_at(pos);
        let after = after.get(3..).unwrap_or_default();
        if !after.starts_with(is_word) {
            let start = before
                .char_indices()
                .rev()
                .take_while(|&(_, c)| path_char(c))
                .last()
                .map_or(before.len(), |(i, _)| i);
            let stem = before.get(start..).unwrap_or_default();
            if stem.chars().any(is_word) || stem.contains('*') {
                out.push(format!("{stem}.md"));
            }
        }
        rest = after;
    }
    out
}

/// Whether a mentioned path exists relative to the mentioning file's directory, any of its
/// ancestors up to the repository root, or the root. A `*` stands for any `.md` file of an
/// existing directory.
fn resolves(root: &Path, file: &Path, mention: &str) -> bool {
    let mut bases = Vec::new();
    let mut dir = file.parent();
    while let Some(d) = dir {
        bases.push(d.to_path_buf());
        if d == root {
            break;
        }
        dir = d.parent();
    }
    bases.push(root.to_path_buf());
    bases.iter().any(|base| {
        if let Some((dir_part, _)) = mention.rsplit_once('*') {
            let dir = base.join(dir_part.trim_end_matches(|c| c != '/'));
            fs::read_dir(dir).is_ok_and(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with(".md"))
            })
        } else {
            base.join(mention).is_file()
        }
    })
}

/// `issue 4`, `issue #5`, `issues #6` (any case).
fn issue_number(line: &str) -> Option<String> {
    let lower = line.to_ascii_lowercase();
    let mut from = 0;
    while let Some(pos) = lower.get(from..).and_then(|rest| rest.find("issue")) {
        let start = from + pos;
        from = start + 5;
        let before_ok = lower
            .get(..start)
            .and_then(|b| b.chars().next_back())
            .is_none_or(|c| !is_word(c));
        let mut after = lower.get(from..).unwrap_or_default();
        after = after.strip_prefix('s').unwrap_or(after);
        after = after.strip_prefix(' ').unwrap_or(after);
        after = after.strip_prefix('#').unwrap_or(after);
        let consumed = lower.len() - after.len();
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        let ends_ok = after
            .get(digits.len()..)
            .and_then(|a| a.chars().next())
            .is_none_or(|c| !is_word(c));
        if before_ok && !digits.is_empty() && ends_ok {
            return line.get(start..consumed + digits.len()).map(str::to_owned);
        }
    }
    None
}

#[test]
fn nothing_points_outside_the_repository() {
    let root = repo_root();
    // Built at run time so that this file does not contain them itself.
    let outside = [
        format!("{}/{}", "..", "shared"),
        format!("/work/{}", "shared"),
    ];
    let mut problems = Vec::new();
    let mut md_mentions = BTreeSet::new();
    // This file names bad references on purpose, in its scanner tests.
    let this = root.join("tests").join("tests").join("docs_reference.rs");
    for path in source_files(&root).into_iter().filter(|p| *p != this) {
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        let shown = display(&root, &path);
        for (n, line) in text.lines().enumerate() {
            let at = format!("{shown}:{}", n + 1);
            for dir in &outside {
                if line.contains(dir.as_str()) {
                    problems.push(format!("{at}: refers to `{dir}`, outside the repository"));
                }
            }
            for mention in md_paths(line) {
                md_mentions.insert(mention.clone());
                if !resolves(&root, &path, &mention) {
                    problems.push(format!(
                        "{at}: `{mention}` is not a file of the repository; link a page of \
                         docs/reference/ instead"
                    ));
                }
            }
            if let Some(issue) = issue_number(line) {
                problems.push(format!("{at}: cites an issue number (`{issue}`)"));
            }
        }
    }
    assert!(
        !md_mentions.is_empty(),
        "no `.md` mention found at all: is the scan looking at the repository?"
    );
    assert!(
        problems.is_empty(),
        "{} reference(s) to things outside the repository:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_scanners_find_what_they_should() {
    assert_eq!(
        rule_ids("see ENG-28, FC-V3 and C-12 (not XC-1, ENG-2x or ENG-)."),
        ["ENG-28", "FC-V3", "C-12"]
    );
    assert_eq!(rule_ids("SM-1..SM-5"), ["SM-1", "SM-5"]);
    assert_eq!(
        md_paths("`docs/reference/engine.md`, [x](https://e.invalid/a.md) and `spec/*.md`"),
        ["docs/reference/engine.md", "spec/*.md"]
    );
    assert_eq!(md_paths("name.ends_with(\".md\")"), Vec::<String>::new());
    assert_eq!(issue_number("(issue #5)").as_deref(), Some("issue #5"));
    assert_eq!(issue_number("Issue 4 says"), Some("Issue 4".to_owned()));
    assert_eq!(issue_number("an issue with 4 nodes"), None);
    let root = repo_root();
    let this = root.join("tests").join("tests").join("docs_reference.rs");
    assert!(resolves(&root, &this, "docs/reference/engine.md"));
    assert!(resolves(&root, &this, "docs/reference/*.md"));
    assert!(!resolves(&root, &this, "spec/*.md"));
    assert!(!resolves(&root, &this, "timers-and-faults.md"));
}
