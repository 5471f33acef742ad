//! `roostctl cluster nats-config`: what a NATS server needs to give each
//! roostd node a user of its own with only the subjects, streams and
//! buckets a node uses (an account of the cluster's own, one nkey per
//! node), written as a `nats-server` config fragment and one seed file per
//! node. Works offline; no roostd is asked.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::CliError;

/// The fragment's file name in `--out`.
pub const ACCOUNTS_FILE: &str = "roost-accounts.conf";

/// The NATS account the nodes share (nothing outside it sees a subject of
/// theirs).
const ACCOUNT: &str = "ROOST";

/// Writes `out/<node>.nk` for each node (kept when it exists, so a node
/// added later leaves the others' keys alone) and `out/roost-accounts.conf`
/// naming them all; says on `say` what it wrote and what to do with it.
pub fn write(nodes: &[String], out: &Path, say: &mut impl Write) -> Result<(), CliError> {
    if nodes.is_empty() {
        return Err(CliError::Usage(
            "name the cluster's nodes: roostctl cluster nats-config --node a --node b --out DIR"
                .into(),
        ));
    }
    for node in nodes {
        check_node(node)?;
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(twice) = nodes.iter().find(|n| !seen.insert(n.as_str())) {
        return Err(CliError::Usage(format!("node '{twice}' is named twice")));
    }
    std::fs::create_dir_all(out)
        .map_err(|e| CliError::Usage(format!("cannot make {}: {e}", out.display())))?;
    let mut users = Vec::new();
    for node in nodes {
        let seed_file = out.join(format!("{node}.nk"));
        let public = seed(&seed_file)?;
        users.push((node.clone(), public, seed_file));
    }
    let conf = out.join(ACCOUNTS_FILE);
    let named: Vec<(String, String)> = users
        .iter()
        .map(|(n, public, _)| (n.clone(), public.clone()))
        .collect();
    std::fs::write(&conf, accounts(&named))
        .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", conf.display())))?;
    writeln!(say, "wrote {}", conf.display())?;
    writeln!(
        say,
        "  include it in each NATS server's config (`include {ACCOUNTS_FILE}`, a path relative \
         to that file, beside `jetstream {{}}` and, beyond loopback, `tls {{}}`)"
    )?;
    for (node, _, seed_file) in &users {
        writeln!(
            say,
            "wrote {} (node {node}'s nkey seed, mode 600)",
            seed_file.display()
        )?;
    }
    writeln!(
        say,
        "  copy each to its node (e.g. /etc/roost/nats.nk, owned by roostd's user, mode 600) \
         and set in that node's roostd config:\n  cluster: {{nkey_file: /etc/roost/nats.nk}}"
    )?;
    Ok(())
}

/// A node name is a subject token of NATS and a roostd node name.
fn check_node(node: &str) -> Result<(), CliError> {
    let ok = !node.is_empty()
        && node.len() <= 63
        && node.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && node
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "'{node}' is not a node name: use lowercase letters, digits and '-' (at most 63), \
             as in cluster.node"
        )))
    }
}

/// The public key of the user nkey in `path`, made (mode 600) when the
/// file does not exist yet.
fn seed(path: &PathBuf) -> Result<String, CliError> {
    let shown = path.display();
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(CliError::Usage(format!(
                    "{shown} (mode {mode:o}) is readable by other users: chmod 600 it"
                )));
            }
            let pair = nkeys::KeyPair::from_seed(text.trim())
                .map_err(|e| CliError::Usage(format!("{shown} holds no nkey seed: {e}")))?;
            Ok(pair.public_key())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let pair = nkeys::KeyPair::new_user();
            let seed = pair
                .seed()
                .map_err(|e| CliError::Usage(format!("cannot make an nkey: {e}")))?;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| CliError::Usage(format!("cannot write {shown}: {e}")))?;
            writeln!(file, "{seed}")?;
            Ok(pair.public_key())
        }
        Err(e) => Err(CliError::Usage(format!("cannot read {shown}: {e}"))),
    }
}

