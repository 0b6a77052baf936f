//! Figures about this process that its heartbeats carry: its resident
//! memory, read on each call so a beat shows the size at that moment.

/// Resident set size of this process in bytes: the resident pages of
/// `/proc/self/statm` times the page size. `None` where there is no such
/// file (every platform but Linux) or it cannot be read.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok()??;
    resident_of(&statm, u64::try_from(page).ok()?)
}

/// `statm`'s second field (resident pages) times `page_size`.
fn resident_of(statm: &str, page_size: u64) -> Option<u64> {
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    pages.checked_mul(page_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_size_is_the_second_statm_field_in_pages() {
        assert_eq!(resident_of("2620 1024 300 5 0 600 0\n", 4096), Some(4 << 20));
        assert_eq!(resident_of("2620", 4096), None);
        assert_eq!(resident_of("", 4096), None);
        if cfg!(target_os = "linux") {
            let rss = resident_bytes().expect("Linux has /proc/self/statm");
            assert!(rss > 1 << 20, "a test binary takes more than 1 MiB: {rss}");
        }
    }
}
