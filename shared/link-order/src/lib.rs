//! Links a binary's hot functions first, for the build scripts of the
//! `flotilla-worker` and `flotilla` binaries.
//!
//! The kernel maps a binary's code into a process 64 KiB at a time, so a
//! process whose start-up touches functions spread over the whole text
//! holds most of it resident. A binary's `link/symbol-order.txt` lists the
//! functions its processes run from start through their first work
//! (recorded by `scripts/symbol-order`); lld places them first, together,
//! and an idle process never maps the rest (docs/PERFORMANCE.md, "Idle
//! process memory").
//!
//! The list names mangled symbols of one toolchain's release build of the
//! workspace: a symbol it names that a build does not have is skipped
//! silently, so a stale list costs memory, never a failed link. Only lld
//! reads the list: it is passed where rustc links with its bundled lld
//! (x86_64 Linux GNU since Rust 1.90) and no other linker is configured;
//! `FLOTILLA_NO_SYMBOL_ORDER=1` turns it off.

use std::path::Path;
use std::process::Command;

/// From a build script: links binary `bin` of this package with the
/// functions its `link/symbol-order.txt` names first, where the linker is
/// rustc's bundled lld.
pub fn link_listed_functions_first(bin: &str) {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for build scripts");
    let list = Path::new(&manifest_dir).join("link/symbol-order.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rerun-if-env-changed=FLOTILLA_NO_SYMBOL_ORDER");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if std::env::var_os("FLOTILLA_NO_SYMBOL_ORDER").is_some_and(|v| v != "0") || !links_with_bundled_lld() {
        return;
    }
    println!("cargo:rustc-link-arg-bin={bin}=-Wl,--symbol-ordering-file={}", list.display());
    println!("cargo:rustc-link-arg-bin={bin}=-Wl,--no-warn-symbol-ordering");
}

/// Whether rustc links this build's target with its bundled lld.
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
    bundled_lld_default(&String::from_utf8_lossy(&out.stdout))
}

/// Whether `rustc --version` names a release that links x86_64 Linux GNU
/// with its bundled lld by default (1.90 and later).
fn bundled_lld_default(version: &str) -> bool {
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let mut numbers = version.split_whitespace().nth(1).unwrap_or_default().split(['.', '-']);
    let major = numbers.next().and_then(|n| n.parse::<u32>().ok());
    let minor = numbers.next().and_then(|n| n.parse::<u32>().ok());
    matches!((major, minor), (Some(1), Some(m)) if m >= 90) || major.is_some_and(|m| m > 1)
}

#[cfg(test)]
mod tests {
    use super::bundled_lld_default;

    #[test]
    fn only_releases_that_link_with_bundled_lld_get_the_order() {
        assert!(bundled_lld_default("rustc 1.95.0 (59807616e 2026-04-14)"));
        assert!(bundled_lld_default("rustc 1.90.0-nightly (abc 2025-07-01)"));
        assert!(!bundled_lld_default("rustc 1.89.0 (29483883e 2025-08-04)"));
        assert!(!bundled_lld_default(""));
        assert!(!bundled_lld_default("not rustc"));
    }
}