/// `subjects` quoted, comma-separated (a NATS config list's items).
fn list(subjects: &[impl AsRef<str>]) -> String {
    subjects
        .iter()
        .map(|s| format!("\"{}\"", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `accounts { ROOST { … } }` fragment for `nodes` (name, public key).
///
/// Each node may subscribe only to what is addressed to it (its handed-over
/// requests, carried control calls, placed starts and drains, and its own
/// reply inboxes), publish requests to any node, journal tasks, use the
/// JetStream API of the account (but not delete or purge the registry,
/// the route table or the journal), write its own record in the node
/// registry, the route table and the artifact registry.
pub fn accounts(nodes: &[(String, String)]) -> String {
    let mut users = String::new();
    for (node, public) in nodes {
        let publish = [
            "roost.a2a.*".to_string(),
            "roost.a2a.*.cancel".into(),
            "roost.control.*".into(),
            "roost.start.*".into(),
            "roost.drain.*".into(),
            "roost.tasks.>".into(),
            "_INBOX_roost.>".into(),
            "$JS.API.>".into(),
            "$JS.ACK.>".into(),
            "$JS.FC.>".into(),
            format!("$KV.roost-nodes.{node}"),
            "$KV.roost-routes.>".into(),
            "$KV.roost-artifact-index.>".into(),
            "$O.roost-artifacts.>".into(),
        ];
        let deny = [
            "$JS.API.STREAM.DELETE.>",
            "$JS.API.STREAM.MSG.DELETE.>",
            "$JS.API.STREAM.PURGE.KV_roost-nodes",
            "$JS.API.STREAM.PURGE.KV_roost-routes",
            "$JS.API.STREAM.PURGE.KV_roost-artifact-index",
            "$JS.API.STREAM.PURGE.ROOST_TASKS",
        ];
        let subscribe = [
            format!("roost.a2a.{node}"),
            format!("roost.a2a.{node}.cancel"),
            format!("roost.control.{node}"),
            format!("roost.start.{node}"),
            format!("roost.drain.{node}"),
            format!("_INBOX_roost.{node}.>"),
        ];
        users.push_str(&format!(
            "      # node {node}\n      {{\n        nkey: \"{public}\"\n        permissions: {{\n          \
             publish: {{allow: [{}], deny: [{}]}}\n          subscribe: {{allow: [{}]}}\n        \
             }}\n      }}\n",
            list(&publish),
            list(&deny),
            list(&subscribe),
        ));
    }
    format!(
        "# roostd's cluster on NATS (roostctl cluster nats-config): the nodes'\n\
         # account and one user per node, each with only what a node uses.\n\
         # Nothing outside the {ACCOUNT} account sees its subjects, streams or\n\
         # buckets; give other clients other accounts.\n\
         accounts {{\n  {ACCOUNT} {{\n    jetstream: enabled\n    users: [\n{users}    ]\n  }}\n}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_gets_a_private_seed_kept_on_a_second_run_and_a_user_of_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("nats");
        let mut said = Vec::new();
        write(&["a".into(), "b".into()], &out, &mut said).expect("write");
        let seed_a = std::fs::read_to_string(out.join("a.nk")).expect("a.nk");
        let mode = std::fs::metadata(out.join("a.nk"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let public_a = nkeys::KeyPair::from_seed(seed_a.trim())
            .expect("seed")
            .public_key();
        let conf = std::fs::read_to_string(out.join(ACCOUNTS_FILE)).expect("conf");
        assert!(conf.contains(&public_a), "{conf}");
        assert!(conf.contains("\"roost.control.a\"") && conf.contains("\"$KV.roost-nodes.b\""));
        // The seed is never printed.
        let said = String::from_utf8(said).expect("utf8");
        assert!(!said.contains(seed_a.trim()), "{said}");
        // A node added later: a's key stays.
        write(&["a".into(), "b".into(), "c".into()], &out, &mut Vec::new()).expect("again");
        assert_eq!(
            std::fs::read_to_string(out.join("a.nk")).expect("a.nk"),
            seed_a
        );
        assert!(out.join("c.nk").is_file());
        // Bad names and a seed others can read are refused, naming the fix.
        for bad in ["A", "a.b", "a*", ">", ""] {
            let err = write(&[bad.into()], &out, &mut Vec::new()).expect_err(bad);
            assert!(err.to_string().contains("not a node name"), "{err}");
        }
        std::fs::set_permissions(out.join("b.nk"), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let err = write(&["b".into()], &out, &mut Vec::new()).expect_err("open seed");
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }
}
