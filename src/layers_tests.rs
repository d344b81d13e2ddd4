//! The layer rules of ARCHITECTURE.md, checked on the source: which
//! modules' non-test code may not import which.

use std::path::Path;

/// (importer, imported): `src/<importer>` must not say `crate::<imported>`.
const FORBIDDEN: &[(&str, &str)] = &[
    ("protocol", "policy"),
    ("policy", "protocol"),
    ("tls", "policy"),
    ("auth", "protocol"),
    ("session", "reactor"),
    ("session", "api"),
    ("core", "reactor"),
    ("core", "api"),
    ("core", "session"),
    ("target", "policy"),
    ("target", "protocol"),
];

/// Every `.rs` file under `dir` that is not test code.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
}

#[test]
fn layers_import_only_what_they_may() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (importer, imported) in FORBIDDEN {
        let mut files = Vec::new();
        sources(&src.join(importer), &mut files);
        if let Ok(single) = std::fs::metadata(src.join(format!("{importer}.rs"))) {
            if single.is_file() {
                files.push(src.join(format!("{importer}.rs")));
            }
        }
        assert!(!files.is_empty(), "no sources for {importer}");
        let needle = format!("crate::{imported}");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // Code after `#[cfg(test)]` at the top level is test code.
            let code = text.split("\n#[cfg(test)]").next().unwrap();
            for (i, line) in code.lines().enumerate() {
                let line = line.trim_start();
                if line.starts_with("//") {
                    continue;
                }
                let hit = line.match_indices(&needle).any(|(at, _)| {
                    let next = line[at + needle.len()..].chars().next();
                    !matches!(next, Some(c) if c.is_alphanumeric() || c == '_')
                });
                if hit {
                    broken.push(format!("{}:{}: {line}", file.display(), i + 1));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports against the layers:\n{}",
        broken.join("\n")
    );
}
