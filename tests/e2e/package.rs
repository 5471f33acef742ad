//! The Debian package (`scripts/package`): unpacked into a scratch root
//! (`dpkg-deb -x`, as `dpkg -i` would lay it out, without touching this
//! host), its files where Debian and systemd look for them, and the
//! installed `roostd` and `roostctl` through a start/list/stop cycle on the
//! packaged defaults (the commented `/etc/roost/roost.yaml`; only the A2A
//! port is a free one), with the tool jail helper found in `/usr/lib/roost`.
//!
//! `scripts/test` builds the package first and sets
//! `ROOST_REQUIRE_PACKAGE=1`, so there a missing package fails the test;
//! a plain `cargo test` without one says so and skips it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::harness::{Daemon, repo, spinner};

/// The newest `target/debian/roost_*.deb` (or `$ROOST_DEB`).
fn package() -> Option<PathBuf> {
    if let Some(deb) = std::env::var_os("ROOST_DEB") {
        return Some(PathBuf::from(deb));
    }
    let dir = repo().join("target").join("debian");
    let mut debs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("roost_") && n.ends_with(".deb"))
        })
        .collect();
    debs.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    debs.pop()
}

fn run(binary: &Path, args: &[&str]) -> Output {
    Command::new(binary)
        .args(args)
        .env_remove("ROOST_SOCKET")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary.display()))
}

