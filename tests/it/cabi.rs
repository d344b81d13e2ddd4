//! The C ABI (src/capi, include/portcullis.h): the checked-in header is
//! what cbindgen makes of the source; the C example (under
//! AddressSanitizer) and the Python ctypes example relay a real request
//! through a proxy they start; a C program walks the boundary's edges.
//!
//! The C libraries are built here, on demand, with `cargo rustc --lib
//! --crate-type cdylib --crate-type staticlib` into this build's own
//! target directory and profile: the crate stays an rlib, so no other
//! build pays for linking them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::support::*;

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

/// The header cbindgen generates from src/capi now.
fn generated_header() -> String {
    let src = Path::new(MANIFEST).join("src/capi");
    let config = cbindgen::Config {
        language: cbindgen::Language::C,
        cpp_compat: true,
        include_guard: Some("PORTCULLIS_H".into()),
        autogen_warning: Some(
            "/* Generated from src/capi by cbindgen: do not edit. Regenerate with\n \
             * `PORTCULLIS_BLESS=1 cargo test --test it -- cabi::header`. */"
                .into(),
        ),
        header: Some(
            "/* portcullis: a sandbox egress proxy, embedded through its C ABI.\n \
             * See docs/embedding-c.md. Every function returns at once unless it\n \
             * says it waits; every pointer's ownership is stated on it. */"
                .into(),
        ),
        documentation: true,
        documentation_style: cbindgen::DocumentationStyle::Doxy,
        usize_is_size_t: true,
        sys_includes: vec!["stddef.h".into(), "stdint.h".into()],
        no_includes: true,
        enumeration: cbindgen::EnumConfig {
            prefix_with_name: true,
            rename_variants: cbindgen::RenameRule::ScreamingSnakeCase,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        // Its `mod` items bring in error.rs and events.rs.
        .with_src(src.join("mod.rs"))
        .generate()
        .expect("cbindgen parses src/capi")
        .write(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn header_is_current() {
    let path = Path::new(MANIFEST).join("include/portcullis.h");
    let fresh = generated_header();
    if std::env::var_os("PORTCULLIS_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "include/portcullis.h is stale (src/capi changed): regenerate it with \
         `PORTCULLIS_BLESS=1 cargo test --test it -- cabi::header` and commit it"
    );
    // Every exported function is in it, and nothing unprefixed.
    for line in fresh
        .lines()
        .filter(|l| l.contains('(') && !l.starts_with([' ', '/', '*']))
    {
        assert!(
            line.contains("portcullis_") || line.starts_with("typedef"),
            "{line}"
        );
    }
}

/// libportcullis.{so,a}, built once per test run. `None`: no cargo here.
fn c_libraries() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // This binary is TARGET_DIR/PROFILE_DIR/deps/it-HASH.
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let target_dir = profile_dir.parent().unwrap();
        let profile = match profile_dir.file_name().unwrap().to_str().unwrap() {
            "debug" => "dev".to_owned(),
            other => other.to_owned(),
        };
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        // Without the variables cargo sets for this test: build scripts
        // watch some (ring's, CARGO_MANIFEST_DIR), and a change would make
        // this build and the next `cargo test` rebuild each other's deps.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("CARGO_PKG_")
                || key.starts_with("CARGO_BIN_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_CRATE_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "OUT_DIR",
                ]
                .contains(&&*key)
            {
                cmd.env_remove(&*key);
            }
        }
        let out = cmd
            .current_dir(MANIFEST)
            .args([
                "rustc",
                "--lib",
                "--crate-type",
                "cdylib",
                "--crate-type",
                "staticlib",
            ])
            .arg("--profile")
            .arg(&profile)
            .arg("--target-dir")
            .arg(target_dir)
            // The crate itself unoptimised: a test of the boundary needs no
            // speed, and opt-level 1's codegen took four times as long (70 s
            // against 17 here), beside the other tests, on every CI run.
            // Its dependencies are the profile's, shared with the tests.
            .args(["--", "-C", "opt-level=0"])
            .output()
            .expect("run cargo");
        assert!(
            out.status.success(),
            "cargo rustc --crate-type cdylib,staticlib failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for lib in ["libportcullis.a", "libportcullis.so"] {
            assert!(profile_dir.join(lib).exists(), "{lib} not built");
        }
        profile_dir
    })
}

/// Whether `tool` runs; if not, the test is skipped (with the reason
/// printed) outside CI, and fails under it.
fn have(tool: &str, args: &[&str]) -> bool {
    let ok = Command::new(tool)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok || !strict(),
        "{tool} is missing (CI installs it: .ci/run)"
    );
    if !ok {
        eprintln!("skipped: {tool} is not installed");
    }
    ok
}

