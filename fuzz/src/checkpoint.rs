//! An agent's checkpoints as a tool may leave them between sessions: files
//! under `checkpoints/` and the signatures file, all written by the fuzzer.
//! Beyond "no panic": a checkpoint the fuzzer wrote is never accepted (it
//! cannot know the key), a signed one is accepted until a byte of it
//! changes, and nothing outside the workdir is touched.

use roostd::agent::checkpoint::{CHECKPOINT_DIR, CheckpointKey, sign, verify};

/// One input.
pub fn run(data: &[u8]) {
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join("state");
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join(CHECKPOINT_DIR)).expect("checkpoints");
    std::fs::create_dir_all(work.join(".murmur")).expect("bookkeeping");
    std::fs::create_dir_all(&state).expect("state");
    let key = CheckpointKey::load_or_create(&state).expect("key");
    let (signatures, contents) = data.split_at(data.len() / 2);
    // The fuzzer's own checkpoint and signatures: never trusted.
    std::fs::write(work.join(CHECKPOINT_DIR).join("forged.json"), contents).expect("write");
    std::fs::write(work.join(".murmur/checkpoint-signatures.json"), signatures).expect("write");
    let rejected = verify(&key, &work);
    assert!(
        rejected.iter().any(|r| r.path == "forged.json"),
        "{rejected:?}"
    );
    // Signed, it is accepted; changed, it is not.
    let file = work.join(CHECKPOINT_DIR).join("kept.json");
    std::fs::write(&file, contents).expect("write");
    sign(&key, &work).expect("sign");
    assert!(
        verify(&key, &work).is_empty(),
        "a signed checkpoint is accepted"
    );
    let mut changed = contents.to_vec();
    match changed.first_mut() {
        Some(b) => *b ^= 1,
        None => changed.push(0),
    }
    std::fs::write(&file, &changed).expect("write");
    let rejected = verify(&key, &work);
    assert!(
        rejected
            .iter()
            .any(|r| r.path == "kept.json" && r.reason == "tampered"),
        "{rejected:?}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        2,
        "only state/ and work/"
    );
}
