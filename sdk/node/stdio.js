'use strict';
// The stdio transport: NDJSON frames on the process's stdin and stdout (docs/protocol.md), the
// default when the sidecar spawns the handler. The jobs run in the Runtime (runtime.js); this
// module keeps stdout for frames, splits stdin into frames, acts on them, writes the results
// and exits the process when the sidecar is done with it.

const { once } = require('node:events');
const { Console } = require('node:console');
const { decode, encode, ProtocolError } = require('./protocol');
const { log } = require('./log');
const { shuttingDown } = require('./results');
const { EXIT_CANNOT_START, EXIT_OK, EXIT_PROTOCOL_ERROR } = require('./exits');


let stdoutGuard = null;

// Routes console.log/info/debug/... and process.stdout.write to stderr and returns a
// function that writes to the real stdout. Called by App.run(); call it yourself at the very
// top of your entry module if other modules print while they load. Idempotent.
function protectStdout() {
  if (stdoutGuard) return stdoutGuard;
  const stdout = process.stdout;
  const stderr = process.stderr;
  const realWrite = stdout.write.bind(stdout);
  stdout.write = function writeToStderr(chunk, encoding, cb) {
    return stderr.write(chunk, encoding, cb);
  };
  const errConsole = new Console({ stdout: stderr, stderr });
  for (const m of ['log', 'info', 'debug', 'dir', 'dirxml', 'table', 'group', 'groupCollapsed',
    'groupEnd', 'count', 'countReset', 'time', 'timeEnd', 'timeLog']) {
    if (typeof errConsole[m] === 'function') console[m] = errConsole[m].bind(errConsole);
  }
  stdoutGuard = { stream: stdout, write: realWrite };
  return stdoutGuard;
}

const NONE = Object.freeze([]);

// One serialised writer for protocol frames: frames never interleave; the frames queued in one
// turn of the event loop go out in one write (a write per result was a system call per job);
// waits for 'drain' when the pipe is full.
class FrameWriter {
  constructor(stream, write) {
    this.stream = stream;
    this.write = write;
    this.text = ''; // the frames queued since the last write, each with its '\n'
    this.count = 0; // how many
    this.resolvers = []; // send()'s promises for those frames
    this.busy = false;
    this.scheduled = false;
    this.idleWaiters = [];
    this.pending = 0;
    this._onImmediate = () => {
      this.scheduled = false;
      this._pump();
    };
  }

  // Queues one frame (its text without the '\n'). A result needs nothing more: a broken stdout
  // ends the process through the stream's 'error' handler.
  push(text) {
    this.pending++;
    this.text += text;
    this.text += '\n';
    this.count++;
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this._onImmediate);
    }
  }

  // push, and a promise that resolves once the frame is handed to the OS; it never rejects.
  send(text) {
    return new Promise((resolve) => {
      this.push(text);
      this.resolvers.push(resolve);
    });
  }

  // Writes what is queued now, for an exit that cannot wait for the next turn.
  flushNow() {
    this._pump();
  }

  async _pump() {
    if (this.busy) return;
    this.busy = true;
    while (this.count > 0) {
      const { text, count } = this;
      let resolvers = NONE;
      if (this.resolvers.length > 0) {
        resolvers = this.resolvers;
        this.resolvers = [];
      }
      this.text = '';
      this.count = 0;
      const ok = this.write(text, () => {
        this.pending -= count;
        for (const resolve of resolvers) resolve();
        this._checkIdle();
      });
      if (!ok) {
        try {
          await once(this.stream, 'drain');
        } catch {
          return; // stream error: handled by the stream's 'error' listener
        }
      }
    }
    this.busy = false;
    this._checkIdle();
  }

  _checkIdle() {
    if (this.pending === 0 && !this.busy) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  idle() {
    return new Promise((resolve) => {
      this.idleWaiters.push(resolve);
      this._checkIdle();
    });
  }
}

// Serves the Runtime on stdin/stdout until `shutdown` or EOF and every job held has reported,
// then exits the process 0; a malformed frame exits 4.
function serve(rt, protocolVersion, guard) {
  new Stdio(rt, new FrameWriter(guard.stream, guard.write)).serve(protocolVersion);
}

