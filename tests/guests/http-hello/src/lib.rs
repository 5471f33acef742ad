//! A `wasi:http/proxy` component answering every request `200 hello`: the
//! floor the A2A benchmark puts beside roostd (`wasmtime serve`).

use wasi::http::types::{Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam};

wasi::http::proxy::export!(Hello);

struct Hello;

impl wasi::exports::http::incoming_handler::Guest for Hello {
    fn handle(_request: IncomingRequest, out: ResponseOutparam) {
        let response = OutgoingResponse::new(Fields::new());
        let body = response.body().expect("the body, once");
        ResponseOutparam::set(out, Ok(response));
        let stream = body.write().expect("the stream, once");
        stream
            .blocking_write_and_flush(b"hello")
            .expect("write the body");
        drop(stream);
        OutgoingBody::finish(body, None).expect("finish the body");
    }
}
