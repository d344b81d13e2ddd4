//! Cargo build script (`build = "scripts/build.rs"`): lays out the release
//! binary's text so that the code it runs sits together.
//!
//! A page fault on a file-backed page maps the 64 KiB around it, and the code
//! that runs at start and on a tunnel's path is spread over most of a 3.4 MB
//! `.text`, so the proxy held about 2 MiB of text while it ran. With the
//! functions listed in `scripts/text-order.txt` (written by
//! `scripts/text-order.sh` from a callgrind run) placed first, it holds about
//! 0.75 MiB instead of 2.5. The list only orders: a function missing from it (renamed, or the
//! list made by another toolchain) is placed as usual, so a stale list costs
//! memory, never correctness.
//!
//! Only release builds of the binary on Linux, and only where the linker takes
//! `--symbol-ordering-file` (lld, Rust's default linker on x86-64 Linux since
//! 1.90): a probe link says so, and otherwise the build goes on without it.
//! `PORTCULLIS_TEXT_ORDER=off` turns it off (to measure the difference);
//! changing it also probes again (a linker chosen in a config file is not
//! seen by cargo's change tracking).

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=scripts/build.rs");
    println!("cargo:rerun-if-changed=scripts/text-order.txt");
    // What the probe's answer depends on: a cross build's linker and flags
    // do not rebuild this script, so they must rerun it.
    let target = env::var("TARGET").unwrap_or_default();
    let triple = target.to_uppercase().replace('-', "_");
    for var in [
        "PORTCULLIS_TEXT_ORDER".to_string(),
        "RUSTFLAGS".to_string(),
        "CARGO_ENCODED_RUSTFLAGS".to_string(),
        "CARGO_BUILD_RUSTFLAGS".to_string(),
        "RUSTC_WRAPPER".to_string(),
        format!("CARGO_TARGET_{triple}_LINKER"),
        format!("CARGO_TARGET_{triple}_RUSTFLAGS"),
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || env::var("PROFILE").as_deref() != Ok("release")
        || env::var("PORTCULLIS_TEXT_ORDER").as_deref() == Ok("off")
    {
        return;
    }
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let order = root.join("scripts/text-order.txt");
    if !order.is_file() {
        return;
    }
    let args = [
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ];
    match links_with(&args) {
        Ok(()) => {
            for a in &args {
                println!("cargo:rustc-link-arg-bins={a}");
            }
        }
        Err(why) => println!(
            "cargo:warning=the release binary's text is laid out as usual: a probe link \
             with --symbol-ordering-file (lld takes it) failed: {why}"
        ),
    }
}

/// Whether a trivial program links with `args` added, as the binary would be
/// linked: the same rustc (through its wrapper), target, linker and
/// RUSTFLAGS. The error is the first line rustc printed.
fn links_with(args: &[String]) -> Result<(), String> {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    let src = out.join("order_probe.rs");
    fs::write(&src, "fn main() {}\n").map_err(|e| e.to_string())?;
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = match env::var_os("RUSTC_WRAPPER").filter(|w| !w.is_empty()) {
        Some(wrapper) => {
            let mut c = Command::new(wrapper);
            c.arg(rustc);
            c
        }
        None => Command::new(rustc),
    };
    cmd.arg("--crate-type=bin")
        .arg("--crate-name=order_probe")
        .arg("-o")
        .arg(out.join("order_probe"))
        .arg(&src);
    if let Ok(target) = env::var("TARGET") {
        cmd.arg("--target").arg(target);
    }
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        let mut arg = OsString::from("linker=");
        arg.push(linker);
        cmd.arg("-C").arg(arg);
    }
    if let Ok(flags) = env::var("CARGO_ENCODED_RUSTFLAGS") {
        cmd.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    }
    for a in args {
        cmd.arg("-C").arg(format!("link-arg={a}"));
    }
    let done = cmd.output().map_err(|e| e.to_string())?;
    if done.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&done.stderr);
    // The linker's own complaint if there is one (`ld.bfd: unrecognized
    // option '--symbol-ordering-file=...'`), else rustc's first line; never
    // the command line, which names the option too.
    let mut lines = err
        .lines()
        .map(|l| l.trim().trim_start_matches("= note:").trim());
    let line = lines
        .clone()
        .find(|l| l.contains("symbol-ordering") && !l.starts_with('"'))
        .or_else(|| lines.find(|l| !l.is_empty()));
    Err(line.unwrap_or("no message").to_string())
}
