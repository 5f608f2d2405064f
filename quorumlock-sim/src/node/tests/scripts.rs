//! The library's Lua scripts, read from its wire layer's sources: each
//! `script!` (and the fenced write's constant) with its `concat!` and
//! snippet macros (`announce_lua!`, `fence_lua!`, ...) expanded, so that
//! the differential test runs exactly what the library sends.

use std::collections::BTreeMap;
use std::path::Path;

/// Every script of the wire layer: its name (`RELEASE`) and source.
pub fn library_scripts() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../quorumlock/src/backend/redlock/wire");
    let mut text = String::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the library's wire layer")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .collect();
    files.sort();
    for file in files {
        let source = std::fs::read_to_string(&file).expect("a source file");
        text.push_str(source.split("\n#[cfg(test)]").next().unwrap_or_default());
        text.push('\n');
    }
    let macros = macro_bodies(&text);
    let mut scripts = Vec::new();
    for (at, _) in text.match_indices("script! {") {
        let block = &text[at..];
        let Some(line) = block
            .lines()
            .skip(1)
            .map(str::trim)
            .find(|l| !l.starts_with("///") && !l.starts_with("#["))
        else {
            continue;
        };
        let Some((name, _)) = line.split_once(" = ") else {
            continue;
        };
        let start = block.find(&format!("{name} = ")).expect("the line found above") + name.len() + 3;
        let mut rest = &block[start..];
        scripts.push((name.to_owned(), expression(&mut rest, &macros)));
    }
    if let Some(at) = text.find("const FENCED_WRITE: &str = ") {
        let mut rest = &text[at + "const FENCED_WRITE: &str = ".len()..];
        scripts.push(("FENCED_WRITE".to_owned(), expression(&mut rest, &macros)));
    }
    scripts
}

/// Each `macro_rules! name { () => { BODY }; }`'s body text.
fn macro_bodies(text: &str) -> BTreeMap<String, String> {
    let mut macros = BTreeMap::new();
    for (at, _) in text.match_indices("macro_rules! ") {
        let rest = &text[at + "macro_rules! ".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if let Some(arm) = rest.find("=> {") {
            macros.insert(name, rest[arm + 4..].to_owned());
        }
    }
    macros
}

fn skip_space(input: &mut &str) {
    *input = input.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
}

/// Evaluates the string expression at the start of `input` (a literal,
/// `concat!(...)` or a snippet macro), consuming it.
fn expression(input: &mut &str, macros: &BTreeMap<String, String>) -> String {
    skip_space(input);
    if let Some(rest) = input.strip_prefix("r\"") {
        let end = rest.find('"').expect("a closed raw string");
        *input = &rest[end + 1..];
        return rest[..end].to_owned();
    }
    if let Some(rest) = input.strip_prefix('"') {
        return escaped(input, rest);
    }
    let path: String = input
        .chars()
        .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '$'))
        .collect();
    *input = input[path.len()..].strip_prefix("!(").expect("a macro call");
    let name = path.rsplit("::").next().unwrap_or_default();
    if name == "concat" {
        let mut out = String::new();
        loop {
            skip_space(input);
            if let Some(rest) = input.strip_prefix(')') {
                *input = rest;
                return out;
            }
            out.push_str(&expression(input, macros));
        }
    }
    *input = input
        .strip_prefix(')')
        .expect("a snippet macro takes no arguments");
    let mut body = macros
        .get(name)
        .unwrap_or_else(|| panic!("no macro {name}"))
        .as_str();
    expression(&mut body, macros)
}

fn escaped<'a>(input: &mut &'a str, rest: &'a str) -> String {
    let mut out = String::new();
    let mut chars = rest.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                *input = &rest[i + 1..];
                return out;
            }
            '\\' => match chars.next().map(|(_, e)| e) {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => break,
            },
            c => out.push(c),
        }
    }
    panic!("an unterminated string")
}

#[test]
fn every_library_script_is_extracted_whole() {
    let scripts = library_scripts();
    let names: Vec<&str> = scripts.iter().map(|(n, _)| n.as_str()).collect();
    for expected in [
        "ACQUIRE",
        "RELEASE",
        "RENEW",
        "BATCH_IN_ORDER",
        "FENCED_ACQUIRE_OR_QUEUE",
        "FORCE_DELETE",
    ] {
        assert!(names.contains(&expected), "{names:?}");
    }
    assert_eq!(
        scripts.len(),
        17,
        "the 16 of SCRIPTS and the fenced write: {names:?}"
    );
    let (_, release) = scripts.iter().find(|(n, _)| n == "RELEASE").expect("RELEASE");
    assert!(release.starts_with("local announce_scan, announce_budget = 16, 256\n"));
    assert!(release.contains("local function announce(") && release.ends_with("return deleted\n"));
}
