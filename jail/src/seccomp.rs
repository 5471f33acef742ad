//! The seccomp filters installed in the jail helper before exec: what Landlock
//! cannot express. Built with `seccompiler` (rust-vmm, as Firecracker does),
//! plus a small guard that seccompiler does not emit: x32 syscall numbers
//! (which would match none of the rules) kill the process.
//!
//! Sockets are an allow-list: `AF_INET`/`AF_INET6` only when the capsule
//! declares network access (TCP, and UDP only for DNS or a wildcard port;
//! never raw, SCTP, MPTCP or ICMP), `AF_UNIX` only when it asks for
//! `capabilities.network.unix_sockets`; every other family (netlink, packet,
//! vsock, …) is refused. Also refused (EPERM): io_uring, ptrace and
//! cross-process memory and descriptor access (`pidfd_getfd`, `kcmp`), bpf and perf events, mount and namespace
//! changes (`unshare`, `setns`, `clone` with namespace flags; `clone3` answers
//! ENOSYS so libc falls back to `clone`), keyrings, module and kexec loading,
//! `reboot`, swap, `userfaultfd` and `open_by_handle_at`. Any other
//! architecture than the build's is killed.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Syscalls refused outright.
const DENIED: &[libc::c_long] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    // Another process's descriptors or memory: roostd's, for a tool that is
    // root (`sandbox.tool_uids: null`).
    libc::SYS_pidfd_getfd,
    libc::SYS_process_madvise,
    libc::SYS_kcmp,
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
const CLONE_NAMESPACES: u64 = 0x0002_0000
    | 0x0200_0000
    | 0x0400_0000
    | 0x0800_0000
    | 0x1000_0000
    | 0x2000_0000
    | 0x4000_0000
    | 0x0000_0080;

