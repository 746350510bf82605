//! The crate's top-level modules are layered (`docs/reference/architecture.md`): a module uses
//! only modules of the layers below its own. This test reads the sources and the layering the
//! page documents, and fails naming every path that reaches sideways or up, and every cycle
//! those paths close.
//!
//! What counts as a use: a `crate::` (or `$crate::`) path, `use` or not, grouped
//! (`crate::{engine::x, store::y}`) or not, and a `super::` path that climbs to the crate
//! root; an item the crate root re-exports (`crate::Runtime`) counts as a use of the module
//! that defines it. Comments (doc links included), strings and character literals do not.
//! `src/tests/`, the crate's own unit tests, and `lib.rs`, the root, are above every layer.

// The scanner walks the sources by index and stops on a missing file or marker: each is a bug
// of this test or of the page, reported as a failure.
#![allow(clippy::indexing_slicing, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One use of a module: who (the top-level module and the file), where, which path, and the
/// module it reaches (`to` its top-level module, `target` up to two segments of its path:
/// `engine::executor`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Use {
    from: String,
    to: String,
    target: String,
    file: String,
    line: usize,
    path: String,
}

/// `source` without comments, string and character literals; newlines are kept, so line
/// numbers stay right.
fn strip(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&chars, i) {
            for &k in &chars[i..end] {
                if k == '\n' {
                    out.push('\n');
                }
            }
            out.push_str("\"\"");
            i = end;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}'), or a lifetime ('a), kept.
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                out.push_str("' '");
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                out.push_str("' '");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Where a raw string (`r"..."`, `r#"..."#`, `br"..."`) starting at `i` ends, if one does.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(chars.len())
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The leading segments (two at most) of every path of the use tree that starts at byte `at`
/// of `text`: `[engine, executor]` for `engine::executor::X`, one per leaf for
/// `{engine::x, store::{y, z}}`.
fn use_paths(text: &str, at: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let chars: Vec<char> = text[at..].chars().collect();
    let mut i = 0;
    tree(&chars, &mut i, Vec::new(), &mut out);
    out
}

/// Parses one use tree at `chars[*i]` under `prefix`, pushing its leaf paths onto `out`.
fn tree(chars: &[char], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let skip_space = |i: &mut usize| {
        while chars.get(*i).is_some_and(|c| c.is_whitespace()) {
            *i += 1;
        }
    };
    skip_space(i);
    if chars.get(*i) == Some(&'{') {
        *i += 1;
        loop {
            skip_space(i);
            match chars.get(*i) {
                None => return,
                Some('}') => {
                    *i += 1;
                    return;
                }
                Some(',') => *i += 1,
                Some(_) => {
                    let before = *i;
                    tree(chars, i, prefix.clone(), out);
                    if *i == before {
                        *i += 1;
                    }
                }
            }
        }
    }
    let start = *i;
    while chars.get(*i).is_some_and(|&c| is_ident(c)) {
        *i += 1;
    }
    let ident: String = chars[start..*i].iter().collect();
    if ident.is_empty() {
        if !prefix.is_empty() {
            out.push(prefix);
        }
        return;
    }
    let mut path = prefix;
    if path.len() < 2 {
        path.push(ident);
    }
    if chars.get(*i) == Some(&':') && chars.get(*i + 1) == Some(&':') {
        *i += 2;
        tree(chars, i, path, out);
    } else {
        // `as alias`, `;`, `(`, ...: the path ends here.
        out.push(path);
    }
}

