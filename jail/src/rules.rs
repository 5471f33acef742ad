//! The Landlock rules of one tool call: the system paths a tool may read
//! and execute (and `/dev/null` to write), the capsule's workdir and extra
//! paths, each opened through the fence (`fence.rs`) at this call, and TCP
//! connect to the allow-list's ports where the ABI has it.

use std::path::PathBuf;

use crate::{JailError, JailSpec, fence};

/// System paths a tool may read and execute from (when they exist). Secrets
/// such as `/etc/shadow` are outside every entry.
const SYSTEM_READ: [&str; 20] = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/dev/urandom",
    "/dev/zero",
];
/// Device files a tool may write.
const SYSTEM_WRITE: [&str; 1] = ["/dev/null"];

pub(crate) fn landlock(spec: &JailSpec) -> Result<landlock::RulesetCreated, JailError> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, Ruleset,
        RulesetAttr, RulesetCreatedAttr, Scope, path_beneath_rules,
    };
    let err = |e: &dyn std::fmt::Display| JailError::Landlock(e.to_string());
    let abi = ABI::V6;
    // The capsule's paths, each opened without following a link and held
    // against roostd's own files now, at this call; one that is gone is
    // left out (`path_beneath_rules` skips the system paths a host lacks).
    let granted = |paths: &mut dyn Iterator<Item = (&PathBuf, fence::Access, bool)>| {
        let mut opened = Vec::new();
        for (path, access, workdir) in paths {
            match spec.fence.open(path, access, workdir, libc::O_PATH) {
                Ok(file) => opened.push(file),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(JailError::Grant(e)),
            }
        }
        Ok(opened)
    };
    let read = granted(
        &mut spec
            .read_only
            .iter()
            .map(|p| (p, fence::Access::Read, false)),
    )?;
    let write = granted(
        &mut std::iter::once((&spec.workdir, fence::Access::Write, true)).chain(
            spec.read_write
                .iter()
                .map(|p| (p, fence::Access::Write, false)),
        ),
    )?;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| err(&e))?;
    if spec.tcp_connect_ports.is_some() {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(|e| err(&e))?;
    }
    let mut created =
        ruleset
            .scope(Scope::from_all(abi))
            .map_err(|e| err(&e))?
            .create()
            .map_err(|e| err(&e))?
            .add_rules(path_beneath_rules(SYSTEM_READ, AccessFs::from_read(abi)))
            .map_err(|e| err(&e))?
            .add_rules(path_beneath_rules(SYSTEM_WRITE, AccessFs::from_all(abi)))
            .map_err(|e| err(&e))?
            .add_rules(read.into_iter().map(|f| {
                Ok::<_, landlock::RulesetError>(PathBeneath::new(f, AccessFs::from_read(abi)))
            }))
            .map_err(|e| err(&e))?
            .add_rules(write.into_iter().map(|f| {
                Ok::<_, landlock::RulesetError>(PathBeneath::new(f, AccessFs::from_all(abi)))
            }))
            .map_err(|e| err(&e))?;
    for port in spec.tcp_connect_ports.iter().flatten() {
        created = created
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(|e| err(&e))?;
    }
    Ok(created)
}
