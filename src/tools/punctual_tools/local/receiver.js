// A lean loopback webhook receiver for benchmarks (Node's http server: its parser is C, so thousands of
// connections cost it little and what a benchmark measures is the sender). Answers every request 200 and
// appends one JSON line per request to the file named by argv[2]: the Idempotency-Key, X-Punctual-Task-Id,
// X-Punctual-Due-Ms and received_ms, the wall-clock instant the request's headers were parsed. Prints its
// port on the first line of stdout; lines are flushed every 100 ms and on SIGTERM.
"use strict";
const http = require("http");
const fs = require("fs");

const path = process.argv[2];
let pending = [];
function flush() {
  if (pending.length) {
    fs.appendFileSync(path, pending.join(""));
    pending = [];
  }
}
const server = http.createServer((req, res) => {
  const receivedMs = performance.timeOrigin + performance.now();
  const due = req.headers["x-punctual-due-ms"];
  pending.push(JSON.stringify({
    key: req.headers["idempotency-key"] || null,
    task_id: req.headers["x-punctual-task-id"] || null,
    due_ms: due && /^\d+$/.test(due) ? Number(due) : null,
    received_ms: Math.round(receivedMs * 1000) / 1000,
  }) + "\n");
  req.resume();
  req.on("end", () => {
    res.writeHead(200, { "Content-Type": "application/json", "Content-Length": 11 });
    res.end('{"ok":true}');
  });
});
server.keepAliveTimeout = 60000;
server.headersTimeout = 65000;
setInterval(flush, 100);
process.on("SIGTERM", () => { flush(); process.exit(0); });
server.listen({ port: 0, host: "127.0.0.1", backlog: 4096 }, () => {
  process.stdout.write(server.address().port + "\n");
});
