//! A test of the workspace's shape: no circle of files within a crate
//! (ARCHITECTURE.md, "Layers point one way"). A file *uses* another when
//! its code (comments and its `#[cfg(test)] mod tests` left out) names a
//! path through it: `crate::a::b`, `super::a`, or an item of a
//! `crate::{..}` / `super::{..}` group. A circle is a set of files each
//! reachable from every other; a parent module naming its child and the
//! child its parent is one too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside a crate: `["store", "wal", "writer"]`.
type ModPath = Vec<String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn mod_path(src: &Path, file: &Path) -> ModPath {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of `text` without comments and without its test module.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
}

/// Every module path `code` names through `crate::` or `super::`, as seen
/// from the module `me` (whose file is a `mod.rs` or not).
fn named_paths(code: &str, me: &ModPath) -> Vec<ModPath> {
    let mut out = Vec::new();
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent(me))] {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| is_ident(c) || c == ':') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let first: String = item.trim().chars().take_while(|c| is_ident(*c)).collect();
                    if !first.is_empty() {
                        let mut p = base.clone();
                        p.push(first);
                        out.push(p);
                    }
                }
                continue;
            }
            let mut p = base.clone();
            let mut tail = rest;
            loop {
                let name: String = tail.chars().take_while(|c| is_ident(*c)).collect();
                if name.is_empty() {
                    break;
                }
                tail = &tail[name.len()..];
                p.push(name);
                match tail.strip_prefix("::") {
                    Some(t) => tail = t,
                    None => break,
                }
            }
            out.push(p);
        }
    }
    out
}

fn parent(me: &ModPath) -> ModPath {
    me[..me.len().saturating_sub(1)].to_vec()
}

/// The circles of files in the crate whose sources are under `src`.
fn circles(src: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<ModPath, PathBuf> = files
        .iter()
        .map(|f| (mod_path(src, f), f.clone()))
        .collect();
    let mut uses: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (me, file) in &modules {
        // `super` in `a/mod.rs` is the parent of `a`, as in `a.rs`.
        let code = code_of(&std::fs::read_to_string(file).expect("a source file is readable"));
        let targets = uses.entry(me.clone()).or_default();
        for path in named_paths(&code, me) {
            let file_of = (1..=path.len())
                .rev()
                .map(|k| path[..k].to_vec())
                .find(|p| modules.contains_key(p));
            if let Some(target) = file_of
                && &target != me
                && !target.is_empty()
            {
                targets.insert(target);
            }
        }
    }
    strongly_connected(&uses)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.into_iter().map(|m| m.join("/")).collect())
        .collect()
}

/// Tarjan's strongly connected components.
fn strongly_connected(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        graph: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a ModPath) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(next) = s.graph.get(v) {
            for w in next {
                let Some((w, _)) = s.graph.get_key_value(w) else {
                    continue;
                };
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_crate_has_a_circle_of_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("crates")).expect("the crates directory") {
        sources.push(entry.expect("a crate").path().join("src"));
    }
    let mut found = Vec::new();
    for src in sources.iter().filter(|s| s.is_dir()) {
        for circle in circles(src) {
            found.push(format!("{}: {}", src.display(), circle.join(" <-> ")));
        }
    }
    assert!(
        found.is_empty(),
        "files that use each other in a circle (move what both need into a file of its own):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_circle_is_found_and_a_one_way_arrow_is_not() {
    let dir = std::env::temp_dir().join(format!("uuidmap-circles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "use crate::b::Thing;\n").unwrap();
    std::fs::write(dir.join("b/mod.rs"), "use super::{a, c};\n").unwrap();
    std::fs::write(dir.join("c.rs"), "// crate::a::Other is only a comment\n").unwrap();
    let found = circles(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let mut circle = found[0].clone();
    circle.sort();
    assert_eq!(circle, ["a", "b"]);
}
