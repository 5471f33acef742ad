"""A Chat Completions server on Python's http.server, as strict about
HTTP/1.1 request bodies as that module is: it reads a body by its
Content-Length only, so a body sent chunked reads as empty (and is answered
400). Each request is answered with one text reply that says how many
messages it read, whole or as server-sent events (`"stream": true`).

    python3 strict_model.py      # prints its loopback port, serves until killed
"""

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get('Content-Length') or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            self.close_connection = True
            error = {'error': {'message': 'the request body is not JSON (sent chunked?)'}}
            return self.answer(400, 'application/json', json.dumps(error))
        text = f"strict server read {len(body.get('messages', []))} messages"
        usage = {'prompt_tokens': 3, 'completion_tokens': 4, 'total_tokens': 7}
        if body.get('stream'):
            chunks = [
                {'id': 'strict-1', 'object': 'chat.completion.chunk', 'choices': [
                    {'index': 0, 'delta': {'role': 'assistant', 'content': text},
                     'finish_reason': None}]},
                {'id': 'strict-1', 'object': 'chat.completion.chunk', 'choices': [
                    {'index': 0, 'delta': {}, 'finish_reason': 'stop'}], 'usage': usage},
            ]
            events = ''.join(f'data: {json.dumps(c)}\n\n' for c in chunks)
            return self.answer(200, 'text/event-stream', events + 'data: [DONE]\n\n')
        whole = {'id': 'strict-1', 'object': 'chat.completion', 'choices': [
            {'index': 0, 'message': {'role': 'assistant', 'content': text},
             'finish_reason': 'stop'}], 'usage': usage}
        return self.answer(200, 'application/json', json.dumps(whole))

    def answer(self, status, content_type, text):
        data = text.encode()
        self.send_response(status)
        self.send_header('Content-Type', content_type)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
