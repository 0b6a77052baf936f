//! Links the worker's start-up and task-path functions next to each other.
//!
//! The kernel maps a binary's code into a process 64 KiB at a time, so an
//! idle worker whose start-up touches functions spread over the whole text
//! holds most of it resident. `link/symbol-order.txt` lists the functions a
//! worker runs from start to its first tasks (recorded by
//! `scripts/worker-symbol-order`); lld places them first, together, and the
//! rest of the text is never mapped by an idle worker
//! (docs/PERFORMANCE.md, "Idle worker memory").
//!
//! The list names mangled symbols of one toolchain's release build: a
//! symbol it names that a build does not have is skipped silently, so a
//! stale list costs memory, never a failed link. Only lld reads the list:
//! it is passed where rustc links with its bundled lld (x86_64 Linux GNU
//! since Rust 1.90), and `FLOTILLA_NO_SYMBOL_ORDER=1` turns it off.

use std::path::Path;
use std::process::Command;

fn main() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("link/symbol-order.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rerun-if-env-changed=FLOTILLA_NO_SYMBOL_ORDER");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if std::env::var_os("FLOTILLA_NO_SYMBOL_ORDER").is_some_and(|v| v != "0") || !links_with_bundled_lld() {
        return;
    }
    println!("cargo:rustc-link-arg-bin=flotilla-worker=-Wl,--symbol-ordering-file={}", list.display());
    println!("cargo:rustc-link-arg-bin=flotilla-worker=-Wl,--no-warn-symbol-ordering");
}

/// Whether rustc links this target with its bundled lld by default.
fn links_with_bundled_lld() -> bool {
    let target = std::env::var("TARGET").unwrap_or_default();
    // A configured linker (`target.<triple>.linker`, `-C linker=`, or a
    // changed linker flavour) may not be lld.
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if target != "x86_64-unknown-linux-gnu" || std::env::var_os("RUSTC_LINKER").is_some() || flags.contains("link") {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = String::from_utf8_lossy(&out.stdout);
    let minor = version.split_whitespace().nth(1).and_then(|v| v.split('.').nth(1)).and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}
