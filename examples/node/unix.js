'use strict';
// The unix transport: the same App served over gRPC on a Unix socket (docs/protocol.md,
// "The unix transport (gRPC)"). soniq-sidecar starts the process through hashicorp/go-plugin
// with SONIQ_TRANSPORT=unix; the process serves the Handler service of protocol/handler.proto
// (proto/handler.proto in this package, loaded at run time), the standard gRPC health service (service "plugin" SERVING: the
// sidecar's ping) and go-plugin's plugin.GRPCController (Shutdown: finish what it holds, exit
// 0), then prints go-plugin's handshake line `1|<protocol>|unix|<socket path>|grpc`.
//
// Required only in that mode: @grpc/grpc-js and @grpc/proto-loader are optional peer
// dependencies, not needed for stdio.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { SessionCore, sessionService, resultMessage } = require('./session');

const MAGIC_COOKIE_KEY = 'SONIQ_PLUGIN_MAGIC_COOKIE';
const MAGIC_COOKIE_VALUE = 'soniq-handler-v1';
const CORE_PROTOCOL_VERSION = 1; // go-plugin's own protocol
// The package ships its own copy of protocol/handler.proto (test/package.test.js keeps the
// two equal), so an installed package needs nothing from the repository.
const PROTO_PATH = process.env.SONIQ_HANDLER_PROTO || path.join(__dirname, 'proto', 'handler.proto');

function log(...parts) {
  process.stderr.write(`soniq-handler[${process.pid}]: ${parts.join(' ')}\n`);
}

// The health service's two messages, by hand (one string field in, one enum field out), so
// no health proto file or extra package is needed.
function decodeHealthRequest(buf) {
  let service = '';
  let i = 0;
  while (i < buf.length) {
    const tag = buf[i++];
    let len = 0;
    let shift = 0;
    for (;;) {
      const b = buf[i++];
      len += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if (b < 0x80 || i >= buf.length) break;
    }
    if (tag === 0x0a) service = buf.subarray(i, i + len).toString('utf8');
    if ((tag & 7) === 2) i += len; // skip other length-delimited fields
    else if ((tag & 7) !== 0) break; // nothing else is expected
  }
  return { service };
}
const SERVING = Buffer.from([0x08, 0x01]); // HealthCheckResponse{status: SERVING}

function unaryDef(pathName, deserialize, serialize) {
  return {
    path: pathName,
    requestStream: false,
    responseStream: false,
    requestDeserialize: deserialize,
    responseSerialize: serialize,
    requestSerialize: (x) => x,
    responseDeserialize: (x) => x,
  };
}

// $HANDLER_TRACE_FRAMES: a debugging aid for this transport, which has no frame stream to tap.
// Each message from the sidecar is appended to that file as the stdio frame it stands for,
// "> " first (the format of a recorder between sidecar and handler on stdio).
function tracer(file) {
  if (!file) return () => {};
  const fd = fs.openSync(file, 'a');
  return (frame) => fs.writeSync(fd, `> ${JSON.stringify(frame)}\n`);
}

function parseOr(text) {
  try { return JSON.parse(text); } catch { return text; }
}

const PEERS = ['@grpc/grpc-js', '@grpc/proto-loader'];

// Loads one of the optional peer dependencies, or exits 1 with a line saying what to install
// (the sidecar shows the child's stderr in its log).
function requirePeer(name, what = 'SONIQ_TRANSPORT=unix') {
  try {
    return require(name);
  } catch (err) {
    const missing = PEERS.filter((p) => {
      try {
        require.resolve(p);
        return false;
      } catch {
        return true;
      }
    });
    if (err.code === 'MODULE_NOT_FOUND' && missing.length > 0) {
      log(`${what} needs the packages ${PEERS.join(' and ')} (optional peer dependencies of soniq-handler, not needed for stdio); missing: ${missing.join(', ')}. Install them in the handler's project: npm install ${PEERS.join(' ')}`);
    } else {
      log(`${what}: cannot load ${name}: ${String(err.message).split('\n')[0]}`);
    }
    process.exit(1);
  }
}

