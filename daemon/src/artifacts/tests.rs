//! Unit tests of `artifacts`: local skills, the hash and pin checks, the
//! bundle memo, and a session's table (list, describe, remove) without a
//! registry round trip.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::session::check_pin;
use super::skills::read_local_skill;
use super::stage::verify;
use super::*;

fn skill(name: &str, text: &str) -> Installed {
    let manifest = ArtifactManifest {
        name: name.into(),
        version: "1.0.0".into(),
        runtime: ArtifactRuntime::Skill,
        implementation: None,
        description: format!("{name} guidance"),
        tags: vec!["skill".into()],
        input_schema: None,
        output_schema: None,
        hook: None,
    };
    Installed {
        name: name.into(),
        version: "1.0.0".into(),
        runtime: ArtifactRuntime::Skill,
        implementation: None,
        sha256: Some("ab".repeat(32)),
        origin: Origin::Declared,
        manifest_yaml: String::new(),
        manifest,
        payload: Payload::Skill(text.into()),
    }
}

/// A session table over `items` in a fresh workdir, with an empty
/// directory registry; counts the times it reports a change.
fn table(items: Vec<Installed>) -> (tempfile::TempDir, SessionArtifacts, Arc<AtomicUsize>) {
    let root = tempfile::tempdir().expect("workdir");
    let dir = root.path().join(".murmur");
    std::fs::create_dir_all(dir.join("tools")).expect("bookkeeping");
    let registry = registry::open(&root.path().join("registry").display().to_string())
        .expect("directory registry");
    let changes = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&changes);
    let artifacts = SessionArtifacts::new(
        items,
        registry,
        root.path().to_path_buf(),
        dir,
        root.path().join(LOCK_FILENAME),
        1 << 20,
        Box::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        }),
    );
    (root, artifacts, changes)
}

