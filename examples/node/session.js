'use strict';
// The Session stream (rpc Session of proto/handler.proto): every v1 message of one sidecar
// session on one bidirectional gRPC stream. Served in both unix modes: next to the per-call
// RPCs when the sidecar spawns the process (the end of the session then ends the process, as
// EOF on stdin does on stdio), and alone on a socket of the handler's own with --listen
// (attach mode, listen.js: the process outlives its sessions). See docs/protocol.md, "The
// Session stream and attach mode".
//
// Each message from the sidecar is turned into the stdio frame it stands for and put through
// protocol.decode, so both transports accept exactly the same messages; one that fails is a
// protocol error, reported as on stdio.

const { decode, ProtocolError } = require('./protocol');

const EXIT_PROTOCOL_ERROR = 4;
// Results of jobs that ended while no session was open, or that were sent on a session that
// ended before acknowledging them, wait for the next one; at most this many (the oldest is
// dropped first, with a WARN line). A sidecar sends a process far fewer jobs than this (its
// concurrency), so only a process left alone for long gets there.
const MAX_KEPT_RESULTS = 1000;
// How long a handler told to stop waits, once it holds no job, for the open session to
// acknowledge the results it sent.
const ACK_WAIT_MS = 5000;

const STATUS = { done: 'DONE', failed: 'FAILED', snooze: 'SNOOZE', cancelled: 'CANCELLED' };

function log(...parts) {
  process.stderr.write(`soniq-handler[${process.pid}]: ${parts.join(' ')}\n`);
}

// The Result message of a result frame (the stdio encoding, already checked by
// App._encodeResult).
function resultMessage(frame) {
  const msg = { id: frame.id, status: STATUS[frame.status] };
  if (frame.status === 'done') {
    if (frame.result !== null && frame.result !== undefined) msg.result_json = JSON.stringify(frame.result);
  } else if (frame.status === 'failed') {
    const e = frame.error;
    msg.error = { type: e.type, message: e.message, retryable: e.retryable !== false };
    if (e.traceback !== null && e.traceback !== undefined) msg.error.traceback = e.traceback;
    if (e.reason !== null && e.reason !== undefined) msg.error.reason = e.reason;
  } else if (frame.status === 'snooze') {
    msg.seconds = frame.seconds;
    if (frame.reason !== null && frame.reason !== undefined) msg.reason = frame.reason;
  }
  return msg;
}

// The proto loaded for the Session method: 64-bit integers as decimal strings, so they reach
// the frame exactly as sent (a seq beyond 2^53 is refused by the frame's checks, not rounded),
// and the oneof's name in `message`.
function sessionService(grpc, protoLoader, protoPath) {
  const def = protoLoader.loadSync(protoPath, { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true });
  return { Session: grpc.loadPackageDefinition(def).soniq.handler.v1.Handler.service.Session };
}

const str = (v) => JSON.stringify(v ?? '');
const int = (v) => String(v ?? 0);

// The stdio frame a SidecarMessage stands for, as text for protocol.decode. proto3 cannot
// tell a missing field from its default: an absent string is "", an absent number 0, and the
// frame's checks judge those. A job's args_json goes into the frame as it came (so the
// frame's checks apply to it); an empty args_json is a missing `args`.
function frameOf(m) {
  switch (m.message) {
    case 'job': {
      const j = m.job;
      let text = `{"type":"job","id":${str(j.id)},"name":${str(j.name)}`;
      const args = j.args_json ?? '';
      if (args !== '') {
        try {
          JSON.parse(args); // one JSON value, nothing spliced in beside it
        } catch (err) {
          throw new ProtocolError('invalid_json', null, `args_json is not JSON: ${err.message}`);
        }
        text += `,"args":${args}`;
      }
      text += `,"attempt":${int(j.attempt)},"max_attempts":${int(j.max_attempts)},"queue":${str(j.queue)}`;
      for (const [field, key] of [['deadline_ms', 'deadline'], ['scheduled_at_ms', 'scheduled_at'], ['created_at_ms', 'created_at']]) {
        if (j[field] !== undefined && j[field] !== null) text += `,"${key}":${int(j[field])}`;
      }
      for (const key of ['traceparent', 'worker_id']) {
        if (j[key] !== undefined && j[key] !== null) text += `,"${key}":${str(j[key])}`;
      }
      return `${text}}`;
    }
    case 'cancel': return `{"type":"cancel","id":${str(m.cancel.id)},"reason":${str(m.cancel.reason)}}`;
    case 'ping': return `{"type":"ping","seq":${int(m.ping.seq)}}`;
    case 'shutdown': return '{"type":"shutdown"}';
    default: throw new ProtocolError('unknown_type', null, 'a SidecarMessage with no message set');
  }
}

