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

const { withCodec } = require('./codec');
const { decode, decodeJobMessage, encode, ProtocolError } = require('./protocol');
const { enqueueMessage, enqueuedFrame } = require('./children');
const { Ledger, MAX_KEPT_RESULTS } = require('./ledger');
const { log } = require('./log');
const { draining, shuttingDown, unencodable } = require('./results');
const { EXIT_PROTOCOL_ERROR } = require('./exits');

// How long a handler told to stop waits, once it holds no job, for the open session to
// acknowledge the results it sent.
const ACK_WAIT_MS = 5000;

// A Results message holds at most this many results, and their frames add up to at most the
// frame limit: it stays within the stream's message size.
const MAX_BATCH = 256;

const APART = Object.freeze({ apart: true }); // Runtime.start's option: results as encodeResultApart gives them

const STATUS = { done: 'DONE', failed: 'FAILED', snooze: 'SNOOZE', cancelled: 'CANCELLED' };

// The Result message of a result frame (the stdio encoding, already checked by
// Runtime.encodeResult).
function resultMessage(frame) {
  const msg = { id: frame.id, status: STATUS[frame.status] };
  if (frame.status === 'done') {
    if (frame.result !== null && frame.result !== undefined) {
      try {
        msg.result_json = JSON.stringify(frame.result);
      } catch (err) {
        // The value was written once already (the stdio encoding it is parsed from); writing
        // it again can still run out of stack where the first did not. It fails as a value
        // that cannot be written does.
        return resultMessage(unencodable(frame.id, err, frame.result));
      }
    }
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

// The Result message of a result the Runtime reported, `text` its stdio encoding: what
// resultMessage makes of that text parsed (the value as the sidecar gets it on stdio). A `done`
// result's value is written once, in that text, and result_json is that part of it as it is:
// parsing it and writing it again gives the same text, and cost a handler over a Session more
// than the rest of a small result's way out. The text is taken apart only when it is exactly
// what encode writes for a done result; anything else (the other statuses, which are rare) takes
// the long way, and so does a value with U+FFFD in it, which may be a lone surrogate encode
// replaced (two keys that differed only there become one key twice, which parsing merges).
function reportedMessage(frame, text) {
  if (frame.status === 'done') {
    const head = `{"type":"result","id":${JSON.stringify(frame.id)},"status":"done"`;
    if (text.length === head.length + 1 && text.startsWith(head)) return { id: frame.id, status: 'DONE' };
    const start = head.length + 10; // ,"result":
    if (text.startsWith(head) && text.startsWith(',"result":', head.length) && text.indexOf('\ufffd', start) === -1) {
      const value = text.slice(start, -1);
      // A value written as null (NaN, a toJSON that gives null) is no value once parsed.
      return value === 'null' ? { id: frame.id, status: 'DONE' } : { id: frame.id, status: 'DONE', result_json: value };
    }
  }
  return resultMessage(JSON.parse(text));
}

// The Result message of Runtime.encodeResultApart's answer.
function apartMessage({ frame, text, value }) {
  if (text !== null) return reportedMessage(frame, text);
  // A value written as null (NaN, a toJSON that gives null) is no value once parsed.
  return value === null || value === 'null' ? { id: frame.id, status: 'DONE' } : { id: frame.id, status: 'DONE', result_json: value };
}

// The proto loaded for the Session method: 64-bit integers as decimal strings, so they reach
// the frame exactly as sent (a seq beyond 2^53 is refused by the frame's checks, not rounded),
// and the oneof's name in `message`.
function sessionService(grpc, protoLoader, protoPath) {
  const def = protoLoader.loadSync(protoPath, { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true });
  return { Session: withCodec(grpc.loadPackageDefinition(def).soniq.handler.v1.Handler.service.Session) };
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

// A Job message decoded as its frame would be (frameOf, then decode), without writing and
// parsing that frame's text. A job whose frame could come near the frame limit takes the exact
// way.
function decodeJob(j, maxFrameBytes) {
  const args = j.args_json ?? '';
  const chars = args.length + (j.id ?? '').length + (j.name ?? '').length + (j.queue ?? '').length
    + (j.traceparent ?? '').length + (j.worker_id ?? '').length;
  if (6 * chars + 512 > maxFrameBytes) return decode(frameOf({ message: 'job', job: j }), { maxFrameBytes });
  // Field by field, as frameOf writes them (in its order), without a table walked per job.
  const ints = { attempt: int(j.attempt), max_attempts: int(j.max_attempts) };
  if (j.deadline_ms !== undefined && j.deadline_ms !== null) ints.deadline = int(j.deadline_ms);
  if (j.scheduled_at_ms !== undefined && j.scheduled_at_ms !== null) ints.scheduled_at = int(j.scheduled_at_ms);
  if (j.created_at_ms !== undefined && j.created_at_ms !== null) ints.created_at = int(j.created_at_ms);
  const strings = { id: j.id ?? '', name: j.name ?? '', queue: j.queue ?? '' };
  if (j.traceparent !== undefined && j.traceparent !== null) strings.traceparent = j.traceparent;
  if (j.worker_id !== undefined && j.worker_id !== null) strings.worker_id = j.worker_id;
  return decodeJobMessage(strings, args === '' ? undefined : args, ints);
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
  constructor(call, sent = null) {
    this.call = call;
    const peer = String(call.getPeer?.() ?? '');
    // A Unix socket's peer has no address (gRPC says "unix:" or nothing).
    this.peer = peer && peer !== 'unix:' && peer !== 'unknown' ? peer : 'a peer on the socket (no address)';
    this.opened = new Date();
    this.shutdown = false; // the sidecar sent shutdown or closed its side
    this.ended = false; // no more messages can go out on it
    this.sent = sent; // the results sent on it and not acknowledged yet (runtime.js Sent)
    this.jobs = new Set(); // ids of the jobs it brought that are still held
    this.batches = false; // the sidecar sent a Jobs message: it takes Results
    this.maxFrameBytes = Infinity; // bounds a Results message (set by the core)
    this.results = []; // results waiting for this turn of the event loop to end
    this.resultBytes = 0;
  }

  describe() {
    return `opened at ${this.opened.toISOString()} by ${this.peer}`;
  }

  write(msg) {
    if (this.ended) return;
    this.flush();
    this.call.write(msg);
  }

  // A result. A stream message costs far more than the result it carries: once the sidecar
  // takes Results, the results of one turn of the event loop go out as one message.
  writeResult(msg, bytes) {
    if (this.ended) return;
    if (!this.batches) {
      this.call.write({ result: msg });
      return;
    }
    if (this.results.length >= MAX_BATCH || (this.results.length > 0 && this.resultBytes + bytes > this.maxFrameBytes)) this.flush();
    if (this.results.length === 0) setImmediate(() => this.flush());
    this.results.push(msg);
    this.resultBytes += bytes;
  }

  flush() {
    const results = this.results;
    if (results.length === 0 || this.ended) return;
    this.results = [];
    this.resultBytes = 0;
    this.call.write(results.length === 1 ? { result: results[0] } : { results: { results } });
  }

  // Ends the stream: OK, or with a gRPC error status.
  end(code, details) {
    if (this.ended) return;
    if (code === undefined) this.flush();
    this.ended = true;
    if (code === undefined) this.call.end();
    else this.call.emit('error', { code, details });
  }
}

// The Session RPC over a Runtime, for the life of the process: the jobs of each session go to
// the Runtime, their results to the session open when they end (attach mode: kept in the Ledger
// until acknowledged). `attach`: the process serves a socket of its own and lives across
// sessions; otherwise (spawned) the first session's end is the process's (onChange tells the
// transport) and no other is taken.
class SessionCore {
  constructor(rt, protocolVersion, grpc, { attach, onChange = () => {}, trace = () => {} }) {
    this.rt = rt;
    this.protocolVersion = protocolVersion;
    this.grpc = grpc;
    this.attach = attach;
    this.onChange = onChange;
    rt.onChange = () => this.onChange(); // a job ended
    this.trace = trace; // $HANDLER_TRACE_FRAMES, as for the per-call RPCs
    this.ledger = new Ledger(attach);
    this.current = null; // the open Session
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
    const hello = this.hello();
    const { sent, kept } = this.ledger.open();
    const s = new Session(call, sent);
    s.maxFrameBytes = this.rt.maxFrameBytes;
    this.current = s;
    s.write({ hello });
    // ctx.enqueue sends on this session; its Features message says whether the sidecar takes
    // child jobs.
    this.rt.children.connect((frame) => s.write({ enqueue: enqueueMessage(frame) }));
    for (const msg of kept) s.writeResult(msg, 0);
    if (this.draining) s.write({ draining: {} });
    call.on('data', (m) => this._onMessage(s, m));
    // The sidecar closed its side: as EOF on stdin, the session ends once it holds no job of it.
    call.on('end', () => this._shutdown(s));
    call.on('cancelled', () => this._close(s));
    call.on('finish', () => this._close(s));
    call.on('error', () => this._close(s));
  }

  hello() {
    const h = this.rt.hello(this.protocolVersion);
    const running = this.rt.held();
    const held = new Set(running.map((r) => r.id));
    return {
      protocol: h.protocol, sdk: h.sdk, pid: h.pid, jobs: h.jobs, concurrency: h.concurrency,
      running,
      kept: [...this.ledger.kept.keys()].filter((id) => !held.has(id)),
      acks: this.attach,
      batches: true,
      features: true, // this SDK reads a Features message (child jobs)
    };
  }

  _onMessage(s, m) {
    if (s.ended) return;
    if (m.message === 'jobs') {
      // Sent empty right after the hello: the sidecar takes Results. That says nothing about
      // acknowledgements.
      s.batches = true;
      const jobs = m.jobs?.jobs ?? [];
      if (jobs.length > 0) this.ledger.heard(s.sent, false);
      for (const job of jobs) {
        if (s.ended) return;
        this._onFrame(s, { message: 'job', job });
      }
      return;
    }
    if (m.message === 'features') {
      // Not a stdio frame: what this sidecar speaks beyond v1.
      this.rt.children.announce(m.features?.names ?? []);
      return;
    }
    if (m.message === 'enqueued') {
      // The answer to an immediate child, checked as its frame.
      let frame;
      try {
        frame = decode(encode(enqueuedFrame(m.enqueued ?? {})), { maxFrameBytes: this.rt.maxFrameBytes });
      } catch (err) {
        if (!(err instanceof ProtocolError)) throw err;
        this._protocolError(s, err);
        return;
      }
      this.rt.children.answered(frame);
      return;
    }
    this.ledger.heard(s.sent, m.message === 'ack');
    if (m.message === 'ack') {
      // Not a stdio frame: the sidecar settled these results.
      if (this.ledger.acked(s.sent, m.ack?.ids ?? [])) this.onChange();
      return;
    }
    this._onFrame(s, m);
  }

  // One message that stands for a stdio frame: checked as that frame, then acted on.
  _onFrame(s, m) {
    let frame;
    try {
      frame = m.message === 'job' ? decodeJob(m.job, this.rt.maxFrameBytes) : decode(frameOf(m), { maxFrameBytes: this.rt.maxFrameBytes });
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err;
      this._protocolError(s, err);
      return;
    }
    this.trace(frame);
    switch (frame.type) {
      case 'job': return this._onJob(s, frame);
      case 'cancel': return this.rt.cancel(frame.id, frame.reason);
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
    if (this.rt.duplicate(msg.id)) return;
    if (this.draining) {
      // Told to stop: the attempt goes back at once, not counted as a failure.
      s.writeResult(resultMessage(draining(msg.id)), 0);
      return;
    }
    if (s.shutdown) {
      // As on stdio: a job that slips in after shutdown goes back for a retry.
      log(`job ${msg.id} (${msg.name}) received after shutdown; refusing it`);
      s.writeResult(resultMessage(shuttingDown(msg.id)), 0);
      return;
    }
    s.jobs.add(msg.id);
    this.rt.start(msg, (r) => this._finished(s, apartMessage(r), r.bytes), APART);
  }

  // A job's result (its Result message), reported by the Runtime: to the session open now (kept
  // there until it acknowledges it), else (attach mode) kept for the next one.
  _finished(s, msg, bytes) {
    s.jobs.delete(msg.id);
    const current = this.current;
    if (current && !current.ended) {
      current.writeResult(msg, bytes);
      this.ledger.sent(current.sent, msg);
    } else {
      this.ledger.keep(msg, 'ended with no session open');
    }
    this._maybeEnd(s);
  }

  _shutdown(s) {
    s.shutdown = true;
    this._maybeEnd(s);
  }

  _maybeEnd(s) {
    if (s.shutdown && s.jobs.size === 0) s.end();
  }

  // The session is over: ended by us, or broken.
  _close(s) {
    if (s.closed) return;
    s.closed = true;
    s.ended = true;
    if (this.current === s) {
      this.current = null;
      this.rt.children.disconnect('the session with the sidecar ended');
    }
    // Results written on it that the sidecar may never have received or recorded (the session
    // broke with them in flight, or before they were written) go to the next session, when
    // the sidecar acknowledges results.
    this.ledger.closed(s.sent, 'had its result unacknowledged when the session ended');
    s.jobs.clear();
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
    return Boolean(s && !s.ended && Ledger.awaiting(s.sent));
  }

  // Ids of results no session received (or acknowledged).
  lostResults() {
    const s = this.current;
    return this.ledger.lost(s ? s.sent : null);
  }
}

module.exports = { SessionCore, sessionService, resultMessage, reportedMessage, apartMessage, frameOf, decodeJob, MAX_KEPT_RESULTS, ACK_WAIT_MS };
