//! The seccomp filter bubblewrap installs right before it starts a command
//! (`bwrap --seccomp FD`, docs/SANDBOX.md "Isolation").
//!
//! The namespaces already take most of these calls' power away, but each of
//! them is kernel attack surface a shell command never needs: ptrace and
//! cross-process memory access, (u)mounting and the new mount API, new
//! namespaces (`unshare`, `setns`, `clone` with any `CLONE_NEW*` flag), the
//! keyring, eBPF, perf events, userfaultfd, io_uring, kernel modules and
//! kexec, file handles (`open_by_handle_at` escaped containers before). They
//! fail with `EPERM`. `clone3` fails with `ENOSYS` instead, because its flags
//! sit in memory a filter cannot read: libc then falls back to `clone`, whose
//! flags it can. A syscall of another ABI (i386 or x32 on x86_64) kills the
//! process: the numbers below are only valid for the native one.
//!
//! The program is a hand-assembled classic BPF array (about 80 instructions);
//! no crate in the dependency tree builds seccomp filters.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::libc;
use nix::sys::memfd::{MFdFlags, memfd_create};

/// The fd number bubblewrap reads the program from, in the child.
pub const CHILD_FD: i32 = 3;

/// Syscalls that fail with `EPERM` inside the sandbox.
const BLOCKED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_acct,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_syslog,
    libc::SYS_quotactl,
];

/// Every `CLONE_NEW*` flag: `clone` with any of them fails with `EPERM`.
const CLONE_NEW_ANY: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// x32 syscalls on x86_64 carry this bit; they are another ABI.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// Low 32 bits of the first argument (little-endian).
const ARG0_LO: u32 = 16;

/// One `struct sock_filter`.
#[derive(Clone, Copy)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const fn stmt(code: u16, k: u32) -> Insn {
    Insn { code, jt: 0, jf: 0, k }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// The filter program.
fn program() -> Vec<Insn> {
    let eperm = RET_ERRNO | libc::EPERM as u32;
    let mut p = vec![
        stmt(LD_W_ABS, ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, NR),
        jump(JGE_K, X32_SYSCALL_BIT, 0, 1),
        stmt(RET_K, RET_KILL_PROCESS),
    ];
    for &nr in BLOCKED {
        p.push(jump(JEQ_K, nr as u32, 0, 1));
        p.push(stmt(RET_K, eperm));
    }
    p.push(jump(JEQ_K, libc::SYS_clone3 as u32, 0, 1));
    p.push(stmt(RET_K, RET_ERRNO | libc::ENOSYS as u32));
    p.extend([
        jump(JEQ_K, libc::SYS_clone as u32, 0, 3),
        stmt(LD_W_ABS, ARG0_LO),
        jump(JSET_K, CLONE_NEW_ANY, 0, 1),
        stmt(RET_K, eperm),
        stmt(RET_K, RET_ALLOW),
    ]);
    p
}

/// The program as bubblewrap reads it: `struct sock_filter`s, native endian.
fn bytes() -> Vec<u8> {
    let mut out = Vec::new();
    for i in program() {
        out.extend_from_slice(&i.code.to_ne_bytes());
        out.extend_from_slice(&[i.jt, i.jf]);
        out.extend_from_slice(&i.k.to_ne_bytes());
    }
    out
}

/// A fresh close-on-exec memfd holding the program (see [`memfd`]). One per
/// command: bubblewrap reads it to the end, moving the offset that every
/// duplicate shares.
pub fn program_fd() -> std::io::Result<OwnedFd> {
    memfd(c"flotilla-seccomp", &bytes())
}

/// A fresh close-on-exec memfd holding `data`, positioned at its start and
/// numbered above every fd the child keeps ([`child_keep_only`]), so neither
/// the child's stdio setup nor moving another fd into place can replace it.
pub fn memfd(name: &std::ffi::CStr, data: &[u8]) -> std::io::Result<OwnedFd> {
    let memfd = memfd_create(name, MFdFlags::MFD_CLOEXEC)?;
    let mut file = std::fs::File::from(memfd);
    file.write_all(data)?;
    // SAFETY: fcntl on an fd we own; the result is a new fd we then own.
    let fd = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, CHILD_FD + KEPT) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by F_DUPFD_CLOEXEC and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    nix::unistd::lseek(&fd, 0, nix::unistd::Whence::SeekSet)?;
    Ok(fd)
}

/// How many fds the child keeps above stdio: the program at [`CHILD_FD`] and
/// bubblewrap's argument file right after it.
const KEPT: i32 = 2;

/// Runs in the forked child right before `exec` (stdio is already on 0-2):
/// puts `fds[i]` at [`CHILD_FD`]` + i`, inheritable, and closes every other
/// fd above 2, so nothing the worker inherited or opened reaches the sandbox.
/// Every source is numbered above the targets ([`memfd`]), so no move
/// overwrites a source still to come. Only async-signal-safe calls.
pub fn child_keep_only(fds: [i32; KEPT as usize]) -> std::io::Result<()> {
    // SAFETY: plain syscalls on fd numbers; no allocation, no locks.
    unsafe {
        for (i, &fd) in fds.iter().enumerate() {
            let to = CHILD_FD + i as i32;
            if libc::dup2(fd, to) < 0 || libc::fcntl(to, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        if libc::syscall(libc::SYS_close_range, CHILD_FD + KEPT, u32::MAX, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_a_return() {
        let p = program();
        assert!(p.len() < 4096);
        for (i, insn) in p.iter().enumerate() {
            if insn.code & 0x07 == 0x05 {
                assert!(i + 1 + (insn.jt.max(insn.jf) as usize) < p.len(), "jump at {i} leaves the program");
            }
        }
        assert_eq!(p.last().unwrap().code, RET_K);
        assert_eq!(bytes().len(), p.len() * 8);
    }
}