/// The module path of a file relative to `src/`: `engine/executor.rs` is `[engine, executor]`,
/// `engine/mod.rs` is `[engine]`, `lib.rs` is `[]`.
fn module_path(relative: &str) -> Vec<String> {
    let mut parts: Vec<String> = relative.split('/').map(str::to_owned).collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

/// The module each name the crate root re-exports comes from, read from `lib.rs`'s top-level
/// `pub use <module>::...;` items (the `prelude` and hidden modules only repeat them).
fn root_reexports(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let text = strip(lib);
    let mut map = BTreeMap::new();
    let mut depth = 0usize;
    let mut i = 0;
    let bytes = text.as_bytes();
    while i < bytes.len() {
        match bytes[i] {
            b'{' => depth += 1,
            b'}' => depth = depth.saturating_sub(1),
            b'p' if depth == 0 && text.get(i..).is_some_and(|t| t.starts_with("pub use ")) => {
                let start = i + "pub use ".len();
                let end = text[start..].find(';').map_or(text.len(), |e| start + e);
                let item = &text[start..end];
                let module: String = item.chars().take_while(|&c| is_ident(c)).collect();
                if modules.contains(&module) {
                    for name in item.split(|c: char| !is_ident(c)).filter(|n| !n.is_empty()) {
                        map.entry(name.to_owned()).or_insert_with(|| module.clone());
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    map
}

/// Every use of another top-level module in the file at `relative` (path under `src/`).
fn uses_in(
    relative: &str,
    source: &str,
    modules: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
) -> Vec<Use> {
    let file_path = module_path(relative);
    let Some(from) = file_path.first().cloned() else {
        return Vec::new();
    };
    let text = strip(source);
    let resolve = |ident: &str| -> Option<String> {
        if modules.contains(ident) {
            Some(ident.to_owned())
        } else {
            reexports.get(ident).cloned()
        }
    };
    let mut found = Vec::new();
    let mut push = |base: &[String], leaf: Vec<String>, line: usize, written: String| {
        let mut path: Vec<String> = base.iter().cloned().chain(leaf).collect();
        let Some(first) = path.first() else { return };
        // The crate root's own items stand for the module that defines them.
        let to = if base.is_empty() {
            resolve(first)
        } else {
            Some(first.clone())
        };
        let Some(to) = to else { return };
        if base.is_empty() && !modules.contains(first) {
            path = vec![to.clone()];
        }
        path.truncate(2);
        found.push(Use {
            from: from.clone(),
            to,
            target: path.join("::"),
            file: relative.to_owned(),
            line,
            path: written,
        });
    };
    // Inline modules (`mod tests { ... }`) deepen the path `super::` climbs from.
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0usize;
    let mut line = 1usize;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let boundary = i == 0 || !is_ident(char::from(bytes[i - 1]));
        let here_text = text.get(i..).unwrap_or("");
        if b == b'\n' {
            line += 1;
        } else if b == b'{' {
            depth += 1;
        } else if b == b'}' {
            depth = depth.saturating_sub(1);
            while inline.last().is_some_and(|(d, _)| *d > depth) {
                inline.pop();
            }
        } else if boundary && here_text.starts_with("mod ") {
            let after = &here_text[4..];
            let name_end = after.find(|c: char| !is_ident(c)).unwrap_or(after.len());
            if after[name_end..].trim_start().starts_with('{') {
                inline.push((depth + 1, after[..name_end].to_owned()));
            }
        } else if boundary && here_text.starts_with("crate::") {
            let at = i + "crate::".len();
            for leaf in use_paths(&text, at) {
                let written = format!("crate::{}", leaf.join("::"));
                push(&[], leaf, line, written);
            }
            i = at;
            continue;
        } else if boundary && here_text.starts_with("super::") {
            let mut at = i;
            let mut climbs = 0;
            while text[at..].starts_with("super::") {
                climbs += 1;
                at += "super::".len();
            }
            let here: Vec<String> = file_path
                .iter()
                .cloned()
                .chain(inline.iter().map(|(_, name)| name.clone()))
                .collect();
            let base = &here[..here.len().saturating_sub(climbs)];
            for leaf in use_paths(&text, at) {
                let written = format!("{}{}", "super::".repeat(climbs), leaf.join("::"));
                push(base, leaf, line, written);
            }
            i = at;
            continue;
        }
        i += 1;
    }
    found.sort();
    found.dedup();
    found
}

/// The layers `docs/reference/architecture.md` documents, top first: the lines of the fenced
/// block between its `layers: begin` and `layers: end` markers, each a list of module names.
fn documented_layers(page: &str) -> Vec<Vec<String>> {
    let begin = page
        .find("<!-- layers: begin -->")
        .expect("docs/reference/architecture.md has a `<!-- layers: begin -->` marker");
    let end = page
        .find("<!-- layers: end -->")
        .expect("docs/reference/architecture.md has a `<!-- layers: end -->` marker");
    page[begin..end]
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("```"))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// Every `.rs` file under `dir`, as paths relative to `root` with `/` separators.
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(root, &path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let relative = path.strip_prefix(root).unwrap_or(&path);
            let parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push(parts.join("/"));
        }
    }
}

/// The crate's top-level modules: `src/x.rs` and `src/x/mod.rs`, without `lib` and `tests`.
fn top_level_modules(files: &[String]) -> BTreeSet<String> {
    files
        .iter()
        .filter_map(|f| module_path(f).first().cloned())
        .filter(|m| m != "tests")
        .collect()
}

/// The cycles among `uses`, each as `a -> b -> ... -> a` from its smallest module: from every
/// module, the shortest way back to it, if any.
fn cycles(uses: &[Use]) -> BTreeSet<String> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for u in uses.iter().filter(|u| u.to != u.from) {
        graph.entry(&u.from).or_default().insert(&u.to);
    }
    let mut found = BTreeSet::new();
    for &start in graph.keys() {
        // Breadth first from `start`, each module reached remembering where from.
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut frontier = vec![start];
        let mut back = None;
        while back.is_none() && !frontier.is_empty() {
            let mut next = Vec::new();
            for node in frontier {
                for &to in graph.get(node).into_iter().flatten() {
                    if to == start {
                        back = back.or(Some(node));
                    } else if !came_from.contains_key(to) {
                        came_from.insert(to, node);
                        next.push(to);
                    }
                }
            }
            frontier = next;
        }
        let Some(last) = back else { continue };
        let mut ring = vec![last];
        while let Some(&p) = came_from.get(ring[ring.len() - 1]) {
            ring.push(p);
        }
        if ring[ring.len() - 1] != start {
            ring.push(start);
        }
        ring.reverse();
        let min = (0..ring.len()).min_by_key(|&k| ring[k]).unwrap_or(0);
        ring.rotate_left(min);
        ring.push(ring[0]);
        found.insert(ring.join(" -> "));
    }
    found
}

/// What is wrong with `uses` under `layers` (top first): one line per use that reaches its own
/// layer or one above, per module the layering does not place, and per cycle.
fn violations(uses: &[Use], layers: &[Vec<String>], modules: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let height: BTreeMap<&str, usize> = layers
        .iter()
        .rev()
        .enumerate()
        .flat_map(|(h, layer)| layer.iter().map(move |m| (m.as_str(), h)))
        .collect();
    for m in modules {
        if !height.contains_key(m.as_str()) {
            problems.push(format!(
                "module `{m}` is not placed in the layering of docs/reference/architecture.md"
            ));
        }
    }
    for m in height.keys() {
        if !modules.contains(*m) {
            problems.push(format!(
                "docs/reference/architecture.md places `{m}`, which is not a module of the crate"
            ));
        }
    }
    for u in uses.iter().filter(|u| u.to != u.from) {
        let (Some(&from), Some(&to)) = (height.get(u.from.as_str()), height.get(u.to.as_str()))
        else {
            continue;
        };
        if to >= from {
            let where_ = if to == from {
                "in its own layer"
            } else {
                "in a layer above"
            };
            problems.push(format!(
                "`{}` uses `{}` ({where_}): src/{}:{} `{}`",
                u.from, u.to, u.file, u.line, u.path
            ));
        }
    }
    for cycle in cycles(uses) {
        problems.push(format!("import cycle: {cycle}"));
    }
    problems
}

/// The rules inside a module: the files under the first path (relative to `src/`) do not use
/// the module of the second. The activities talk to their scope, not to the executor that
/// implements it (`docs/reference/architecture.md`).
const INSIDE: &[(&str, &str)] = &[("engine/activities/", "engine::executor")];

/// The uses that break a rule of [`INSIDE`], one line each.
fn inside_violations(uses: &[Use]) -> Vec<String> {
    let mut problems = Vec::new();
    for (files, forbidden) in INSIDE {
        for u in uses
            .iter()
            .filter(|u| u.file.starts_with(files) && u.target == *forbidden)
        {
            problems.push(format!(
                "`{files}` uses `{forbidden}`: src/{}:{} `{}`",
                u.file, u.line, u.path
            ));
        }
    }
    problems
}

fn crate_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_top_level_module_uses_only_the_layers_below_it() {
    let src = crate_root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    let modules = top_level_modules(&files);
    assert!(
        modules.contains("engine") && modules.contains("store") && modules.contains("runtime"),
        "the scan found the crate's modules: {modules:?}"
    );
    let lib = fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs reads");
    let reexports = root_reexports(&lib, &modules);
    assert_eq!(
        reexports.get("Runtime").map(String::as_str),
        Some("runtime")
    );
    let page_path = crate_root().join("../docs/reference/architecture.md");
    let page = fs::read_to_string(&page_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", page_path.display()));
    let layers = documented_layers(&page);

    let mut uses = Vec::new();
    for file in &files {
        if file == "lib.rs" || file.starts_with("tests/") {
            continue;
        }
        let source = fs::read_to_string(src.join(file)).expect("a source file reads");
        uses.extend(uses_in(file, &source, &modules, &reexports));
    }
    assert!(
        uses.iter().any(|u| u.from == "runtime" && u.to == "engine"),
        "the scan sees the runtime's uses of the engine"
    );
    assert!(
        uses.iter()
            .any(|u| u.file.starts_with("engine/activities/") && u.target == "engine::graph"),
        "the scan sees the activities' uses of the graph"
    );
    let mut problems = violations(&uses, &layers, &modules);
    problems.extend(inside_violations(&uses));
    assert!(
        problems.is_empty(),
        "the module layering is broken:\n  {}",
        problems.join("\n  ")
    );
}

// ---- the scan itself ----------------------------------------------------------------------

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn layering(lines: &[&str]) -> Vec<Vec<String>> {
    lines
        .iter()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn a_path_up_the_layers_is_reported_with_its_file_line_and_the_cycle_it_closes() {
    let modules = names(&["engine", "runtime", "store"]);
    let reexports = BTreeMap::from([("Runtime".to_owned(), "runtime".to_owned())]);
    let engine = "use crate::store::Row;\n\nfn f() -> crate::Runtime { todo!() }\n";
    let runtime = "use crate::{engine::Executor, store};\n";
    let mut uses = uses_in("engine/executor.rs", engine, &modules, &reexports);
    uses.extend(uses_in("runtime/mod.rs", runtime, &modules, &reexports));
    let layers = layering(&["runtime", "engine", "store"]);
    let problems = violations(&uses, &layers, &modules);
    assert_eq!(
        problems,
        [
            "`engine` uses `runtime` (in a layer above): src/engine/executor.rs:3 `crate::Runtime`",
            "import cycle: engine -> runtime -> engine",
        ]
    );
}

#[test]
fn comments_strings_and_doc_links_are_not_uses() {
    let modules = names(&["engine", "runtime"]);
    let source = r##"
        //! See [`crate::runtime::Runtime`].
        /// Like [`crate::runtime`] /* crate::runtime */
        const A: &str = "crate::runtime::Runtime";
        const B: &str = r#"crate::runtime"#;
        const C: char = '"';
        fn f<'a>(x: &'a str) -> &'a str { x }
        /* outer /* nested crate::runtime */ still a comment crate::runtime */
    "##;
    let uses = uses_in("engine/mod.rs", source, &modules, &BTreeMap::new());
    assert_eq!(uses, Vec::<Use>::new());
}

/// The uses of `source` (the file `relative`) that leave its top-level module.
fn outward(relative: &str, source: &str, modules: &BTreeSet<String>) -> Vec<(String, usize)> {
    uses_in(relative, source, modules, &BTreeMap::new())
        .into_iter()
        .filter(|u| u.to != u.from)
        .map(|u| (u.to, u.line))
        .collect()
}

#[test]
fn super_paths_leave_the_module_only_when_they_climb_to_the_crate_root() {
    let modules = names(&["engine", "routing", "runtime"]);
    // In engine/activities/event.rs, `super::super` is `crate::engine`: inside the module.
    let inside = "use super::super::executor::Executor;\n";
    assert_eq!(outward("engine/activities/event.rs", inside, &modules), []);
    // From a top-level file, `super::` is the crate root.
    let up = "use super::routing::Stimulus;\n";
    assert_eq!(
        outward("workflow.rs", up, &modules),
        [("routing".to_owned(), 1)]
    );
    // Inside an inline `mod tests`, one more `super` is needed to leave the file.
    let nested = "mod tests {\n    use super::*;\n    use super::super::runtime::Runtime;\n}\n";
    assert_eq!(
        outward("engine/mod.rs", nested, &modules),
        [("runtime".to_owned(), 3)]
    );
}

#[test]
fn an_activity_that_reaches_the_executor_breaks_the_rule_inside_the_engine() {
    let modules = names(&["engine"]);
    let through_super = "use super::super::executor::Executor;\n";
    let through_crate =
        "fn f() {}\nuse crate::engine::{graph::Graph, executor::{RunError, Executor}};\n";
    let through_scope = "use super::scope::Scope;\nuse crate::engine::graph::Graph;\n";
    let mut uses = uses_in(
        "engine/activities/event.rs",
        through_super,
        &modules,
        &BTreeMap::new(),
    );
    uses.extend(uses_in(
        "engine/activities/time.rs",
        through_crate,
        &modules,
        &BTreeMap::new(),
    ));
    uses.extend(uses_in(
        "engine/activities/loops.rs",
        through_scope,
        &modules,
        &BTreeMap::new(),
    ));
    // The executor itself may use what it likes of the engine.
    uses.extend(uses_in(
        "engine/executor.rs",
        through_crate,
        &modules,
        &BTreeMap::new(),
    ));
    assert_eq!(
        inside_violations(&uses),
        [
            "`engine/activities/` uses `engine::executor`: src/engine/activities/event.rs:1 `super::super::executor::Executor`",
            "`engine/activities/` uses `engine::executor`: src/engine/activities/time.rs:2 `crate::engine::executor`",
        ]
    );
}

#[test]
fn a_module_the_layering_does_not_place_fails_and_so_does_one_of_a_single_layer() {
    let modules = names(&["clock", "engine", "fresh"]);
    let uses = uses_in(
        "clock.rs",
        "use crate::engine::x;\n",
        &modules,
        &BTreeMap::new(),
    );
    let layers = layering(&["clock engine"]);
    let problems = violations(&uses, &layers, &modules);
    assert_eq!(
        problems,
        [
            "module `fresh` is not placed in the layering of docs/reference/architecture.md",
            "`clock` uses `engine` (in its own layer): src/clock.rs:1 `crate::engine::x`",
        ]
    );
}

/// The methods a backend implements: the `fn` items of `pub trait Store`'s body (its
/// comments stripped), whether or not they have a default body.
fn store_trait_methods(source: &str) -> Vec<String> {
    let text = strip(source);
    let Some(start) = text.find("pub trait Store:") else {
        return Vec::new();
    };
    let body = &text[start..];
    let Some(open) = body.find('{') else {
        return Vec::new();
    };
    let mut depth = 0usize;
    let mut methods = Vec::new();
    let chars: Vec<char> = body[open..].chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            'f' if depth == 1
                && chars[i..].starts_with(&['f', 'n', ' '])
                && (i == 0 || !is_ident(chars[i - 1])) =>
            {
                let name: String = chars[i + 3..]
                    .iter()
                    .take_while(|c| is_ident(**c))
                    .collect();
                methods.push(name);
            }
            _ => {}
        }
        i += 1;
    }
    methods
}

#[test]
fn the_store_trait_has_at_most_thirty_methods() {
    let path = crate_root().join("src/store/backend.rs");
    let source = fs::read_to_string(&path).expect("src/store/backend.rs reads");
    let methods = store_trait_methods(&source);
    assert!(
        methods.len() >= 20,
        "the count found too few methods to be the trait's: {methods:?}"
    );
    assert!(
        methods.len() <= 30,
        "`Store` has {} methods, more than the thirty a backend should have to write \
         (an optional operation belongs in a capability trait): {methods:?}",
        methods.len()
    );
}