/// The section names of a 64-bit little-endian ELF file.
fn section_names(elf: &[u8]) -> Vec<String> {
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let u64_at =
        |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().expect("8 bytes")) as usize;
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3A), u16_at(0x3C), u16_at(0x3E));
    let header = |i: usize| shoff + i * shentsize;
    // Section headers: name at +0 (u32), offset at +0x18 (u64).
    let strtab = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .map(|i| {
            let name =
                u32::from_le_bytes(elf[header(i)..header(i) + 4].try_into().expect("4 bytes"))
                    as usize;
            let start = strtab + name;
            let end = start + elf[start..].iter().position(|b| *b == 0).expect("NUL");
            String::from_utf8_lossy(&elf[start..end]).into_owned()
        })
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_package_installs_where_debian_and_systemd_look_and_runs_on_its_defaults() {
    let Some(deb) = package() else {
        assert!(
            std::env::var_os("ROOST_REQUIRE_PACKAGE").is_none(),
            "no target/debian/roost_*.deb: build it with scripts/package"
        );
        eprintln!("skipped: no package (scripts/package builds it; scripts/test does)");
        return;
    };
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path().join("root");
    let unpacked = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&root)
        .status()
        .expect("run dpkg-deb");
    assert!(unpacked.success(), "dpkg-deb -x {}", deb.display());
    let info = Command::new("dpkg-deb")
        .arg("--info")
        .arg(&deb)
        .output()
        .expect("dpkg-deb --info");
    let control = text(&info.stdout);
    assert!(control.contains("Package: roost"), "{control}");
    assert!(
        control.contains("postinst"),
        "maintainer scripts: {control}"
    );

    for file in [
        "usr/bin/roostd",
        "usr/bin/roostctl",
        "usr/lib/roost/roost-jail",
        "usr/lib/systemd/system/roostd.service",
        "usr/lib/sysusers.d/roostd.conf",
        "usr/lib/tmpfiles.d/roostd.conf",
        "etc/roost/roost.yaml",
        "usr/share/bash-completion/completions/roostctl",
        "usr/share/zsh/vendor-completions/_roostctl",
        "usr/share/fish/vendor_completions.d/roostctl.fish",
        "usr/share/man/man1/roostctl.1.gz",
        "usr/share/man/man1/roostctl-start.1.gz",
        "usr/share/man/man8/roostd.8.gz",
        "usr/share/doc/roost/copyright",
    ] {
        assert!(root.join(file).is_file(), "the package has no /{file}");
    }
    let unit =
        std::fs::read_to_string(root.join("usr/lib/systemd/system/roostd.service")).expect("unit");
    assert!(
        unit.contains("\nExecStart=/usr/bin/roostd --config /etc/roost/roost.yaml"),
        "{unit}"
    );
    let copyright =
        std::fs::read_to_string(root.join("usr/share/doc/roost/copyright")).expect("copyright");
    assert!(copyright.contains("Apache License"), "{copyright}");
    for binary in [
        "usr/bin/roostd",
        "usr/bin/roostctl",
        "usr/lib/roost/roost-jail",
    ] {
        let bytes = std::fs::read(root.join(binary)).expect("binary");
        let stripped = !section_names(&bytes)
            .iter()
            .any(|n| n.starts_with(".debug"));
        println!(
            "package: /{binary} {:.1} MiB{}",
            bytes.len() as f64 / (1 << 20) as f64,
            if stripped { ", stripped" } else { "" }
        );
        assert!(stripped, "/{binary} carries debug info");
    }

    // What the postinst runs (sysusers, then tmpfiles), against the scratch
    // root: user and group roost, and /etc/roost with the packaged config
    // readable by that group only.
    for (tool, file) in [
        ("systemd-sysusers", "roostd.conf"),
        ("systemd-tmpfiles", "roostd.conf"),
    ] {
        let mut command = Command::new(tool);
        command.arg(format!("--root={}", root.display()));
        if tool == "systemd-tmpfiles" {
            command.arg("--create");
        }
        let status = command.arg(file).status().expect(tool);
        assert!(status.success(), "{tool} --root {file}");
    }
    let group = std::fs::read_to_string(root.join("etc/group")).expect("etc/group");
    let gid: u32 = group
        .lines()
        .find_map(|l| l.strip_prefix("roost:x:"))
        .and_then(|rest| rest.trim_end_matches(':').parse().ok())
        .unwrap_or_else(|| panic!("no group roost: {group}"));
    {
        use std::os::unix::fs::MetadataExt;
        for (path, mode) in [("etc/roost", 0o750), ("etc/roost/roost.yaml", 0o640)] {
            let meta = std::fs::metadata(root.join(path)).expect(path);
            assert_eq!((meta.mode() & 0o777, meta.gid()), (mode, gid), "/{path}");
        }
    }

    let roostd = root.join("usr/bin/roostd");
    let roostctl = root.join("usr/bin/roostctl");
    let packaged = root.join("etc/roost/roost.yaml");
    let checked = run(
        &roostd,
        &[
            "--check-config",
            "--config",
            packaged.to_str().expect("utf-8"),
            "--state-dir",
            scratch.path().join("check").to_str().expect("utf-8"),
        ],
    );
    assert!(
        checked.status.success(),
        "roostd --check-config on the packaged file: {}",
        text(&checked.stderr)
    );
    assert!(text(&checked.stdout).contains("a2a_listen: 127.0.0.1:7420"));

    // The packaged file as it ships (every line commented), on a free port.
    let mut config = std::fs::read_to_string(&packaged).expect("packaged config");
    config.push_str("\na2a_listen: 127.0.0.1:0\n");
    let daemon = Daemon::start_binary(&roostd, &config, &[]).await;
    let socket = daemon.socket.to_str().expect("utf-8").to_string();
    let ctl = |args: &[&str]| {
        let mut all = vec!["--socket", socket.as_str()];
        all.extend_from_slice(args);
        run(&roostctl, &all)
    };
    let capsule = spinner(daemon.root.path());
    let started = ctl(&[
        "start",
        capsule.to_str().expect("utf-8"),
        "--name",
        "packaged",
        "-q",
    ]);
    assert!(started.status.success(), "{}", text(&started.stderr));
    let id = text(&started.stdout).trim().to_string();
    let listed = ctl(&["list"]);
    let listing = text(&listed.stdout);
    assert!(
        listing.contains(&id) && listing.contains("packaged") && listing.contains("AGE"),
        "{listing}"
    );
    let stopped = ctl(&["stop", "packaged", "--json"]);
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    let record: serde_json::Value = serde_json::from_slice(&stopped.stdout).expect("json");
    assert_eq!(record["state"], "stopped");
    assert_eq!(ctl(&["status", "no-such-session"]).status.code(), Some(4));
    // roostd found its jail helper where the package put it.
    let log = daemon.log();
    let helper = root.join("usr/lib/roost/roost-jail");
    assert!(
        log.contains(&format!("helper={}", helper.display())),
        "roostd did not use {}:\n{log}",
        helper.display()
    );
}