/// Which sockets a tool may open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Sockets {
    /// `AF_INET`/`AF_INET6` TCP (the capsule declares network access).
    pub inet: bool,
    /// Also UDP (name resolution).
    pub udp: bool,
    /// `AF_UNIX` (`capabilities.network.unix_sockets`).
    pub unix: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("cannot build the seccomp filter: {0}")]
    Build(#[from] seccompiler::BackendError),
    #[error("cannot install the seccomp filter: {0}")]
    Install(#[from] seccompiler::Error),
}

fn dword(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

/// The rules of `socket(domain, type, protocol)` that refuse it: each rule is
/// a conjunction, any rule matching refuses.
fn socket_rules(sockets: Sockets) -> Result<Vec<SeccompRule>, SeccompError> {
    use SeccompCmpOp::{Eq, Ne};
    let mut families = Vec::new();
    if sockets.inet {
        families.extend([libc::AF_INET, libc::AF_INET6]);
    }
    if sockets.unix {
        families.push(libc::AF_UNIX);
    }
    if families.is_empty() {
        // No rule: every socket() is refused.
        return Ok(Vec::new());
    }
    // A family outside the list.
    let outside = families
        .iter()
        .map(|f| dword(0, Ne, *f as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rules = vec![SeccompRule::new(outside)?];
    if !sockets.inet {
        return Ok(rules);
    }
    let mut types = vec![libc::SOCK_STREAM];
    let mut protocols = vec![0, libc::IPPROTO_TCP];
    if sockets.udp {
        types.push(libc::SOCK_DGRAM);
        protocols.push(libc::IPPROTO_UDP);
    }
    for family in [libc::AF_INET, libc::AF_INET6] {
        // A type outside the list, with any combination of the two flags.
        let mut bad_type = vec![dword(0, Eq, family as u64)?];
        for ty in &types {
            for flags in [
                0,
                libc::SOCK_NONBLOCK,
                libc::SOCK_CLOEXEC,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            ] {
                bad_type.push(dword(1, Ne, (ty | flags) as u64)?);
            }
        }
        rules.push(SeccompRule::new(bad_type)?);
        // A protocol outside the list (SCTP, MPTCP, ICMP, UDP-Lite, raw …).
        let mut bad_protocol = vec![dword(0, Eq, family as u64)?];
        for protocol in &protocols {
            bad_protocol.push(dword(2, Ne, *protocol as u64)?);
        }
        rules.push(SeccompRule::new(bad_protocol)?);
    }
    Ok(rules)
}

/// The guard seccompiler does not emit: a foreign architecture or an x32
/// syscall number (0x40000000 up, below 0x50000000) kills the process;
/// everything else (`syscall(-1)` included, which the kernel answers ENOSYS)
/// passes on to the next filter.
fn guard() -> BpfProgram {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        insn(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        insn(JEQ, 1, 0, AUDIT_ARCH),
        insn(RET, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        insn(JGE, 0, 2, 0x4000_0000),
        insn(JGE, 1, 0, 0x5000_0000),
        insn(RET, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        insn(RET, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

/// The filters, in the order they are installed (the kernel runs all of them
/// and takes the strictest verdict): the guard, the EPERM rules, and the
/// ENOSYS answer for `clone3`.
pub fn programs(sockets: Sockets) -> Result<Vec<BpfProgram>, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|nr| (*nr, Vec::new())).collect();
    // Any namespace flag in clone's flags.
    rules.insert(libc::SYS_clone, clone_namespace_rules()?);
    rules.insert(libc::SYS_socket, socket_rules(sockets)?);
    let eperm = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;
    let enosys = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        ARCH,
    )?;
    Ok(vec![guard(), eperm.try_into()?, enosys.try_into()?])
}

/// `clone(flags, …)` with any namespace flag: one rule per flag (a rule is a
/// conjunction, the list a disjunction).
fn clone_namespace_rules() -> Result<Vec<SeccompRule>, SeccompError> {
    (0..64)
        .map(|bit| 1u64 << bit)
        .filter(|flag| CLONE_NAMESPACES & flag != 0)
        .map(|flag| {
            Ok(SeccompRule::new(vec![dword(
                0,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?])?)
        })
        .collect()
}

/// Installs the filters on this thread (requires `no_new_privs`, set before).
pub fn install(sockets: Sockets) -> Result<(), SeccompError> {
    for program in programs(sockets)? {
        seccompiler::apply_filter(&program)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Decodes the filters with a small classic-BPF interpreter and checks
    //! each rule's verdict, combined across filters as the kernel does.

    use super::*;

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

    /// `struct seccomp_data` as the filter sees it.
    fn data(arch: u32, nr: i64, args: [u64; 6]) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend((nr as i32).to_le_bytes());
        bytes.extend(arch.to_le_bytes());
        bytes.extend(0u64.to_le_bytes()); // instruction pointer
        for arg in args {
            bytes.extend(arg.to_le_bytes());
        }
        bytes
    }

    fn run(program: &[sock_filter], data: &[u8]) -> u32 {
        let word = |k: u32| {
            let at = k as usize;
            u32::from_le_bytes(data[at..at + 4].try_into().expect("in seccomp_data"))
        };
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let insn = program.get(pc).expect("the program ran off its end");
            let code = u32::from(insn.code);
            pc += 1;
            match code & 0x07 {
                libc::BPF_LD => {
                    assert_eq!(code, libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, "load");
                    acc = word(insn.k);
                }
                libc::BPF_ALU => {
                    assert_eq!(code, libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, "alu");
                    acc &= insn.k;
                }
                libc::BPF_JMP => {
                    let op = code & 0xf0;
                    if op == libc::BPF_JA {
                        pc += insn.k as usize;
                        continue;
                    }
                    assert_eq!(code & 0x08, libc::BPF_K, "jumps compare constants");
                    let taken = match op {
                        libc::BPF_JEQ => acc == insn.k,
                        libc::BPF_JGE => acc >= insn.k,
                        libc::BPF_JGT => acc > insn.k,
                        libc::BPF_JSET => acc & insn.k != 0,
                        other => panic!("jump op {other:#x}"),
                    };
                    pc += usize::from(if taken { insn.jt } else { insn.jf });
                }
                libc::BPF_RET => return insn.k,
                other => panic!("instruction class {other:#x}"),
            }
        }
    }

    /// Every filter's verdict, the strictest winning (lowest signed action).
    fn verdict(sockets: Sockets, arch: u32, nr: i64, args: [u64; 6]) -> u32 {
        let input = data(arch, nr, args);
        programs(sockets)
            .expect("filters")
            .iter()
            .map(|p| run(p, &input))
            .min_by_key(|ret| (ret & 0xffff_0000) as i32)
            .expect("at least one filter")
    }

    fn call(sockets: Sockets, nr: i64, args: [u64; 3]) -> u32 {
        verdict(
            sockets,
            AUDIT_ARCH,
            nr,
            [args[0], args[1], args[2], 0, 0, 0],
        )
    }

    fn socket(sockets: Sockets, domain: i32, ty: i32, protocol: i32) -> u32 {
        call(
            sockets,
            libc::SYS_socket,
            [domain as u64, ty as u64, protocol as u64],
        )
    }

    const NONE: Sockets = Sockets {
        inet: false,
        udp: false,
        unix: false,
    };
    const TCP: Sockets = Sockets {
        inet: true,
        udp: false,
        unix: false,
    };
    const TCP_UDP: Sockets = Sockets {
        inet: true,
        udp: true,
        unix: false,
    };
    const UNIX: Sockets = Sockets {
        inet: false,
        udp: false,
        unix: true,
    };

    #[test]
    fn foreign_architectures_and_x32_numbers_are_killed() {
        assert_eq!(verdict(NONE, 0x4000_0003, libc::SYS_read, [0; 6]), KILL);
        assert_eq!(
            verdict(NONE, AUDIT_ARCH, 0x4000_0000 | libc::SYS_socket, [0; 6]),
            KILL
        );
        assert_eq!(
            verdict(NONE, AUDIT_ARCH, 0x4000_0000 | libc::SYS_read, [0; 6]),
            KILL
        );
        assert_eq!(
            verdict(NONE, AUDIT_ARCH, -1, [0; 6]),
            ALLOW,
            "syscall(-1) is the kernel's to refuse (ENOSYS), not a kill"
        );
        assert_eq!(call(NONE, libc::SYS_read, [0; 3]), ALLOW);
        assert_eq!(call(NONE, libc::SYS_openat, [0; 3]), ALLOW);
    }

    #[test]
    fn each_denied_syscall_is_refused_and_clone3_answers_enosys() {
        for nr in DENIED {
            assert_eq!(call(TCP_UDP, *nr, [0; 3]), EPERM, "syscall {nr}");
        }
        assert_eq!(call(NONE, libc::SYS_clone3, [0; 3]), ENOSYS);
        // fork/thread creation stays; any namespace flag is refused.
        let thread = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
        assert_eq!(call(NONE, libc::SYS_clone, [thread, 0, 0]), ALLOW);
        assert_eq!(
            call(NONE, libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0]),
            ALLOW
        );
        for bit in 0..64 {
            let flag = 1u64 << bit;
            if CLONE_NAMESPACES & flag != 0 {
                assert_eq!(
                    call(NONE, libc::SYS_clone, [flag | libc::SIGCHLD as u64, 0, 0]),
                    EPERM,
                    "clone flag {flag:#x}"
                );
            }
        }
    }

    #[test]
    fn sockets_are_an_allow_list_of_families_types_and_protocols() {
        use libc::{
            AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_UNIX, AF_VSOCK, IPPROTO_ICMP,
            IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP, SOCK_CLOEXEC, SOCK_DGRAM, SOCK_NONBLOCK,
            SOCK_RAW, SOCK_SEQPACKET, SOCK_STREAM,
        };
        const IPPROTO_MPTCP: i32 = 262;
        // No network, no unix: nothing at all.
        for family in [AF_INET, AF_INET6, AF_UNIX, AF_NETLINK] {
            assert_eq!(socket(NONE, family, SOCK_STREAM, 0), EPERM, "{family}");
        }
        // Never, whatever the policy.
        for policy in [NONE, TCP, TCP_UDP, UNIX] {
            assert_eq!(socket(policy, AF_NETLINK, SOCK_RAW, 0), EPERM);
            assert_eq!(socket(policy, AF_NETLINK, SOCK_DGRAM, 0), EPERM);
            assert_eq!(socket(policy, AF_PACKET, SOCK_RAW, 0), EPERM);
            assert_eq!(socket(policy, AF_VSOCK, SOCK_STREAM, 0), EPERM);
            for family in [AF_INET, AF_INET6] {
                assert_eq!(socket(policy, family, SOCK_RAW, IPPROTO_ICMP), EPERM);
                assert_eq!(socket(policy, family, SOCK_SEQPACKET, 0), EPERM);
                assert_eq!(socket(policy, family, SOCK_STREAM, IPPROTO_SCTP), EPERM);
                assert_eq!(socket(policy, family, SOCK_STREAM, IPPROTO_MPTCP), EPERM);
                assert_eq!(socket(policy, family, SOCK_DGRAM, IPPROTO_ICMP), EPERM);
            }
        }
        for family in [AF_INET, AF_INET6] {
            for flags in [0, SOCK_CLOEXEC, SOCK_NONBLOCK | SOCK_CLOEXEC] {
                assert_eq!(socket(TCP, family, SOCK_STREAM | flags, 0), ALLOW);
                assert_eq!(socket(TCP, family, SOCK_STREAM | flags, IPPROTO_TCP), ALLOW);
                assert_eq!(socket(TCP, family, SOCK_DGRAM | flags, 0), EPERM);
                assert_eq!(socket(TCP_UDP, family, SOCK_DGRAM | flags, 0), ALLOW);
                assert_eq!(
                    socket(TCP_UDP, family, SOCK_DGRAM | flags, IPPROTO_UDP),
                    ALLOW
                );
            }
            assert_eq!(socket(UNIX, family, SOCK_STREAM, 0), EPERM);
        }
        // Unix sockets only when asked for, and then every type.
        assert_eq!(socket(TCP_UDP, AF_UNIX, SOCK_STREAM, 0), EPERM);
        assert_eq!(socket(TCP_UDP, AF_UNIX, SOCK_DGRAM, 0), EPERM);
        assert_eq!(socket(UNIX, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), ALLOW);
        assert_eq!(socket(UNIX, AF_UNIX, SOCK_DGRAM, 0), ALLOW);
        let both = Sockets { unix: true, ..TCP };
        assert_eq!(socket(both, AF_UNIX, SOCK_SEQPACKET, 0), ALLOW);
        assert_eq!(socket(both, AF_INET, SOCK_STREAM, 0), ALLOW);
        // socketpair() reaches no named socket; it stays.
        assert_eq!(
            call(NONE, libc::SYS_socketpair, [AF_UNIX as u64, 1, 0]),
            ALLOW
        );
    }
}
