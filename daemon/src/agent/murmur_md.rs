//! `MURMUR.md`: what an agent capsule is told about itself (identity, model,
//! context budget, capabilities, tools and skills, compaction). Never secrets.

use std::fmt::Write;

use crate::manifest::AgentSpec;
use crate::policy::CapabilityPolicy;

/// File name, in the session's bookkeeping dir.
pub const MURMUR_MD: &str = "MURMUR.md";

/// Who the capsule is.
pub struct SessionFacts<'a> {
    pub name: &'a str,
    pub version: &'a str,
    pub session_id: &'a str,
    pub url: &'a str,
}

/// A tool or skill as listed.
pub struct Listed {
    pub name: String,
    pub description: String,
    pub skill: bool,
}

/// Renders MURMUR.md.
pub fn render(
    identity: &SessionFacts<'_>,
    spec: &AgentSpec,
    policy: &CapabilityPolicy,
    tools: &[Listed],
    compaction_hook: bool,
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# MURMUR.md\n");
    let _ = writeln!(md, "## Identity\n");
    let _ = writeln!(md, "- Capsule: {} {}", identity.name, identity.version);
    let _ = writeln!(md, "- Session: {}", identity.session_id);
    let _ = writeln!(md, "- A2A URL: {}\n", identity.url);
    let _ = writeln!(md, "## Model\n");
    let _ = writeln!(md, "- Model: {}", spec.model);
    let _ = writeln!(md, "- Driver: {}", spec.driver);
    if let Some(endpoint) = &spec.endpoint {
        let _ = writeln!(md, "- Endpoint: {endpoint}");
    }
    let _ = writeln!(md, "- Max turns per task: {}", spec.max_turns);
    if spec.context_tokens > 0 {
        let _ = writeln!(md, "- Context budget: {} tokens", spec.context_tokens);
    } else {
        let _ = writeln!(md, "- Context budget: not set (no compaction)");
    }
    if let Some(max) = spec.max_total_tokens {
        let _ = writeln!(md, "- Token budget for the session: {max}");
    }
    let compaction = match (spec.context_tokens > 0, compaction_hook) {
        (false, _) => "not configured (context.max_tokens is not set)".to_string(),
        (true, true) => format!(
            "configured at {:.0}% of the context, by a compaction hook (else summarised by \
             model {})",
            spec.compaction_threshold * 100.0,
            spec.compaction_model.as_deref().unwrap_or(&spec.model)
        ),
        (true, false) => format!(
            "configured at {:.0}% of the context, summarised by model {}",
            spec.compaction_threshold * 100.0,
            spec.compaction_model.as_deref().unwrap_or(&spec.model)
        ),
    };
    let _ = writeln!(md, "- Compaction: {compaction}\n");
    let _ = writeln!(md, "## Capabilities\n");
    let network = if policy.network_allow.is_empty() {
        "none".to_string()
    } else {
        policy
            .network_allow
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(md, "- Network: {network}");
    let _ = writeln!(md, "- Files: the workdir (`.`)");
    for dir in &policy.read_only {
        let _ = writeln!(md, "  - read-only: {}", dir.display());
    }
    for dir in &policy.read_write {
        let _ = writeln!(md, "  - read-write: {}", dir.display());
    }
    if !policy.shell_allow.is_empty() {
        let _ = writeln!(md, "- Shell: {}", policy.shell_allow.join(", "));
    }
    let _ = writeln!(md, "\n## Tools\n");
    let (skills, plain): (Vec<&Listed>, Vec<&Listed>) = tools.iter().partition(|t| t.skill);
    if plain.is_empty() {
        let _ = writeln!(md, "None.");
    }
    for tool in plain {
        let _ = writeln!(md, "- `{}`: {}", tool.name, tool.description);
    }
    let _ = writeln!(md, "\n## Skills\n");
    if skills.is_empty() {
        let _ = writeln!(md, "None.");
    }
    for skill in skills {
        let _ = writeln!(
            md,
            "- `{}`: {} (callable by name to load guidance)",
            skill.name, skill.description
        );
    }
    md
}
