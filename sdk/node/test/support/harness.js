'use strict';
// Spawns a handler process and drives it frame by frame over its stdio.
const { spawn } = require('node:child_process');
const path = require('node:path');
const { decode, encode } = require('../../protocol');

const ROOT = path.join(__dirname, '..', '..');

class Handler {
  constructor(script, { env = {}, cwd = ROOT } = {}) {
    const childEnv = { ...process.env, ...env };
    for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
    this.child = spawn(process.execPath, [script], { cwd, env: childEnv, stdio: ['pipe', 'pipe', 'pipe'] });
    this.frames = [];
    this.waiters = [];
    this.stdoutRaw = [];
    this.stderr = '';
    this.protocolErrors = [];
    let buf = Buffer.alloc(0);
    this.child.stdout.on('data', (chunk) => {
      this.stdoutRaw.push(chunk);
      buf = Buffer.concat([buf, chunk]);
      let nl;
      while ((nl = buf.indexOf(0x0a)) !== -1) {
        const line = buf.subarray(0, nl);
        buf = buf.subarray(nl + 1);
        let msg;
        try {
          // Every frame the handler writes must pass the strict decoder and be canonical.
          msg = decode(line);
          if (encode(msg) !== line.toString('utf8')) throw new Error('frame is not in canonical encoding');
        } catch (err) {
          this.protocolErrors.push(`${err.message}: ${JSON.stringify(line.toString('utf8'))}`);
          continue;
        }
        this.frames.push({ msg, at: Date.now() });
        this._wake();
      }
    });
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (s) => { this.stderr += s; });
    this.exited = new Promise((resolve) => {
      this.child.on('close', (code, signal) => {
        this.exitCode = code;
        this.exitSignal = signal;
        this._wake();
        resolve({ code, signal });
      });
    });
  }

  _wake() {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }

  send(msg) {
    this.child.stdin.write(`${typeof msg === 'string' ? msg : encode(msg)}\n`);
  }

  job(id, name, args = {}, extra = {}) {
    this.send({ type: 'job', id, name, args, attempt: 1, max_attempts: 3, queue: 'default', ...extra });
  }

  // Next frame matching `pred`, removed from the buffer. Rejects after `timeoutMs`.
  async next(pred = () => true, timeoutMs = 5000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (this.protocolErrors.length) throw new Error(`handler wrote a bad frame: ${this.protocolErrors[0]}`);
      const idx = this.frames.findIndex((f) => pred(f.msg));
      if (idx !== -1) return this.frames.splice(idx, 1)[0];
      const left = deadline - Date.now();
      if (left <= 0 || this.exitCode !== undefined) {
        throw new Error(`no matching frame within ${timeoutMs} ms (exit ${this.exitCode}); stderr:\n${this.stderr}`);
      }
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => { clearTimeout(t); resolve(); });
      });
    }
  }

  // Pings and waits for the pong. The SDK reads its input in order, so every frame sent
  // before the ping has been read and dispatched by then (a job is held and started);
  // tests wait on this instead of sleeping. Other frames stay buffered for next().
  async sync(seq) {
    this.send({ type: 'ping', seq });
    await this.next((m) => m.type === 'pong' && m.seq === seq);
  }

  async result(id, timeoutMs) {
    return (await this.next((m) => m.type === 'result' && m.id === id, timeoutMs)).msg;
  }

  async hello() {
    return (await this.next((m) => m.type === 'hello')).msg;
  }

  async exit(timeoutMs = 5000) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`process did not exit within ${timeoutMs} ms; stderr:\n${this.stderr}`)), timeoutMs);
    });
    try {
      return await Promise.race([this.exited, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  kill() {
    if (this.exitCode === undefined) this.child.kill('SIGKILL');
  }
}

module.exports = { Handler, ROOT };