/// Compiles `source` with AddressSanitizer against the static library.
fn compile_c(source: &Path, dir: &TempDir) -> PathBuf {
    let exe = dir.path().join(source.file_stem().unwrap());
    let lib = c_libraries().join("libportcullis.a");
    let out = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-g",
            "-fsanitize=address",
        ])
        .arg("-fno-omit-frame-pointer")
        .arg("-I")
        .arg(Path::new(MANIFEST).join("include"))
        .arg(source)
        .arg(lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs a compiled C program under ASan (leaks checked); its output.
fn run_asan(cmd: &mut Command) -> Output {
    let out = cmd
        .env(
            "ASAN_OPTIONS",
            "detect_leaks=1:abort_on_error=0:exitcode=86",
        )
        .output()
        .expect("run the C program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status.code()
    );
    assert!(!stderr.contains("AddressSanitizer"), "{stderr}");
    out
}

#[test]
fn c_example_relays_a_request_under_asan() {
    if !have("cc", &["--version"]) {
        return;
    }
    let dir = TempDir::new("cabi-c");
    let exe = compile_c(&Path::new(MANIFEST).join("examples/c/embed.c"), &dir);
    let origin = Origin::echo_target();
    let out = run_asan(Command::new(&exe).arg(format!("127.0.0.1:{}", origin.port())));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The request reached the origin through the proxy, once: the second,
    // under the replaced policy, was refused by the proxy.
    assert!(
        stdout.contains("response: HTTP/1.1 200 OK | body: GET /hello"),
        "{stdout}"
    );
    assert!(stdout.contains("response: HTTP/1.1 403"), "{stdout}");
    assert!(stdout.contains("\"allowed\":1"), "{stdout}");
    assert!(stdout.contains("bad policy refused: "), "{stdout}");
    assert!(
        stdout.contains("first=200 second=403 sessions=2"),
        "{stdout}"
    );
    assert_eq!(origin.requests().len(), 1);
    assert_eq!(origin.requests()[0].target, "/hello");
}

#[test]
fn c_edges_of_the_abi_under_asan() {
    if !have("cc", &["--version"]) {
        return;
    }
    let dir = TempDir::new("cabi-misuse");
    let exe = compile_c(&Path::new(MANIFEST).join("tests/it/cabi/misuse.c"), &dir);
    let out = run_asan(&mut Command::new(&exe));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("0 failures\n"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

#[test]
fn python_example_relays_a_request() {
    if !have("python3", &["--version"]) {
        return;
    }
    let lib = c_libraries().join("libportcullis.so");
    let origin = Origin::echo_target();
    let out = Command::new("python3")
        .arg(Path::new(MANIFEST).join("examples/python/embed.py"))
        .arg(&lib)
        .arg(format!("127.0.0.1:{}", origin.port()))
        // urllib must use the proxy for a loopback origin too.
        .env_remove("no_proxy")
        .env_remove("NO_PROXY")
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("response: (200, 'GET /hello')"), "{stdout}");
    assert!(
        stdout.contains("first=200 second=403 sessions=2 decisions=allow,deny"),
        "{stdout}"
    );
    assert_eq!(origin.requests().len(), 1);
}

/// Two threads stopping one proxy: each returns only once it has stopped.
/// The second caller used to find the reactor taken by the first (still
/// draining an open session) and return at once, so a caller that freed
/// the proxy on its return freed it under the first one. An immediate
/// stop still cuts a graceful one short.
#[test]
fn a_second_stop_waits_for_the_first() {
    use portcullis::capi::*;
    use std::ffi::{CStr, CString};
    use std::io::Read;
    use std::net::TcpStream;

    struct P(*mut PortcullisProxy);
    // SAFETY: the C ABI allows calls on a proxy from any thread.
    unsafe impl Send for P {}
    unsafe impl Sync for P {}

    let toml = CString::new("[[listen]]\naddress = \"127.0.0.1:0\"\n[timeouts]\ndrain = \"60s\"\n")
        .unwrap();
    let mut p = std::ptr::null_mut();
    // SAFETY: valid string and out pointer.
    let st = unsafe { portcullis_start_toml(toml.as_ptr(), &mut p) };
    assert_eq!(st, PortcullisStatus::Ok);
    let mut addr = std::ptr::null_mut();
    // SAFETY: a live proxy; valid out pointer.
    assert_eq!(
        unsafe { portcullis_local_addr(p, 0, &mut addr) },
        PortcullisStatus::Ok
    );
    // SAFETY: a string from portcullis, freed once.
    let listen: std::net::SocketAddr = unsafe { CStr::from_ptr(addr) }
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    unsafe { portcullis_string_free(addr) };
    // An open session (a handshake under way) keeps a graceful stop draining.
    let mut held = TcpStream::connect(listen).unwrap();
    std::io::Write::write_all(&mut held, b"CONNECT ").unwrap();
    wait_for("the session open", PROMPTLY, || {
        let mut s = std::ptr::null_mut();
        // SAFETY: a live proxy; valid out pointer.
        unsafe { portcullis_stats_json(p, &mut s) };
        let json = unsafe { CStr::from_ptr(s) }.to_str().unwrap().to_owned();
        unsafe { portcullis_string_free(s) };
        json.contains("\"accepted\":1")
    });
    let proxy = std::sync::Arc::new(P(p));
    let first = {
        let proxy = std::sync::Arc::clone(&proxy);
        // SAFETY: a live proxy (freed only after both stops returned).
        std::thread::spawn(move || unsafe { portcullis_stop(proxy.0, 1) })
    };
    // The first stop has begun once the listener is closed.
    wait_for("the listener closed", PROMPTLY, || {
        TcpStream::connect(listen).is_err()
    });
    let second = {
        let proxy = std::sync::Arc::clone(&proxy);
        // SAFETY: as above.
        std::thread::spawn(move || unsafe { portcullis_stop(proxy.0, 1) })
    };
    // The session still drains: the second stop must not have returned.
    held.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 16];
    assert!(held.read(&mut buf).is_err(), "the session is still open");
    assert!(
        !second.is_finished(),
        "the second stop returned while the proxy drains"
    );
    // An immediate stop cuts the drain short: the session is closed, and
    // all three stops return.
    // SAFETY: a live proxy.
    assert_eq!(unsafe { portcullis_stop(proxy.0, 0) }, PortcullisStatus::Ok);
    assert_eq!(first.join().unwrap(), PortcullisStatus::Ok);
    assert_eq!(second.join().unwrap(), PortcullisStatus::Ok);
    held.set_read_timeout(Some(PROMPTLY)).unwrap();
    assert_eq!(held.read(&mut buf).ok(), Some(0), "the session was closed");
    // SAFETY: no other call is under way; freed once.
    unsafe { portcullis_free(proxy.0) };
}
