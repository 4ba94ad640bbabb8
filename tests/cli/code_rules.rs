//! Rules the source keeps that the compiler does not check (`STYLE.md`, issue 15): every `unsafe`
//! block or impl says why it is sound in a `// SAFETY:` comment just above it, and every
//! `unsafe fn` states its caller's side under `# Safety`.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `unsafe` uses of `text` without their comment: (line, text of the line).
fn unexplained(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut missing = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if !code.contains("unsafe ") && !code.contains("unsafe{") {
            continue;
        }
        if code.contains("unsafe_op_in_unsafe_fn") {
            continue;
        }
        let above = &lines[i.saturating_sub(6)..i];
        let needed = if code.contains("unsafe fn") { "# Safety" } else { "SAFETY:" };
        // A `SAFETY:` comment may also sit at the end of the line itself.
        if !above.iter().any(|l| l.contains(needed)) && !line.contains(needed) {
            missing.push((i + 1, line.trim().to_string()));
        }
    }
    missing
}

#[test]
fn every_unsafe_says_why_it_is_sound() {
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let mut missing = Vec::new();
    for f in &files {
        for (line, text) in unexplained(&std::fs::read_to_string(f).unwrap()) {
            missing.push(format!("{}:{line}: {text}", f.display()));
        }
    }
    assert!(missing.is_empty(), "unsafe without a SAFETY comment or # Safety section:\n{}", missing.join("\n"));
}

/// The rule itself: it finds an unexplained block and an undocumented `unsafe fn`, and accepts
/// explained ones.
#[test]
fn the_unsafe_rule_catches_what_it_should() {
    let bad = "fn f() {\n    let x = unsafe { g() };\n}\npub unsafe fn h() {}\n";
    assert_eq!(unexplained(bad).iter().map(|(l, _)| *l).collect::<Vec<_>>(), [2, 4]);
    let good = "fn f() {\n    // SAFETY: g has no preconditions.\n    let x = unsafe { g() };\n}\n/// # Safety\n/// none\npub unsafe fn h() {}\n";
    assert!(unexplained(good).is_empty());
}
