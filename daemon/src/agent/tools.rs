//! The tools the model sees: each allow-listed name described by what it is
//! in the session (a tool's schema, a skill, a shell binary), and the
//! capabilities it is told about.

use super::*;

impl AgentRun<'_> {
    /// The allow-listed tools the model may call, with their schemas.
    pub(super) fn tool_defs(&self) -> Vec<ToolDef> {
        let mut out = Vec::new();
        let mut names: Vec<&String> = self.allowlist.iter().collect();
        names.sort();
        for name in names {
            let (description, schema) = match self.artifacts.target(name, &self.policy) {
                Target::Wasm(_) | Target::Native(_) => {
                    match self.artifacts.describe(name, &self.policy) {
                        Ok(info) => (
                            info.description,
                            info.input_schema
                                .and_then(|s| serde_json::from_str(&s).ok())
                                .unwrap_or_else(|| json!({"type": "object"})),
                        ),
                        Err(_) => continue,
                    }
                }
                Target::Skill(_) => {
                    let description = self
                        .artifacts
                        .describe(name, &self.policy)
                        .map(|i| i.description)
                        .unwrap_or_default();
                    (
                        format!(
                            "Skill: {description} Call it by name, with no arguments, to load its guidance."
                        ),
                        json!({"type": "object", "properties": {}}),
                    )
                }
                Target::Shell => shell_tool(name),
                Target::NotATool(_) | Target::Missing => continue,
            };
            out.push(ToolDef {
                name: name.clone(),
                description,
                input_schema: schema,
            });
        }
        out
    }

    pub(super) fn capabilities(&self) -> Value {
        json!({
            "network": self.policy.network_allow.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "shell": self.policy.shell_allow,
            "read_only": self.policy.read_only,
            "read_write": self.policy.read_write,
        })
    }
}

/// How the model is told to call an allow-listed binary.
pub(super) fn shell_tool(name: &str) -> (String, Value) {
    let interpreter = crate::tools::shell::INTERPRETERS.contains(&name);
    let (description, command) = if interpreter {
        (
            format!("Run a `{name} -c` command line in the workdir."),
            format!("the command line {name} runs"),
        )
    } else {
        (
            format!("Run `{name}` in the workdir with the given arguments."),
            format!("the arguments for {name} (not the program name), quoted as in a shell"),
        )
    };
    let schema = json!({
        "type": "object",
        "properties": {"command": {"type": "string", "description": command}},
        "required": ["command"],
    });
    (description, schema)
}
