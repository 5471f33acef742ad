//! The seccomp filter installed in the jail helper before exec: what Landlock
//! cannot express. It refuses (EPERM) UDP and raw sockets outside `AF_UNIX`,
//! io_uring, ptrace and cross-process memory access, bpf and perf events,
//! mount and namespace changes (`unshare`, `setns`, `clone` with namespace
//! flags; `clone3` answers ENOSYS so libc falls back to `clone`), keyrings,
//! module and kexec loading, `reboot`, swap and `userfaultfd`. Any other
//! architecture than the build's is killed.

use libc::{
    BPF_ABS, BPF_ALU, BPF_AND, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_RET, BPF_W,
    sock_filter, sock_fprog,
};

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = libc::SECCOMP_RET_ERRNO;

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// Low 32 bits of argument `i` (little-endian).
const fn arg(i: u32) -> u32 {
    16 + 8 * i
}

/// Syscalls refused outright.
const DENIED: &[libc::c_long] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
];

/// `CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER
/// | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME`.
const CLONE_NAMESPACES: u32 = 0x0002_0000
    | 0x0200_0000
    | 0x0400_0000
    | 0x0800_0000
    | 0x1000_0000
    | 0x2000_0000
    | 0x4000_0000
    | 0x0000_0080;

fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The filter program; `allow_udp` lets datagram sockets through (for name
/// resolution when the allow-list names a DNS port).
pub fn program(allow_udp: bool) -> Vec<sock_filter> {
    let eperm = RET_ERRNO | libc::EPERM as u32;
    let enosys = RET_ERRNO | libc::ENOSYS as u32;
    let mut p = vec![
        stmt(BPF_LD | BPF_W | BPF_ABS, ARCH),
        jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET | BPF_K, RET_KILL_PROCESS),
        stmt(BPF_LD | BPF_W | BPF_ABS, NR),
        // x32 syscall numbers (bit 30) would bypass the checks below.
        jump(BPF_JMP | BPF_JGE | BPF_K, 0x4000_0000, 0, 1),
        stmt(BPF_RET | BPF_K, RET_KILL_PROCESS),
    ];
    for nr in DENIED {
        p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, *nr as u32, 0, 1));
        p.push(stmt(BPF_RET | BPF_K, eperm));
    }
    p.push(jump(
        BPF_JMP | BPF_JEQ | BPF_K,
        libc::SYS_clone3 as u32,
        0,
        1,
    ));
    p.push(stmt(BPF_RET | BPF_K, enosys));
    // clone(flags, …): namespace flags refused.
    p.extend([
        jump(BPF_JMP | BPF_JEQ | BPF_K, libc::SYS_clone as u32, 0, 3),
        stmt(BPF_LD | BPF_W | BPF_ABS, arg(0)),
        jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_NAMESPACES, 0, 1),
        stmt(BPF_RET | BPF_K, eperm),
    ]);
    // The accumulator may hold an argument now; reload the number.
    p.push(stmt(BPF_LD | BPF_W | BPF_ABS, NR));
    // socket(domain, type, …): outside AF_UNIX only stream sockets (and
    // datagram ones when `allow_udp`); never raw or packet sockets.
    let mut types = vec![libc::SOCK_STREAM as u32];
    if allow_udp {
        types.push(libc::SOCK_DGRAM as u32);
    }
    let n = u8::try_from(types.len()).unwrap_or(u8::MAX);
    // Block after the first jump: ld, jeq unix, ld, and, n type checks, ret.
    let block = 4 + n + 1;
    p.extend([
        jump(BPF_JMP | BPF_JEQ | BPF_K, libc::SYS_socket as u32, 0, block),
        stmt(BPF_LD | BPF_W | BPF_ABS, arg(0)),
        jump(
            BPF_JMP | BPF_JEQ | BPF_K,
            libc::AF_UNIX as u32,
            block - 2,
            0,
        ),
        stmt(BPF_LD | BPF_W | BPF_ABS, arg(1)),
        stmt(BPF_ALU | BPF_AND | BPF_K, 0xf),
    ]);
    for (i, ty) in types.iter().enumerate() {
        let to_allow = n - u8::try_from(i).unwrap_or(0);
        p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, *ty, to_allow, 0));
    }
    p.push(stmt(BPF_RET | BPF_K, eperm));
    p.push(stmt(BPF_RET | BPF_K, RET_ALLOW));
    p
}

/// Installs the filter on this thread (requires `no_new_privs`, set before).
pub fn install(allow_udp: bool) -> std::io::Result<()> {
    let filter = program(allow_udp);
    let prog = sock_fprog {
        len: u16::try_from(filter.len()).map_err(std::io::Error::other)?,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `filter`, alive for the call; the kernel copies it.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const sock_fprog,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_the_program() {
        for allow_udp in [false, true] {
            let p = program(allow_udp);
            for (i, insn) in p.iter().enumerate() {
                if u32::from(insn.code) & 0x07 == BPF_JMP {
                    let far = i + 1 + usize::from(insn.jt.max(insn.jf));
                    assert!(far < p.len(), "jump at {i} leaves the program");
                }
            }
            let last = p.last().expect("non-empty");
            assert_eq!(u32::from(last.code), BPF_RET | BPF_K);
            assert_eq!(last.k, RET_ALLOW);
        }
    }
}