function serve(app, protocolVersion, guard) {
  if (process.env[MAGIC_COOKIE_KEY] !== MAGIC_COOKIE_VALUE) {
    log(`SONIQ_TRANSPORT=unix: this process is a go-plugin handler and must be started by soniq-sidecar (${MAGIC_COOKIE_KEY} is not set as expected)`);
    process.exit(1);
  }
  const offered = (process.env.PLUGIN_PROTOCOL_VERSIONS ?? String(protocolVersion)).split(',').map((s) => s.trim());
  if (!offered.includes(String(protocolVersion))) {
    log(`go-plugin offers app protocol versions ${JSON.stringify(offered.join(','))}; this SDK speaks ${protocolVersion}`);
    process.exit(3);
  }
  const grpc = requirePeer('@grpc/grpc-js');
  const protoLoader = requirePeer('@grpc/proto-loader');
  const def = protoLoader.loadSync(PROTO_PATH, { keepCase: true, longs: Number, enums: String, defaults: false, oneofs: false });
  const pkg = grpc.loadPackageDefinition(def);

  let ownDir = null;
  let dir = process.env.PLUGIN_UNIX_SOCKET_DIR;
  if (!dir) ownDir = dir = fs.mkdtempSync(path.join(os.tmpdir(), 'soniq-handler-')); // mode 0700
  const socket = path.join(dir, `handler-${process.pid}.sock`);
  const cleanup = () => {
    try { fs.unlinkSync(socket); } catch { /* gone already */ }
    if (ownDir) fs.rmSync(ownDir, { recursive: true, force: true });
  };
  process.on('exit', cleanup);

  const trace = tracer(process.env.HANDLER_TRACE_FRAMES);
  const held = new Map(); // id -> entry, every job started until it ends
  const reasons = new Map(); // id -> reason of an announced cancel
  const waiting = [];
  let running = 0;
  let draining = false;
  let server = null;

  // The Session stream, the newer form of these calls: its end ends the process, as EOF on
  // stdin does on stdio.
  const core = new SessionCore(app, protocolVersion, grpc, {
    attach: false,
    trace,
    onChange: () => {
      if (core.sessionEnded) draining = true;
      maybeExit();
    },
  });

  const maybeExit = () => {
    if (!draining || held.size > 0 || core.held.size > 0) return;
    // Let the last responses (and the Shutdown reply) go out, then exit 0.
    server.tryShutdown(() => process.exit(0));
  };

  const start = (entry) => {
    running++;
    app._execute(entry)
      .catch((err) => ({ type: 'result', id: entry.msg.id, status: 'failed', error: { type: err?.name || 'Error', message: String(err?.message ?? err), traceback: err?.stack ?? null, retryable: true } }))
      .then((result) => {
        held.delete(entry.msg.id);
        reasons.delete(entry.msg.id);
        running--;
        while (running < app.concurrency && waiting.length > 0) start(waiting.shift());
        // Same limits as stdio: unserialisable or oversized results fail the job.
        const frame = JSON.parse(app._encodeResult(result));
        if (!entry.gone) entry.callback(null, resultMessage(frame));
        maybeExit();
      });
  };

  const handler = {
    Describe(call, callback) {
      const hello = app.hello(protocolVersion);
      callback(null, { protocol: hello.protocol, sdk: hello.sdk, pid: hello.pid, jobs: hello.jobs, concurrency: hello.concurrency });
    },
    Execute(call, callback) {
      const job = call.request;
      trace({
        type: 'job', id: job.id, name: job.name, args: parseOr(job.args_json), attempt: job.attempt,
        max_attempts: job.max_attempts, queue: job.queue, deadline: job.deadline_ms ?? null, traceparent: job.traceparent ?? null,
        worker_id: job.worker_id ?? null, scheduled_at: job.scheduled_at_ms ?? null, created_at: job.created_at_ms ?? null,
      });
      if (held.has(job.id)) {
        callback({ code: grpc.status.ALREADY_EXISTS, details: `job ${job.id} is already running here` });
        return;
      }
      if (draining) {
        callback(null, resultMessage({ id: job.id, status: 'failed', error: { type: 'ShuttingDown', message: 'handler process is shutting down', traceback: null, retryable: true } }));
        return;
      }
      let args;
      try {
        args = JSON.parse(job.args_json);
        if (args === null || typeof args !== 'object' || Array.isArray(args)) throw new Error('not a JSON object');
      } catch (err) {
        callback({ code: grpc.status.INVALID_ARGUMENT, details: `job ${job.id}: bad args_json: ${err.message}` });
        return;
      }
      const fn = app.handlers.get(job.name);
      const msg = {
        id: job.id,
        name: job.name,
        args,
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        queue: job.queue,
        deadline: job.deadline_ms ?? null,
        traceparent: job.traceparent ?? null,
        worker_id: job.worker_id ?? null,
        scheduled_at: job.scheduled_at_ms ?? null,
        created_at: job.created_at_ms ?? null,
      };
      const entry = { controller: new AbortController(), cancellable: fn ? fn.cancellable : true, msg, handler: fn, callback, gone: false };
      held.set(job.id, entry);
      // The call's cancellation is the cancel; its reason came first through Cancel.
      call.on('cancelled', () => {
        entry.gone = true;
        if (!held.has(job.id)) return;
        const reason = reasons.get(job.id) ?? 'call cancelled';
        if (entry.cancellable) {
          if (!entry.controller.signal.aborted) entry.controller.abort(reason);
        } else {
          log(`call of non-cancellable job ${job.id} (${job.name}) cancelled (${reason}); it runs to completion, its result goes nowhere`);
        }
      });
      if (running < app.concurrency) start(entry);
      else waiting.push(entry);
    },
    Session(call) {
      core.handle(call);
    },
    Cancel(call, callback) {
      const { id, reason } = call.request;
      trace({ type: 'cancel', id, reason });
      const entry = held.get(id);
      if (entry) {
        if (entry.cancellable) reasons.set(id, reason);
        else log(`cancel (${reason}) for non-cancellable job ${id} (${entry.msg.name}) ignored; it runs to completion`);
      }
      callback(null, {});
    },
  };

  const limit = app.maxFrameBytes + 64 * 1024; // a frame's worth of payload plus the envelope
  server = new grpc.Server({ 'grpc.max_receive_message_length': limit, 'grpc.max_send_message_length': limit });
  // Session's own definition (64-bit integers as strings), beside the per-call methods.
  const service = { ...pkg.soniq.handler.v1.Handler.service, ...sessionService(grpc, protoLoader, PROTO_PATH) };
  server.addService(service, handler);
  server.addService({
    Check: unaryDef('/grpc.health.v1.Health/Check', decodeHealthRequest, (x) => x),
  }, {
    Check(call, callback) {
      if (call.request.service === 'plugin' || call.request.service === '') callback(null, SERVING);
      else callback({ code: grpc.status.NOT_FOUND, details: `unknown service ${call.request.service}` });
    },
  });
  server.addService({
    Shutdown: unaryDef('/plugin.GRPCController/Shutdown', (x) => x, (x) => x),
  }, {
    Shutdown(call, callback) {
      trace({ type: 'shutdown' });
      draining = true;
      callback(null, Buffer.alloc(0));
      setImmediate(maybeExit);
    },
  });
  server.bindAsync(`unix:${socket}`, grpc.ServerCredentials.createInsecure(), (err) => {
    if (err) {
      log(`cannot listen on ${socket}: ${err.message}`);
      process.exit(1);
    }
    guard.write(`${CORE_PROTOCOL_VERSION}|${protocolVersion}|unix|${socket}|grpc\n`);
  });
}

module.exports = { serve, requirePeer, decodeHealthRequest, unaryDef, tracer, PROTO_PATH };
