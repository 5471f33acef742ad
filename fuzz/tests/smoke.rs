//! Every fuzz target on the stable toolchain, in the normal suite: each of
//! its seeds (`fuzz/seeds/<target>/`), then `ROOST_FUZZ_SMOKE_SECS` seconds
//! (default 2) of inputs mutated from them (bits flipped, bytes set,
//! inserted and removed, pieces repeated, seeds spliced, cut short), from a
//! fixed seed so a run repeats. No coverage guides it (that is
//! `scripts/fuzz`, under libFuzzer); it keeps every target compiling,
//! running and passing on what it was seeded with. An input that fails is
//! left in `target/fuzz-smoke/<target>-<n>`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Largest input tried.
const MAX_LEN: usize = 64 << 10;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A small, fixed-seed generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// `input` changed in one to four ways.
fn mutate(rng: &mut Rng, input: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(out.len() + 1);
        match rng.below(7) {
            0 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] = [0, 0xFF, b'"', b'{', b'}', b'\n', b':', rng.next() as u8][rng.below(8)];
            }
            2 => out.insert(at, rng.next() as u8),
            3 if !out.is_empty() => {
                out.remove(at.min(out.len() - 1));
            }
            4 if !out.is_empty() => {
                let from = rng.below(out.len());
                let len = rng.below(out.len() - from + 1).min(256);
                let piece = out[from..from + len].to_vec();
                out.splice(at..at, piece);
            }
            5 if !seeds.is_empty() => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(other.len() + 1);
                out.truncate(at);
                out.extend_from_slice(&other[cut..]);
            }
            _ => out.truncate(at),
        }
    }
    out.truncate(MAX_LEN);
    out
}

/// Runs `input` through `run`; on a panic, keeps it and says where.
fn try_one(name: &str, run: fn(&[u8]), input: &[u8], n: usize) -> Result<(), String> {
    if catch_unwind(AssertUnwindSafe(|| run(input))).is_ok() {
        return Ok(());
    }
    let dir = repo().join("target/fuzz-smoke");
    let _ = std::fs::create_dir_all(&dir);
    let kept = dir.join(format!("{name}-{n}"));
    let _ = std::fs::write(&kept, input);
    Err(format!(
        "{name} failed on an input, kept in {}",
        kept.display()
    ))
}

#[test]
fn every_fuzz_target_passes_its_seeds_and_a_few_seconds_of_mutations() {
    let secs: u64 = std::env::var("ROOST_FUZZ_SMOKE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let mut failed = Vec::new();
    for &(name, run) in roost_fuzz::TARGETS {
        let dir = repo().join("fuzz/seeds").join(name);
        let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{name} has no seeds in {}: {e}", dir.display()))
            .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
            .collect();
        assert!(!seeds.is_empty(), "{name} has no seeds");
        seeds.sort();
        let mut runs = 0;
        for seed in &seeds {
            if let Err(e) = try_one(name, run, seed, runs) {
                failed.push(e);
            }
            runs += 1;
        }
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ name.len() as u64);
        let until = Instant::now() + Duration::from_secs(secs);
        let mut input = seeds[0].clone();
        while Instant::now() < until && failed.len() < 10 {
            if rng.below(8) == 0 {
                input = seeds[rng.below(seeds.len())].clone();
            }
            input = mutate(&mut rng, &input, &seeds);
            if let Err(e) = try_one(name, run, &input, runs) {
                failed.push(e);
                input = seeds[0].clone();
            }
            runs += 1;
        }
        eprintln!("{name}: {} seeds, {runs} runs", seeds.len());
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
