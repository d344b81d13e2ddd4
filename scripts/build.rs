//! Cargo build script (`build = "scripts/build.rs"`): lays out the release
//! binary's text so that the code it runs sits together.
//!
//! A page fault on a file-backed page maps the 64 KiB around it, and the code
//! that runs at start and on a tunnel's path is spread over most of a 3.4 MB
//! `.text`, so the proxy held about 2 MiB of text while it ran. With the
//! functions listed in `scripts/text-order.txt` (written by
//! `scripts/text-order.sh` from a callgrind run) placed first, it holds about
//! 0.6 MiB. The list only orders: a function missing from it (renamed, or the
//! list made by another toolchain) is placed as usual, so a stale list costs
//! memory, never correctness.
//!
//! Only release builds of the binary on Linux, and only where the linker takes
//! `--symbol-ordering-file` (lld, Rust's default linker on x86-64 Linux since
//! 1.90): a probe link says so, and otherwise the build goes on without it.
//! `PORTCULLIS_TEXT_ORDER=off` turns it off (to measure the difference).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=scripts/build.rs");
    println!("cargo:rerun-if-changed=scripts/text-order.txt");
    println!("cargo:rerun-if-env-changed=PORTCULLIS_TEXT_ORDER");
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
    if links_with(&args) {
        for a in &args {
            println!("cargo:rustc-link-arg-bins={a}");
        }
    } else {
        println!(
            "cargo:warning=the linker does not take --symbol-ordering-file (lld does): \
             the release binary's text is laid out as usual"
        );
    }
}

/// Whether a trivial program links with `args` added, as the binary would be
/// linked: the same rustc, target, linker and RUSTFLAGS.
fn links_with(args: &[String]) -> bool {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    let src = out.join("order_probe.rs");
    if fs::write(&src, "fn main() {}\n").is_err() {
        return false;
    }
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.arg("--crate-type=bin")
        .arg("--crate-name=order_probe")
        .arg("-o")
        .arg(out.join("order_probe"))
        .arg(&src);
    if let Ok(target) = env::var("TARGET") {
        cmd.arg("--target").arg(target);
    }
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        cmd.arg("-C")
            .arg(format!("linker={}", Path::new(&linker).display()));
    }
    if let Ok(flags) = env::var("CARGO_ENCODED_RUSTFLAGS") {
        cmd.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    }
    for a in args {
        cmd.arg("-C").arg(format!("link-arg={a}"));
    }
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