// A protocol error on a Session, worded as both SDKs word it (docs/protocol.md):
// `protocol error: <code> at <field>: <detail>`.
function sessionErrorText(err) {
  const head = `${err.code}${err.field ? ` (${err.field})` : ''}`;
  const detail = err.message.startsWith(head) ? err.message.slice(head.length) : `: ${err.message}`;
  return `protocol error: ${err.code}${err.field ? ` at ${err.field}` : ''}${detail}`;
}

// One session: its stream and what the handler knows of it.
class Session {
  constructor(call) {
    this.call = call;
    const peer = String(call.getPeer?.() ?? '');
    // A Unix socket's peer has no address (gRPC says "unix:" or nothing).
    this.peer = peer && peer !== 'unix:' && peer !== 'unknown' ? peer : 'a peer on the socket (no address)';
    this.opened = new Date();
    this.shutdown = false; // the sidecar sent shutdown or closed its side
    this.ended = false; // no more messages can go out on it
    this.acks = false; // the sidecar said it acknowledges results (an Ack)
    // Whether a message came from the sidecar yet: one that acknowledges results sends an Ack
    // first, so anything else first means it never will.
    this.heard = false;
    this.unacked = new Map(); // id -> result message sent on it and not acknowledged yet
  }

  describe() {
    return `opened at ${this.opened.toISOString()} by ${this.peer}`;
  }

  write(msg) {
    if (!this.ended) this.call.write(msg);
  }

  // Ends the stream: OK, or with a gRPC error status.
  end(code, details) {
    if (this.ended) return;
    this.ended = true;
    if (code === undefined) this.call.end();
    else this.call.emit('error', { code, details });
  }
}

// The Session RPC and the jobs it runs, for the life of the process. `attach`: the process
// serves a socket of its own and lives across sessions; otherwise (spawned) the first
// session's end is the process's (onChange tells the transport) and no other is taken.
class SessionCore {
  constructor(app, protocolVersion, grpc, { attach, onChange = () => {}, trace = () => {} }) {
    this.app = app;
    this.protocolVersion = protocolVersion;
    this.grpc = grpc;
    this.attach = attach;
    this.onChange = onChange;
    this.trace = trace; // $HANDLER_TRACE_FRAMES, as for the per-call RPCs
    this.held = new Map(); // id -> entry: every job taken until its result is out
    this.waiting = []; // entries over the concurrency limit, in arrival order
    this.running = 0;
    this.current = null; // the open Session
    this.kept = new Map(); // id -> result message waiting for a session (attach mode), oldest first
    // A sidecar acknowledged results once: from then on a session that ends with results
    // unacknowledged hands them to the next one.
    this.peerAcks = false;
    this.draining = false; // SIGTERM (attach mode): no new job
    this.sessionEnded = false; // spawned: the one session is over
  }

