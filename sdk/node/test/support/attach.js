'use strict';
// Test helpers for the Session stream: a handler process serving a socket of its own
// (--listen) and a real @grpc/grpc-js client of rpc Session, loaded from the repository's
// protocol/handler.proto (the one the sidecar is built from).
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { ROOT } = require('./harness');

const REPO_PROTO = path.join(ROOT, '..', '..', 'protocol', 'handler.proto');
const EXAMPLES_DIR = path.join(ROOT, '..', '..', 'examples', 'node');
const EXAMPLES = path.join(EXAMPLES_DIR, 'examples.js');
const PROBE = path.join(ROOT, 'probe.js');

let service;
function Service() {
  service ??= grpc.loadPackageDefinition(protoLoader.loadSync(REPO_PROTO, {
    keepCase: true, longs: String, enums: String, defaults: false, oneofs: true,
  })).soniq.handler.v1.Handler;
  return service;
}

// Polls `cond` (cheap, in-memory) until it holds; fails after `timeoutMs` with `detail()`.
async function waitFor(cond, detail, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms:\n${detail()}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// A fresh directory for sockets, removed when the test process exits.
function tempDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'soniq-node-attach-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// A handler process: `node <script> <args>`, stdout and stderr collected.
class Proc {
  constructor(script, args = [], { env = {}, cwd = ROOT } = {}) {
    const childEnv = { ...process.env, ...env };
    for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
    this.child = spawn(process.execPath, [script, ...args], { cwd, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
    this.stdout = '';
    this.stderr = '';
    this.child.stdout.setEncoding('utf8').on('data', (s) => { this.stdout += s; });
    this.child.stderr.setEncoding('utf8').on('data', (s) => { this.stderr += s; });
    this.exited = new Promise((resolve) => {
      this.child.on('close', (code, signal) => {
        this.exitCode = code;
        resolve({ code, signal });
      });
    });
  }

  get running() {
    return this.exitCode === undefined;
  }

  async exit(timeoutMs = 10000) {
    await waitFor(() => !this.running, () => `process still running; stderr:\n${this.stderr}`, timeoutMs);
    return this.exited;
  }

  kill() {
    if (this.running) this.child.kill('SIGKILL');
  }
}

// The example handler (or another script) serving `sock` in attach mode.
class Listening extends Proc {
  constructor(sock, { script = EXAMPLES, env, args = ['--listen', sock] } = {}) {
    super(script, args, { env });
    this.sock = sock;
  }

  async listening() {
    await waitFor(() => this.stderr.includes('listening on') || !this.running, () => this.stderr, 20000);
    if (!this.running) throw new Error(`handler exited ${this.exitCode}; stderr:\n${this.stderr}`);
    return this;
  }
}

// One Session call: messages sent with send(), received in order with next().
class SessionClient {
  constructor(sock) {
    const Handler = Service();
    this.client = new Handler(`unix:${sock}`, grpc.credentials.createInsecure());
    this.call = this.client.Session();
    this.msgs = [];
    this.waiters = [];
    this.end = null; // {code, details} once the stream ended (code 0: cleanly)
    this.call.on('data', (m) => { this.msgs.push(m); this._wake(); });
    this.call.on('error', (err) => { this.end ??= { code: err.code, details: err.details }; this._wake(); });
    this.call.on('status', (st) => { this.end ??= { code: st.code, details: st.details }; this._wake(); });
  }

  _wake() {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }

  async _until(cond, what, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = cond();
      if (v !== undefined) return v;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${timeoutMs} ms (messages: ${JSON.stringify(this.msgs)}, end: ${JSON.stringify(this.end)})`);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => { clearTimeout(t); resolve(); });
      });
    }
  }

  send(m) {
    this.call.write(m);
  }

  job(id, name, args = {}, extra = {}) {
    this.send({ job: { id, name, args_json: JSON.stringify(args), attempt: 1, max_attempts: 3, queue: 'default', ...extra } });
  }

  // The next message (of kind `kind` if given: 'hello', 'result', 'pong', 'draining').
  next(kind, timeoutMs = 10000) {
    return this._until(() => {
      if (this.msgs.length > 0) {
        const m = this.msgs.shift();
        if (kind && m.message !== kind) throw new Error(`want ${kind}, got ${JSON.stringify(m)}`);
        return m;
      }
      if (this.end) throw new Error(`session ended (${JSON.stringify(this.end)}) while ${kind || 'a message'} was awaited`);
      return undefined;
    }, kind || 'message', timeoutMs);
  }

  async hello(timeoutMs) {
    return (await this.next('hello', timeoutMs)).hello;
  }

  async result(timeoutMs) {
    return (await this.next('result', timeoutMs)).result;
  }

  // Pings and waits for the pong: every message sent before has been taken by then.
  async sync(seq) {
    this.send({ ping: { seq: String(seq) } });
    const m = await this.next('pong');
    if (m.pong.seq !== String(seq)) throw new Error(`pong ${m.pong.seq}, want ${seq}`);
  }

  // Waits for the end of the stream, with no message left unread; {code, details}.
  ended(timeoutMs = 10000) {
    return this._until(() => {
      if (this.msgs.length > 0) throw new Error(`want the end, got ${JSON.stringify(this.msgs[0])}`);
      return this.end ?? undefined;
    }, 'end of the session', timeoutMs);
  }

  close() {
    this.call.cancel();
    this.client.close();
  }
}

// Opens a session and receives its hello; a refusal (the handler has not yet seen the end of
// the previous session) is retried for up to 10 s.
async function openSession(sock) {
  const deadline = Date.now() + 10000;
  for (;;) {
    const c = new SessionClient(sock);
    try {
      const hello = await c.hello();
      return { c, hello };
    } catch (err) {
      const refused = c.end && c.end.code === grpc.status.FAILED_PRECONDITION;
      c.close();
      if (!refused || Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

// grpc.health.v1.Health/Check of `service` on `sock`: the status name.
function health(sock, service) {
  const client = new grpc.Client(`unix:${sock}`, grpc.credentials.createInsecure());
  const body = Buffer.concat([Buffer.from([0x0a, service.length]), Buffer.from(service)]);
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest('/grpc.health.v1.Health/Check', (x) => x, (x) => x, body, (err, res) => {
      client.close();
      if (err) return reject(err);
      return resolve(['UNKNOWN', 'SERVING', 'NOT_SERVING'][res.length === 2 ? res[1] : 0]);
    });
  });
}

// Runs the package's probe command on `sock`: {code, stderr}.
function probe(sock, extra = []) {
  const p = new Proc(PROBE, [sock, ...extra]);
  return p.exited.then(({ code }) => ({ code, stderr: p.stderr }));
}

module.exports = { Proc, Listening, SessionClient, openSession, health, probe, waitFor, tempDir, grpc, REPO_PROTO, EXAMPLES };