#[test]
fn a_local_skill_is_a_file_or_a_directory_with_skill_md_in_any_case() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("guide.md");
    std::fs::write(&file, "use the file").expect("write");
    let root = dir.path();
    assert_eq!(
        read_local_skill("g", root, "guide.md").expect("file"),
        "use the file"
    );

    let folder = dir.path().join("skill");
    std::fs::create_dir(&folder).expect("mkdir");
    std::fs::write(folder.join("SKILL.MD"), "upper case").expect("write");
    assert_eq!(
        read_local_skill("g", root, "skill").expect("dir"),
        "upper case"
    );

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let error = read_local_skill("g", root, "empty").expect_err("no skill.md");
    assert!(
        matches!(error, ArtifactError::SkillNoSkillMd { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("has no skill.md"), "{error}");

    let error = read_local_skill("g", root, "absent").expect_err("absent");
    assert!(
        matches!(error, ArtifactError::SkillSourceMissing { .. }),
        "{error}"
    );
    // Outside the capsule directory, by spelling or by a link: refused.
    std::os::unix::fs::symlink("/etc/hostname", root.join("linked.md")).expect("link");
    assert!(
        std::fs::read("/etc/hostname").is_ok(),
        "the control: the target reads"
    );
    for source in ["/etc/hostname", "../x", "linked.md"] {
        let error = read_local_skill("g", root, source).expect_err(source);
        assert!(
            matches!(error, ArtifactError::SkillOutside { .. }),
            "{error}"
        );
    }
}

#[test]
fn the_registry_hash_is_checked_against_the_bytes() {
    let bytes = b"bundle bytes";
    let actual = sha256_hex(bytes);
    assert_eq!(
        verify("t", "1.0.0", bytes, &actual.to_uppercase()).expect("same hash, any case"),
        actual
    );
    let error = verify("t", "1.0.0", bytes, &"0".repeat(64)).expect_err("tampered");
    let text = error.to_string();
    assert!(matches!(error, ArtifactError::Integrity { .. }));
    assert!(text.contains(&actual) && text.contains("t@1.0.0"), "{text}");
}

#[tokio::test]
async fn a_pull_may_not_override_a_pin() {
    let dir = tempfile::tempdir().expect("dir");
    let lock_path = dir.path().join(LOCK_FILENAME);
    let (pinned, other) = ("ab".repeat(32), "cd".repeat(32));
    // No lock: nothing is pinned.
    check_pin(&lock_path, "t", "1.0.0", &pinned)
        .await
        .expect("no lock");
    let mut lock = MurmurLock::default();
    lock.pin(LockEntry {
        name: "t".into(),
        version: "1.0.0".into(),
        sha256: pinned.to_uppercase(),
    });
    lock.write_atomic(&lock_path).expect("lock");
    check_pin(&lock_path, "t", "1.0.0", &pinned)
        .await
        .expect("the pinned version and hash, any case");
    check_pin(&lock_path, "other", "2.0.0", &other)
        .await
        .expect("an unpinned name");
    let error = check_pin(&lock_path, "t", "1.1.0", &pinned)
        .await
        .expect_err("another version");
    assert!(matches!(error, CatalogError::Pinned { .. }), "{error}");
    assert!(error.to_string().contains("murmur.lock conflict for 't'"));
    let error = check_pin(&lock_path, "t", "1.0.0", &other)
        .await
        .expect_err("another hash");
    assert!(matches!(error, CatalogError::Pinned { .. }), "{error}");
}

#[test]
fn the_bundle_memo_remembers_by_hash() {
    let memo = BundleMemo::default();
    let item = skill("s", "text");
    assert!(memo.get("h1").is_none());
    memo.put("h1".into(), &item);
    let found = memo.get("h1").expect("remembered");
    assert_eq!(found.name, "s");
    assert!(memo.get("h2").is_none());
}

#[test]
fn a_session_lists_its_tools_and_skills_then_its_shell_binaries() {
    let (_root, artifacts, _) = table(vec![skill("guide", "be brief")]);
    let policy = CapabilityPolicy {
        shell_allow: vec!["ls".into(), "guide".into()],
        ..CapabilityPolicy::default()
    };
    let names: Vec<(String, bool)> = artifacts
        .list(&policy)
        .into_iter()
        .map(|s| (s.name, s.native))
        .collect();
    // A shell binary named like an installed artifact is not listed twice.
    assert_eq!(
        names,
        vec![("guide".to_string(), false), ("ls".to_string(), true)]
    );
    assert!(matches!(artifacts.target("guide", &policy), Target::Skill(t) if &*t == "be brief"));
    assert!(matches!(artifacts.target("ls", &policy), Target::Shell));
    assert!(matches!(artifacts.target("nope", &policy), Target::Missing));
    let info = artifacts.describe("guide", &policy).expect("installed");
    assert_eq!(
        (info.name.as_str(), info.description.as_str()),
        ("guide", "guide guidance")
    );
    let error = artifacts
        .describe("nope", &policy)
        .err()
        .expect("not installed");
    assert_eq!(error.to_string(), "artifact 'nope' is not installed");
}

#[tokio::test]
async fn a_run_time_remove_refuses_declared_artifacts_and_changes_nothing() {
    let (_root, artifacts, changes) = table(vec![skill("guide", "be brief")]);
    let error = artifacts.remove("guide").await.expect_err("declared");
    assert!(matches!(error, CatalogError::Declared(_)), "{error}");
    assert!(error.to_string().contains("remove it from `artifacts:`"));
    assert_eq!(artifacts.records().len(), 1, "still installed");
    assert!(
        !artifacts.remove("never-pulled").await.expect("unknown"),
        "nothing to remove"
    );
    assert_eq!(changes.load(Ordering::SeqCst), 0, "no change reported");
}

#[tokio::test]
async fn a_pull_with_a_bad_name_or_version_or_of_a_declared_version_is_refused_early() {
    let (_root, artifacts, changes) = table(vec![skill("guide", "be brief")]);
    let error = artifacts
        .fetch_for_pull("../x", "1.0.0")
        .await
        .err()
        .expect("bad name");
    assert!(matches!(error, CatalogError::Name(_)), "{error}");
    let error = artifacts
        .fetch_for_pull("guide", "one")
        .await
        .err()
        .expect("bad version");
    assert!(matches!(error, CatalogError::Version(_)), "{error}");
    let error = artifacts
        .fetch_for_pull("guide", "2.0.0")
        .await
        .err()
        .expect("declared at another version");
    assert!(
        matches!(error, CatalogError::DeclaredVersion { .. }),
        "{error}"
    );
    // Not in the (empty) registry.
    let error = artifacts
        .fetch_for_pull("absent", "1.0.0")
        .await
        .err()
        .expect("unknown artifact");
    assert!(matches!(error, CatalogError::Resolve { .. }), "{error}");
    assert_eq!(changes.load(Ordering::SeqCst), 0);
}