class Stdio {
  constructor(rt, writer) {
    this.rt = rt;
    this.writer = writer;
    this.draining = false;
    this.exiting = false;
  }

  serve(protocolVersion) {
    const rt = this.rt;
    rt.onChange = () => this._maybeExit();
    this._send(rt.hello(protocolVersion));
    // ctx.enqueue sends its frames with the results (children.js).
    rt.children.connect((frame, text) => this.writer.push(text));

    process.on('exit', () => {
      if (rt.count > 0 && !this.exiting) {
        log(`exiting with ${rt.count} job(s) in flight and no result sent`);
        if (!process.exitCode) process.exitCode = EXIT_CANNOT_START;
      }
    });

    const input = process.stdin;
    const maxFrameBytes = rt.maxFrameBytes;
    let parts = [];
    let partsLen = 0;
    input.on('data', (chunk) => {
      let start = 0;
      for (;;) {
        const nl = chunk.indexOf(0x0a, start);
        if (nl === -1) {
          if (start < chunk.length) {
            const rest = chunk.subarray(start);
            parts.push(rest);
            partsLen += rest.length;
            // +1: a trailing '\r' is not part of the frame.
            if (partsLen > maxFrameBytes + 1) {
              this._fatal(new ProtocolError('oversize', null, `frame exceeds ${maxFrameBytes} bytes`));
            }
          }
          return;
        }
        let line = chunk.subarray(start, nl);
        if (parts.length) {
          parts.push(line);
          line = Buffer.concat(parts, partsLen + line.length);
          parts = [];
          partsLen = 0;
        }
        start = nl + 1;
        this._onLine(line);
        if (this.exiting) return;
      }
    });
    input.on('end', () => {
      if (partsLen > 0) {
        // A frame must end with '\n': a partial last line is a truncated frame, not run.
        const excerpt = Buffer.concat(parts, partsLen).subarray(0, 200).toString('utf8');
        log(`partial last line before EOF ignored: ${JSON.stringify(excerpt)}`);
        parts = [];
        partsLen = 0;
      }
      this._beginDrain();
    });
    input.on('error', (err) => {
      log(`stdin failed: ${err.message}`);
      this._beginDrain();
    });
  }

  _send(msg) {
    return this.writer.send(encode(msg));
  }

  _fatal(err) {
    if (this.exiting) return;
    this.exiting = true;
    log(`protocol error from sidecar: ${err.message}; exiting with status ${EXIT_PROTOCOL_ERROR}`);
    this.writer.flushNow(); // the results before it go out first
    process.exit(EXIT_PROTOCOL_ERROR);
  }

  _onLine(line) {
    if (this.exiting) return;
    if (line.length === 0 || (line.length === 1 && line[0] === 0x0d)) return; // empty line
    let msg;
    try {
      msg = decode(line, { maxFrameBytes: this.rt.maxFrameBytes });
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err;
      const excerpt = line.subarray(0, 200).toString('utf8');
      return this._fatal(new ProtocolError(err.code, err.field, `${err.message}; frame: ${JSON.stringify(excerpt)}`));
    }
    switch (msg.type) {
      case 'job': return this._onJob(msg);
      case 'cancel': return this.rt.cancel(msg.id, msg.reason);
      case 'ping': return void this._send({ type: 'pong', seq: msg.seq });
      case 'shutdown': return this._beginDrain();
      case 'enqueued': return this.rt.children.answered(msg);
      default:
        return this._fatal(new Error(`unexpected ${JSON.stringify(msg.type)} frame from the sidecar`));
    }
  }

  _onJob(msg) {
    if (this.rt.duplicate(msg.id)) return;
    if (this.draining) {
      log(`job ${msg.id} (${msg.name}) received after shutdown; refusing it`);
      this._send(shuttingDown(msg.id));
      return;
    }
    this.rt.start(msg, (frame, text) => this.writer.push(text));
  }

  _beginDrain() {
    this.draining = true;
    this._maybeExit();
  }

  _maybeExit() {
    if (!this.draining || !this.rt.idle || this.exiting) return;
    this.exiting = true;
    this.writer.idle().then(() => process.exit(EXIT_OK));
  }
}

module.exports = { serve, protectStdout };