  // The method handler of rpc Session.
  handle(call) {
    const { status } = this.grpc;
    const open = this.current;
    if (open) {
      const text = `a session is already open (${open.describe()}); one session at a time`;
      log(`WARN: Session from ${new Session(call).peer} refused: ${text}`);
      call.emit('error', { code: status.FAILED_PRECONDITION, details: text });
      return;
    }
    if (!this.attach && this.sessionEnded) {
      call.emit('error', { code: status.FAILED_PRECONDITION, details: "this process's session has ended; it is exiting" });
      return;
    }
    const s = new Session(call);
    this.current = s;
    s.write({ hello: this.hello() });
    const kept = this.kept;
    this.kept = new Map();
    for (const [id, msg] of kept) {
      s.write(msg);
      s.unacked.set(id, msg);
    }
    if (this.draining) s.write({ draining: {} });
    call.on('data', (m) => this._onMessage(s, m));
    // The sidecar closed its side: as EOF on stdin, the session ends once it holds no job of it.
    call.on('end', () => this._shutdown(s));
    call.on('cancelled', () => this._close(s));
    call.on('finish', () => this._close(s));
    call.on('error', () => this._close(s));
  }

  hello() {
    const h = this.app.hello(this.protocolVersion);
    return {
      protocol: h.protocol, sdk: h.sdk, pid: h.pid, jobs: h.jobs, concurrency: h.concurrency,
      running: [...this.held.values()].map((e) => ({ id: e.msg.id, name: e.msg.name })),
      kept: [...this.kept.keys()].filter((id) => !this.held.has(id)),
      acks: this.attach,
    };
  }

  _onMessage(s, m) {
    if (s.ended) return;
    if (!s.heard) {
      s.heard = true;
      if (m.message !== 'ack') s.unacked.clear(); // an older sidecar: it never acknowledges
    }
    if (m.message === 'ack') {
      // Not a stdio frame: the sidecar settled these results.
      this._acked(s, m.ack?.ids ?? []);
      return;
    }
    let frame;
    try {
      frame = decode(frameOf(m), { maxFrameBytes: this.app.maxFrameBytes });
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err;
      this._protocolError(s, err);
      return;
    }
    this.trace(frame);
    switch (frame.type) {
      case 'job': return this._onJob(s, frame);
      case 'cancel': return this._onCancel(frame);
      case 'ping': return s.write({ pong: { seq: String(frame.seq) } });
      case 'shutdown': return this._shutdown(s);
      default:
        // The decoder knows the handler's frames too; a SidecarMessage cannot carry them.
        return this._protocolError(s, new ProtocolError('unknown_type', null, `unexpected ${JSON.stringify(frame.type)} message`));
    }
  }

  _protocolError(s, err) {
    const text = sessionErrorText(err);
    s.end(this.grpc.status.INVALID_ARGUMENT, text);
    if (!this.attach) {
      // As on stdio: the process cannot go on.
      log(`${text}; exiting with status ${EXIT_PROTOCOL_ERROR}`);
      setImmediate(() => process.exit(EXIT_PROTOCOL_ERROR)); // the status first, if it can go out
      return;
    }
    // The process outlives its sidecars: this session ends, its jobs run on.
    log(`${text}; session ended`);
  }

  _onJob(s, msg) {
    if (this.held.has(msg.id)) {
      log(`job ${msg.id} received while already in flight; ignoring the duplicate`);
      return;
    }
    if (this.draining) {
      // Told to stop: the attempt goes back at once, not counted as a failure.
      s.write({ result: resultMessage({ id: msg.id, status: 'snooze', seconds: 0, reason: 'handler draining' }) });
      return;
    }
    if (s.shutdown) {
      // As on stdio: a job that slips in after shutdown goes back for a retry.
      log(`job ${msg.id} (${msg.name}) received after shutdown; refusing it`);
      s.write({
        result: resultMessage({
          id: msg.id, status: 'failed',
          error: { type: 'ShuttingDown', message: 'handler process is shutting down', traceback: null, retryable: true },
        }),
      });
      return;
    }
    const handler = this.app.handlers.get(msg.name);
    const entry = { controller: new AbortController(), cancellable: handler ? handler.cancellable : true, msg, handler, session: s };
    this.held.set(msg.id, entry);
    if (this.running < this.app.concurrency) this._start(entry);
    else this.waiting.push(entry);
  }

