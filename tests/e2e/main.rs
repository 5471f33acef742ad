//! End-to-end tests: a real roostd on a temp socket and state dir, driven
//! through the roostctl library, running guest components built from
//! `tests/guests`.

mod a2a;
mod a2a_card;
mod a2a_grpc;
mod a2a_peers;
mod a2a_push;
mod a2a_script;
mod agent_paths;
mod agents;
mod api_errors;
mod artifacts;
mod capsules;
mod chaos;
mod cli;
mod concurrency;
mod containment;
mod conversations;
mod dashboard;
mod drivers;
mod durability;
mod harness;
mod lifecycle;
mod logging;
mod manifests;
mod mock_llm;
mod observability;
mod operator;
mod otlp;
mod package;
mod reload;
mod retention;
mod sandbox;
mod start_options;
mod supervision;
mod tasks_durable;
