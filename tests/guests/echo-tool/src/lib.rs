//! Test tool (`murmur:tool/run@0.1.0`): echoes its input. `data` of `spin` loops
//! forever (deadline tests), `panic` panics, `chunks` streams two text chunks.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:tool/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};

struct Tool;

impl Guest for Tool {
    fn run(input: ToolInput) -> ToolResult {
        let data = input.data.unwrap_or_default();
        match data.as_str() {
            "spin" => loop {
                std::hint::black_box(0u64);
            },
            "panic" => panic!("echo-tool was asked to panic"),
            "chunks" => {
                murmur::text::chunks::emit_chunk("chunk-one ");
                murmur::text::chunks::emit_chunk("chunk-two\n");
            }
            _ => {}
        }
        ToolResult {
            status: Status::Passed,
            summary: Some("echo".into()),
            data: Some(data),
            data_path: None,
            truncated: false,
            metadata: vec![("tool".into(), "echo-tool".into())],
        }
    }
}

export!(Tool);