  _onCancel(msg) {
    const entry = this.held.get(msg.id);
    if (!entry) return; // unknown or already finished
    if (!entry.cancellable) {
      log(`cancel (${msg.reason}) for non-cancellable job ${msg.id} (${entry.msg.name}) ignored; it runs to completion`);
      return;
    }
    if (!entry.controller.signal.aborted) entry.controller.abort(msg.reason);
  }

  _start(entry) {
    this.running++;
    this.app._execute(entry)
      .catch((err) => ({
        type: 'result', id: entry.msg.id, status: 'failed',
        error: { type: err?.name || 'Error', message: String(err?.message ?? err), traceback: err?.stack ?? null, retryable: true },
      }))
      .then((result) => this._finish(entry, result));
  }

  _finish(entry, result) {
    this.held.delete(entry.msg.id);
    this.running--;
    while (this.running < this.app.concurrency && this.waiting.length > 0) this._start(this.waiting.shift());
    // Same limits as stdio: an unserialisable or oversized result fails the job.
    this._deliver({ result: resultMessage(JSON.parse(this.app._encodeResult(result))) });
    if (entry.session) this._maybeEnd(entry.session);
    this.onChange();
  }

  // To the session open now (kept there until it acknowledges it), else (attach mode) kept
  // for the next one.
  _deliver(msg) {
    const s = this.current;
    if (s && !s.ended) {
      s.write(msg);
      if (this.attach && (s.acks || !s.heard)) s.unacked.set(msg.result.id, msg);
      return;
    }
    this._keep(msg, 'ended with no session open');
  }

  _keep(msg, why) {
    if (!this.attach) return; // spawned: there is no next session
    const id = msg.result.id;
    this.kept.delete(id);
    if (this.kept.size >= MAX_KEPT_RESULTS) {
      const lost = this.kept.keys().next().value;
      this.kept.delete(lost);
      log(`WARN: more than ${MAX_KEPT_RESULTS} results wait for a session; the result of job ${lost} is dropped`);
    }
    this.kept.set(id, msg);
    log(`job ${id} ${why}; its result waits for the next session`);
  }

  _acked(s, ids) {
    s.acks = true;
    this.peerAcks = true;
    for (const id of ids) s.unacked.delete(id);
    if (ids.length > 0) this.onChange();
  }

  _shutdown(s) {
    s.shutdown = true;
    this._maybeEnd(s);
  }

  _maybeEnd(s) {
    if (!s.shutdown) return;
    for (const e of this.held.values()) if (e.session === s) return;
    s.end();
  }

  // The session is over: ended by us, or broken.
  _close(s) {
    if (s.closed) return;
    s.closed = true;
    s.ended = true;
    if (this.current === s) this.current = null;
    // Results written on it that the sidecar may never have received or recorded (the session
    // broke with them in flight, or before they were written) go to the next session, when
    // the sidecar acknowledges results.
    if (s.acks || this.peerAcks) for (const msg of s.unacked.values()) this._keep(msg, 'had its result unacknowledged when the session ended');
    s.unacked.clear();
    for (const e of this.held.values()) if (e.session === s) e.session = null;
    if (!this.attach) this.sessionEnded = true;
    this.onChange();
  }

  // SIGTERM in attach mode: no new job; the open session hears it.
  beginDraining() {
    if (this.draining) return;
    this.draining = true;
    if (this.current) this.current.write({ draining: {} });
    this.onChange();
  }

  // Ends the open session cleanly (the process is exiting).
  endCurrent() {
    if (this.current) this.current.end();
  }

  // The open session acknowledges results and has not acknowledged some it was sent.
  awaitingAcks() {
    const s = this.current;
    return Boolean(s && !s.ended && s.acks && s.unacked.size > 0);
  }

  // Ids of results no session received (or acknowledged).
  lostResults() {
    const s = this.current;
    return [...this.kept.keys(), ...(s && s.acks ? s.unacked.keys() : [])];
  }
}

module.exports = { SessionCore, sessionService, resultMessage, frameOf, MAX_KEPT_RESULTS, ACK_WAIT_MS };
