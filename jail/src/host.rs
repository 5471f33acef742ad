//! What this host can enforce, read from the kernel (shared by `roostctl
//! doctor` and roostd's start-up report, so both say the same thing).

/// Landlock ABI version, `None` when Landlock is unavailable or disabled.
pub fn landlock_abi() -> Option<i32> {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // only returns a number.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    (abi > 0).then_some(abi as i32)
}

/// Whether seccomp filters can be installed.
pub fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP only reads this thread's mode.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

/// Soft and hard value of a resource limit (`None` = unlimited).
pub fn rlimit(resource: libc::__rlimit_resource_t) -> (Option<u64>, Option<u64>) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(resource, &mut limit) } != 0 {
        return (None, None);
    }
    let value = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    (value(limit.rlim_cur), value(limit.rlim_max))
}
