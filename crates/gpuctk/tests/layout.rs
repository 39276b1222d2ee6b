//! The binary crate's module graph has no cycle: no module imports a module that imports it
//! back, directly or through others. Read from the crate's own `src/` (its `crate::`,
//! `super::` and `self::` paths, and a parent's paths into the children it declares), at two
//! grains: file by file, and by top-level module (a folder counts as one).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The module path of a source file under `src/`: `a.rs` and `a/mod.rs` are `a`, `a/b.rs` is
/// `a::b`. `None` for the crate roots (`lib.rs`, `main.rs`), which only declare and re-export.
fn module_of(rel: &Path) -> Option<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if parts.is_empty() && (stem == "lib" || stem == "main") {
        return None;
    }
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts.join("::"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments and without its unit tests (`#[cfg(test)] mod`,
/// which by convention ends the file): what the built crate imports.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            break;
        }
        let kept = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push_str(kept);
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses a path or use tree at `s[i..]` (after its first segment has been consumed into
/// `prefix`): `::a::b`, `::{a, b::{c, d}}`, `::*`. Pushes every full path; returns where it ended.
fn tree(s: &[char], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        if s.get(i) == Some(&':') && s.get(i + 1) == Some(&':') {
            i += 2;
            while s.get(i).is_some_and(|c| c.is_whitespace()) {
                i += 1;
            }
            if s.get(i) == Some(&'{') {
                i += 1;
                loop {
                    while s.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                        i += 1;
                    }
                    match s.get(i) {
                        None => return i,
                        Some('}') => return i + 1,
                        Some(c) if is_ident(*c) => {
                            let start = i;
                            while s.get(i).is_some_and(|c| is_ident(*c)) {
                                i += 1;
                            }
                            let seg: String = s[start..i].iter().collect();
                            let mut p = path.clone();
                            if seg != "self" {
                                p.push(seg);
                            }
                            i = tree(s, i, p, out);
                            // `as name`
                            while s.get(i).is_some_and(|c| *c != ',' && *c != '}') {
                                i += 1;
                            }
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            let start = i;
            while s.get(i).is_some_and(|c| is_ident(*c)) {
                i += 1;
            }
            if start == i {
                break;
            }
            path.push(s[start..i].iter().collect());
        } else {
            break;
        }
    }
    out.push(path);
    i
}

/// Every path in `code` that starts at one of `roots` (`crate`, `super`, `self`, or a child
/// module's name), as (root, rest).
fn paths(code: &str, roots: &BTreeSet<String>) -> Vec<(String, Vec<String>)> {
    let s: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if is_ident(s[i]) && (i == 0 || !(is_ident(s[i - 1]) || s[i - 1] == ':')) {
            let start = i;
            while i < s.len() && is_ident(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            if roots.contains(&word) && s.get(i) == Some(&':') && s.get(i + 1) == Some(&':') {
                let mut out = Vec::new();
                i = tree(&s, i, Vec::new(), &mut out);
                found.extend(out.into_iter().map(|p| (word.clone(), p)));
            }
        } else {
            i += 1;
        }
    }
    found
}

/// The module graph of the files `(module, text)`: an edge from each module to every other
/// module its code names.
fn graph(files: &[(String, String)]) -> Graph {
    let nodes: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut g = Graph::new();
    for (module, text) in files {
        let code = code(text);
        let here: Vec<String> = module.split("::").map(String::from).collect();
        // The children this file declares (`mod x;`) are reached by their bare name.
        let children: BTreeSet<String> = code
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l.strip_prefix("pub ").unwrap_or(l);
                let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
                l.strip_prefix("mod ")?.strip_suffix(';').map(String::from)
            })
            .collect();
        let mut roots: BTreeSet<String> = ["crate", "super", "self"].map(String::from).into();
        roots.extend(children.iter().cloned());
        let edges = g.entry(module.clone()).or_default();
        for (root, mut rest) in paths(&code, &roots) {
            let mut full = match root.as_str() {
                "crate" => Vec::new(),
                "self" => here.clone(),
                "super" => here[..here.len() - 1].to_vec(),
                child => {
                    let mut p = here.clone();
                    p.push(child.to_string());
                    p
                }
            };
            while rest.first().is_some_and(|s| s == "super") {
                rest.remove(0);
                full.pop();
            }
            full.extend(rest);
            // The longest prefix that is a module file.
            let target = (1..=full.len())
                .rev()
                .map(|n| full[..n].join("::"))
                .find(|p| nodes.contains(p));
            if let Some(t) = target.filter(|t| t != module) {
                edges.insert(t);
            }
        }
    }
    g
}

/// The same graph by top-level module: `commands::install` counts as `commands`.
fn top_level(g: &Graph) -> Graph {
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut out = Graph::new();
    for (from, tos) in g {
        let e = out.entry(top(from)).or_default();
        e.extend(tos.iter().map(|t| top(t)).filter(|t| *t != top(from)));
    }
    out
}

/// One cycle per strongly connected part of `g`, each as `a -> b -> a`.
fn cycles(g: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for start in g.keys() {
        if seen.contains(start) {
            continue;
        }
        // Shortest way back to `start` (breadth first), if any.
        let mut prev: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut closed = None;
        while let Some(n) = queue.pop_front() {
            for t in g.get(&n).into_iter().flatten() {
                if t == start {
                    closed = Some(n.clone());
                    break;
                }
                if !prev.contains_key(t) {
                    prev.insert(t.clone(), n.clone());
                    queue.push_back(t.clone());
                }
            }
            if closed.is_some() {
                break;
            }
        }
        if let Some(mut n) = closed {
            let mut cycle = vec![start.clone()];
            while n != *start {
                cycle.push(n.clone());
                n = prev[&n].clone();
            }
            cycle[1..].reverse();
            cycle.push(start.clone());
            seen.extend(cycle.iter().cloned());
            found.push(cycle.join(" -> "));
        }
    }
    found
}

#[test]
fn no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let files: Vec<(String, String)> = files
        .iter()
        .filter_map(|p| {
            let m = module_of(p.strip_prefix(&src).unwrap())?;
            Some((m, std::fs::read_to_string(p).unwrap()))
        })
        .collect();
    let g = graph(&files);
    // The reader sees the crate (so that an empty graph cannot pass): the runtime shim
    // imports the config.
    assert!(
        g.get("runtime").is_some_and(|e| e.contains("config")),
        "the module graph read from {} lacks runtime -> config: {g:#?}",
        src.display()
    );
    let mut bad = cycles(&g);
    bad.extend(
        cycles(&top_level(&g))
            .into_iter()
            .map(|c| format!("{c} (top level)")),
    );
    assert!(
        bad.is_empty(),
        "import cycles in crates/gpuctk/src: break each by moving what both sides use into a \
         module of its own:\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn reader_sees_every_path_form() {
    let files = [
        (
            "a".to_string(),
            "use crate::{b::{self, x}, c as d};\nmod e;\n// crate::f\nfn g() { e::h(); }\n"
                .to_string(),
        ),
        ("b".to_string(), "use super::a::y;\n".to_string()),
        ("c".to_string(), String::new()),
        (
            "a::e".to_string(),
            "fn h() { super::super::c::z() }\n".to_string(),
        ),
        ("f".to_string(), String::new()),
    ];
    let g = graph(&files);
    let edges = |m: &str| g[m].iter().cloned().collect::<Vec<_>>().join(",");
    assert_eq!(edges("a"), "a::e,b,c");
    assert_eq!(edges("b"), "a");
    assert_eq!(edges("a::e"), "c");
    assert_eq!(cycles(&g), vec!["a -> b -> a".to_string()]);
    assert!(cycles(&top_level(&g)).iter().any(|c| c == "a -> b -> a"));
}
